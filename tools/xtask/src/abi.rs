//! The export comparison: our `libibverbs.so.1`'s dynamic symbol table
//! against the reference list of rdma-core 56's
//! (`verbs/ibverbs/abi/rdma-core-56.syms`, whose header says how it was
//! made).
//!
//! A (symbol, version) pair is written `name@@VERSION` when it is the
//! name's default version (what a program linked against the library
//! binds) and `name@VERSION` when it is a compatibility version (bound
//! only by programs linked against an older library), as `readelf` prints
//! them. Every pair of the reference must be exported, with the same
//! kind; a pair of ours that the reference lacks is allowed only if it is
//! one of [`OUR_OWN`] (documented there) or a pair of the host's installed
//! rdma-core library (rdma-core 44 on Debian 12, whose public set is
//! 56's less two private names, so this allows nothing more today).

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::util;

/// The reference list, relative to the workspace.
pub const REFERENCE: &str = "verbs/ibverbs/abi/rdma-core-56.syms";

/// Pairs of ours that rdma-core has not: `rverbs_ibverbs_version`, which
/// says which build of our library a program loaded (and marks the file
/// as ours for the linkage check, `linkage.rs`), and the EFA direct verbs
/// our `libefa.so.1` forwards to (`efadv.rs`; rdma-core keeps them in its
/// libefa).
pub const OUR_OWN: &[&str] = &[
    "rverbs_ibverbs_version@@RVERBS_IBVERBS_0",
    "rverbs_efadv_cq_from_ibv_cq_ex@@RVERBS_IBVERBS_0",
    "rverbs_efadv_create_cq@@RVERBS_IBVERBS_0",
    "rverbs_efadv_create_driver_qp@@RVERBS_IBVERBS_0",
    "rverbs_efadv_create_qp_ex@@RVERBS_IBVERBS_0",
    "rverbs_efadv_query_ah@@RVERBS_IBVERBS_0",
    "rverbs_efadv_query_device@@RVERBS_IBVERBS_0",
];

/// One exported (symbol, version) pair.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pair {
    /// The symbol's name.
    pub name: String,
    /// Its version node.
    pub version: String,
    /// Whether this is the name's default version (`@@`).
    pub default: bool,
}

impl Pair {
    /// Parses `name@@VERSION` or `name@VERSION`.
    pub fn parse(s: &str) -> Option<Pair> {
        let (name, rest) = s.split_once('@')?;
        let (version, default) = match rest.strip_prefix('@') {
            Some(v) => (v, true),
            None => (rest, false),
        };
        let word = |w: &str| {
            !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        };
        if !word(name) || !word(version) || name.contains('.') {
            return None;
        }
        Some(Pair {
            name: name.to_string(),
            version: version.to_string(),
            default,
        })
    }

    /// The pair without its kind: (name, version).
    fn key(&self) -> (&str, &str) {
        (&self.name, &self.version)
    }
}

impl fmt::Display for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.default { "@@" } else { "@" };
        write!(f, "{}{at}{}", self.name, self.version)
    }
}

/// The pairs of a list file: one pair a line; `#` comments and blank
/// lines skipped.
pub fn parse_list(text: &str) -> Result<BTreeSet<Pair>> {
    let mut out = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let p = Pair::parse(line).with_context(|| format!("line {}: {line:?}", i + 1))?;
        if out.iter().any(|q: &Pair| q.key() == p.key()) {
            bail!("line {}: {line} is listed twice", i + 1);
        }
        out.insert(p);
    }
    if out.is_empty() {
        bail!("the list holds no pair");
    }
    Ok(out)
}

/// The defined, versioned, global symbols of `readelf --dyn-syms -W`'s
/// output, but glibc's and libgcc's (a library's imports are undefined;
/// a version definition is an `ABS` symbol named as its version).
pub fn parse_readelf(text: &str) -> BTreeSet<Pair> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name@Version
        if w.len() < 8 || w[6] == "UND" || w[6] == "ABS" || w[4] != "GLOBAL" {
            continue;
        }
        // Older readelf prints a compatibility version as `name@VER (2)`.
        if let Some(p) = Pair::parse(w[7]) {
            if p.version.starts_with("GLIBC") || p.version.starts_with("GCC") {
                continue;
            }
            out.insert(p);
        }
    }
    out
}

/// The pairs `lib` exports (`readelf --dyn-syms -W`).
pub fn exported(lib: &Path) -> Result<BTreeSet<Pair>> {
    let out = util::output(Command::new("readelf").args(["--dyn-syms", "-W"]).arg(lib))?;
    Ok(parse_readelf(&out))
}

/// What [`compare`] found.
#[derive(Debug, Default, PartialEq)]
pub struct Report {
    /// Reference pairs we do not export at all.
    pub missing: Vec<Pair>,
    /// Reference pairs we export with the other kind: (theirs, ours).
    pub wrong_kind: Vec<(Pair, Pair)>,
    /// Pairs of ours the reference lacks, allowed.
    pub allowed_extra: Vec<Pair>,
    /// Pairs of ours the reference lacks, not allowed.
    pub extra: Vec<Pair>,
}

impl Report {
    /// Whether the comparison passes.
    pub fn ok(&self) -> bool {
        self.missing.is_empty() && self.wrong_kind.is_empty() && self.extra.is_empty()
    }

    /// The failures, one a line, each naming its pair.
    pub fn problems(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .missing
            .iter()
            .map(|p| format!("missing {p}"))
            .collect();
        v.extend(self.wrong_kind.iter().map(|(r, o)| {
            format!(
                "{r} is exported as {o} ({})",
                if r.default {
                    "rdma-core's is the default version, ours a compatibility one"
                } else {
                    "rdma-core's is a compatibility version, ours the default"
                }
            )
        }));
        v.extend(
            self.extra
                .iter()
                .map(|p| format!("unexpected {p} (not rdma-core's, not documented as ours)")),
        );
        v
    }
}

/// Compares `ours` with `reference`; `allowed` are the extra pairs
/// allowed (by name and version; either kind).
pub fn compare(
    reference: &BTreeSet<Pair>,
    ours: &BTreeSet<Pair>,
    allowed: &BTreeSet<Pair>,
) -> Report {
    let mut r = Report::default();
    for p in reference {
        match ours.iter().find(|o| o.key() == p.key()) {
            Some(o) if o.default == p.default => {}
            Some(o) => r.wrong_kind.push((p.clone(), o.clone())),
            None => r.missing.push(p.clone()),
        }
    }
    for o in ours {
        if reference.iter().any(|p| p.key() == o.key()) {
            continue;
        }
        if allowed.iter().any(|a| a.key() == o.key()) {
            r.allowed_extra.push(o.clone());
        } else {
            r.extra.push(o.clone());
        }
    }
    r
}

/// The host's rdma-core libibverbs of the same file name as ours (`ours`),
/// if one is installed where Debian puts it (its pairs are allowed extras).
fn host_rdma_core(ours: &Path) -> Option<BTreeSet<Pair>> {
    let lib = Path::new("/usr/lib/x86_64-linux-gnu").join(ours.file_name()?);
    let pairs = exported(&lib).ok()?;
    // Ours carries its marker; the host's must be rdma-core's.
    if pairs.iter().any(|p| p.name == "rverbs_ibverbs_version") {
        return None;
    }
    Some(pairs)
}

/// Checks `lib` against the reference list in `ws`: fails naming every
/// missing, mis-kinded or unexpected pair; prints the allowed extras and
/// how many pairs matched.
pub fn check(ws: &Path, lib: &Path) -> Result<()> {
    let path = ws.join(REFERENCE);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let reference = parse_list(&text).with_context(|| format!("parsing {}", path.display()))?;
    let ours = exported(lib)?;
    let mut allowed: BTreeSet<Pair> = OUR_OWN.iter().filter_map(|s| Pair::parse(s)).collect();
    if let Some(host) = host_rdma_core(lib) {
        allowed.extend(host);
    }
    let report = compare(&reference, &ours, &allowed);
    for p in &report.allowed_extra {
        say!("abi: {p} is ours and not rdma-core 56's: allowed");
    }
    if !report.ok() {
        let problems = report.problems();
        bail!(
            "{} against {REFERENCE}: {} problem(s):\n  {}",
            lib.display(),
            problems.len(),
            problems.join("\n  ")
        );
    }
    say!(
        "abi: {} exports all {} (symbol, version) pairs of rdma-core 56's library ({} compatibility versions), each of the same kind",
        lib.display(),
        reference.len(),
        reference.iter().filter(|p| !p.default).count()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<Pair> {
        items.iter().map(|s| Pair::parse(s).unwrap()).collect()
    }

    #[test]
    fn pairs_parse_with_their_kind() {
        let p = Pair::parse("ibv_get_device_list@IBVERBS_1.0").unwrap();
        assert_eq!(
            (p.name.as_str(), p.version.as_str(), p.default),
            ("ibv_get_device_list", "IBVERBS_1.0", false)
        );
        let p = Pair::parse("ibv_get_device_list@@IBVERBS_1.1").unwrap();
        assert!(p.default);
        assert_eq!(p.to_string(), "ibv_get_device_list@@IBVERBS_1.1");
        for bad in ["ibv_x", "@V", "x@", "x@@", "x@@@V", "a b@V", "x.y@V"] {
            assert!(Pair::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn lists_skip_comments_and_refuse_repeats() {
        let l = parse_list("# a comment\n\nf@@V_1\n f@V_0 \n").unwrap();
        assert_eq!(l, set(&["f@@V_1", "f@V_0"]));
        assert!(parse_list("f@@V_1\nf@V_1\n").is_err());
        assert!(parse_list("# nothing\n").is_err());
        assert!(parse_list("f@@V_1\nnot a pair\n").is_err());
    }

    #[test]
    fn readelf_output_gives_defined_versioned_globals() {
        let text = "\
Symbol table '.dynsym' contains 5 entries:
   Num:    Value          Size Type    Bind   Vis      Ndx Name
     1: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND free@GLIBC_2.2.5 (2)
   157: 00000000000202c1     1 OBJECT  GLOBAL DEFAULT   24 verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34
   262: 0000000000011470   292 FUNC    GLOBAL DEFAULT   13 ibv_get_device_list@IBVERBS_1.0
   263: 0000000000011ec0   269 FUNC    GLOBAL DEFAULT   13 ibv_get_device_list@@IBVERBS_1.1
   271: 0000000000000000     0 OBJECT  GLOBAL DEFAULT  ABS IBVERBS_PRIVATE_34
   272: 0000000000011470    12 FUNC    LOCAL  DEFAULT   13 hidden@@IBVERBS_1.1
   273: 0000000000011470    12 FUNC    GLOBAL DEFAULT   13 __cxa_finalize@@GLIBC_2.2.5
";
        assert_eq!(
            parse_readelf(text),
            set(&[
                "verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34",
                "ibv_get_device_list@IBVERBS_1.0",
                "ibv_get_device_list@@IBVERBS_1.1",
            ])
        );
    }

    #[test]
    fn comparison_names_missing_mis_kinded_and_unexpected_pairs() {
        let reference = set(&["f@V_1.0", "f@@V_1.1", "g@@V_1.1", "h@V_1.1", "p@@PRIV"]);
        let ours = set(&[
            "f@@V_1.1",
            "g@@V_1.1",
            "h@@V_1.1",
            "p@@PRIV",
            "mine@@OWN_0",
            "stray@@V_1.1",
        ]);
        let allowed = set(&["mine@@OWN_0"]);
        let r = compare(&reference, &ours, &allowed);
        assert_eq!(r.missing, set(&["f@V_1.0"]).into_iter().collect::<Vec<_>>());
        assert_eq!(r.wrong_kind.len(), 1);
        assert_eq!(r.wrong_kind[0].0.to_string(), "h@V_1.1");
        assert_eq!(r.wrong_kind[0].1.to_string(), "h@@V_1.1");
        assert_eq!(
            r.allowed_extra,
            set(&["mine@@OWN_0"]).into_iter().collect::<Vec<_>>()
        );
        assert_eq!(
            r.extra,
            set(&["stray@@V_1.1"]).into_iter().collect::<Vec<_>>()
        );
        assert!(!r.ok());
        let problems = r.problems();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("missing f@V_1.0"));
        assert!(problems[1].contains("h@V_1.1 is exported as h@@V_1.1"));
        assert!(problems[2].contains("unexpected stray@@V_1.1"));
        // Everything there, nothing unexpected: passes.
        let full = set(&[
            "f@V_1.0",
            "f@@V_1.1",
            "g@@V_1.1",
            "h@V_1.1",
            "p@@PRIV",
            "mine@@OWN_0",
        ]);
        let r = compare(&reference, &full, &allowed);
        assert!(r.ok(), "{r:?}");
        assert_eq!(r.allowed_extra.len(), 1);
    }

    #[test]
    fn the_reference_in_the_tree_is_rdma_core_56s() {
        let text = std::fs::read_to_string(crate::util::workspace_root().join(REFERENCE)).unwrap();
        let r = parse_list(&text).unwrap();
        assert_eq!(r.len(), 182);
        assert_eq!(r.iter().filter(|p| !p.default).count(), 34);
        assert_eq!(
            r.iter()
                .filter(|p| p.version.starts_with("IBVERBS_PRIVATE_"))
                .count(),
            73
        );
        assert!(r.contains(&Pair::parse("ibv_get_device_list@IBVERBS_1.0").unwrap()));
        assert!(r.contains(&Pair::parse("ibv_register_driver@IBVERBS_1.1").unwrap()));
        assert!(r.contains(&Pair::parse("ibv_reg_mr_iova@@IBVERBS_1.7").unwrap()));
        // Sorted as the header says (LC_ALL=C: bytewise).
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        let mut sorted = lines.clone();
        sorted.sort_unstable();
        assert_eq!(lines, sorted);
    }
}
