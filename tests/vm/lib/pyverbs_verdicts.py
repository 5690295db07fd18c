#!/usr/bin/env python3
"""Runs rdma-core's pyverbs test suite (Debian's python3-pyverbs ships it
under /usr/share/doc/rdma-core/tests, gzipped) and writes one line per
test to OUT as soon as the test ends:

    <test id> TAB <ok|fail|error|skip|xfail|xpass> TAB <skip reason or "">

so that a crash of the interpreter still leaves the verdicts of the tests
before it, and the test that was running is the one after the last line
(its id is written to OUT.running first). OUT.times gets each test's
wall time: `<test id> TAB <seconds>`.

Usage: pyverbs_verdicts.py TESTS_DIR OUT DEV [PER_TEST_SECONDS]

With PER_TEST_SECONDS, a test still running after that long is
interrupted (SIGALRM raises TestTimeout inside it) and counts as an
error whose message says so: one test that waits forever for a
completion does not take the rest of the suite with it.

With PYVERBS_SEED=1 in the environment, Python's `random` is seeded from
each test's id as the test starts: the suite draws its QP capacities and
buffer sizes at random, and two runs (on two libraries) then draw the same
values per test, so their verdicts compare test for test.

TESTS_DIR is an unpacked copy of the suite (the `tests` package: its
__init__.py, args_parser.py and test_*.py). The suite is loaded as its own
run_tests.py loads it, with `--dev DEV`.
"""

import os
import random
import signal
import sys
import time
import unittest
from importlib.machinery import SourceFileLoader


class TestTimeout(Exception):
    """Raised inside a test that ran past the per-test limit."""


def _alarm(signum, frame):
    raise TestTimeout(f"still running after {Recorder.limit} s (per-test limit)")


class Recorder(unittest.TextTestResult):
    """A result that also writes each test's verdict to a file."""

    out = None
    running = None
    times = None
    started = 0.0
    limit = 0
    seeded = False

    def _write(self, test, verdict, reason=""):
        reason = " ".join(str(reason).split())
        self.out.write(f"{test.id()}\t{verdict}\t{reason}\n")
        self.out.flush()
        self.times.write(f"{test.id()}\t{time.monotonic() - self.started:.2f}\n")
        self.times.flush()

    def startTest(self, test):
        with open(self.running, "w") as f:
            f.write(test.id() + "\n")
        Recorder.started = time.monotonic()
        if Recorder.seeded:
            random.seed(test.id())
        if Recorder.limit:
            signal.alarm(Recorder.limit)
        super().startTest(test)

    def stopTest(self, test):
        if Recorder.limit:
            signal.alarm(0)
        super().stopTest(test)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._write(test, "ok")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._write(test, "fail")

    def addError(self, test, err):
        super().addError(test, err)
        self._write(test, "error")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._write(test, "skip", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._write(test, "xfail")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._write(test, "xpass")


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    tests_dir, out_path, dev = sys.argv[1:4]
    if len(sys.argv) == 5:
        Recorder.limit = int(sys.argv[4])
        signal.signal(signal.SIGALRM, _alarm)
    tests_dir = os.path.abspath(tests_dir)
    sys.path.insert(0, tests_dir)
    # The suite's own argument parser reads sys.argv.
    sys.argv = [os.path.join(tests_dir, "run_tests.py"), "--dev", dev]
    from args_parser import parser  # noqa: E402 (the suite's module)

    parser.parse_args()
    tests = SourceFileLoader("tests", os.path.join(tests_dir, "__init__.py")).load_module()
    suite = unittest.defaultTestLoader.loadTestsFromModule(tests)
    with open(out_path, "w") as out, open(out_path + ".times", "w") as times:
        Recorder.out = out
        Recorder.times = times
        Recorder.running = out_path + ".running"
        Recorder.seeded = os.environ.get("PYVERBS_SEED") == "1"
        runner = unittest.TextTestRunner(verbosity=2, resultclass=Recorder, stream=sys.stdout)
        runner.run(suite)
    try:
        os.unlink(out_path + ".running")
    except FileNotFoundError:
        pass


if __name__ == "__main__":
    main()
