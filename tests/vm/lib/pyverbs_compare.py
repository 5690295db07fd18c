#!/usr/bin/env python3
"""Compares two runs of rdma-core's pyverbs suite (files written by
pyverbs_verdicts.py): THEIRS on rdma-core's libibverbs, OURS on ours.

Usage: pyverbs_compare.py THEIRS OURS ALLOWED

Rules (issue 27): every test that passes on rdma-core passes on ours; a
test rdma-core skips may pass on ours (listed as such); any other
difference in verdict (ok / fail / error / skip with its reason) fails
the comparison unless ALLOWED lists the test, as lines of

    <test id> TAB <our verdicts> TAB <why>

where <our verdicts> is one verdict or several joined by "|" (a test whose
outcome on rxe depends on timing, on either library); # starts a comment.
A test id with "*" is a pattern (shell-style, as fnmatch) covering every
test it matches that has no line of its own: for a whole family of tests
that one missing verb decides (mlx5 direct verbs, say). Prints the table of every test that ran on either
side or differs, the differences, and a summary; exits 1 on an unlisted
difference or a test missing from either run.
"""

import fnmatch
import sys


def read_verdicts(path):
    """{test id: (verdict, reason)} in file order."""
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                continue
            out[parts[0]] = (parts[1], parts[2])
    return out


def read_allowed(path):
    """{test id: ([our allowed verdicts], why)}."""
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 3 or not parts[2].strip():
                sys.exit(f"{path}:{n}: want '<test id> TAB <our verdicts> TAB <why>'")
            out[parts[0]] = (parts[1].split("|"), parts[2])
    return out


def lookup(allowed, test_id):
    """The allowed entry for test_id: its own line, else the first
    pattern that matches it, else None."""
    if test_id in allowed:
        return allowed[test_id]
    for pattern, entry in allowed.items():
        if "*" in pattern and fnmatch.fnmatchcase(test_id, pattern):
            return entry
    return None


def show(v):
    verdict, reason = v
    return f"skip ({reason})" if verdict == "skip" and reason else verdict


def short(test_id):
    # tests.test_qp.QPTest.test_modify_ud_qp -> test_qp.QPTest.test_modify_ud_qp
    return test_id[len("tests."):] if test_id.startswith("tests.") else test_id


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    theirs = read_verdicts(sys.argv[1])
    ours = read_verdicts(sys.argv[2])
    allowed = read_allowed(sys.argv[3])
    bad, listed, better, missing = [], [], [], []
    used = set()
    rows = []
    for t in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(t), ours.get(t)
        if a is None or b is None:
            missing.append(f"{short(t)}: not in {'rdma-core' if a is None else 'our'} run")
            continue
        if a != b or a[0] != "skip":
            rows.append(f"{short(t):<70} {show(a):<40.40} {show(b):.60}")
        if a == b:
            continue
        if a[0] == "skip" and b[0] == "ok":
            better.append(f"{short(t)}: skipped on rdma-core ({a[1]}), passes on ours")
        elif (entry := lookup(allowed, t)) is not None and b[0] in entry[0]:
            listed.append(f"{short(t)}: {show(a)} -> {show(b)}: {entry[1]}")
            used.add(id(entry))
        else:
            bad.append(f"{short(t)}: rdma-core {show(a)}, ours {show(b)}")
    stale = [
        f"{short(t)}: listed ({'|'.join(allowed[t][0])}) but the same on both here ({show(ours[t])})"
        for t in sorted(allowed)
        if "*" not in t and t in theirs and t in ours and theirs[t] == ours[t]
    ] + [
        f"{p}: a pattern that covers no difference here"
        for p, entry in allowed.items()
        if "*" in p and id(entry) not in used
    ]
    print(f"{'test':<70} {'rdma-core':<40} ours")
    for r in rows:
        print(r)

    def count(v):
        c = {}
        for verdict, _ in v.values():
            c[verdict] = c.get(verdict, 0) + 1
        return ", ".join(f"{k} {c[k]}" for k in sorted(c))

    print(f"\nrdma-core: {len(theirs)} tests: {count(theirs)}")
    print(f"ours:      {len(ours)} tests: {count(ours)}")
    for title, items in [
        ("passes on ours, skipped on rdma-core", better),
        ("differs, listed in the allowed file", listed),
        ("UNLISTED DIFFERENCE", bad),
        ("MISSING", missing),
        ("note", stale),
    ]:
        for i in items:
            print(f"{title}: {i}")
    passed_theirs = sum(1 for v in theirs.values() if v[0] == "ok")
    passed_both = sum(1 for t, v in theirs.items() if v[0] == "ok" and ours.get(t, ("",))[0] == "ok")
    print(
        f"pyverbs: {passed_both} of the {passed_theirs} tests that pass on rdma-core pass on ours; "
        f"{len(better)} more pass on ours only; {len(listed)} listed differences; "
        f"{len(bad)} unlisted; {len(missing)} missing"
    )
    sys.exit(1 if bad or missing else 0)


if __name__ == "__main__":
    main()
