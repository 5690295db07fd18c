//! The interop matrix: the rows the interop scripts append to a run's
//! report file, merged by run and printed as one table.

use std::path::Path;

use crate::util::print_line;

/// File (in a run directory, named to scripts by `RVERBS_REPORT`) where
/// interop scripts append one `mix<TAB>transport<TAB>size<TAB>result` line
/// per run.
pub(super) const INTEROP_FILE: &str = "interop.tsv";

/// One row of the interop matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct InteropRow {
    pub(super) mix: String,
    pub(super) transport: String,
    pub(super) size: String,
    pub(super) result: String,
}

/// The rows a script reported (none if it reported nothing).
pub(super) fn read_interop(path: &Path) -> Vec<InteropRow> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            Some(InteropRow {
                mix: f.next()?.to_string(),
                transport: f.next()?.to_string(),
                size: f.next()?.to_string(),
                result: f.next()?.to_string(),
            })
        })
        .collect()
}

/// Merges rows reported for the same run by both guests of a pair: the
/// run is ok only if every report of it is.
pub(super) fn merge_interop(rows: Vec<InteropRow>) -> Vec<InteropRow> {
    let mut out: Vec<InteropRow> = Vec::new();
    for r in rows {
        match out
            .iter_mut()
            .find(|o| o.mix == r.mix && o.transport == r.transport && o.size == r.size)
        {
            Some(o) if o.result == "ok" => o.result = r.result,
            Some(_) => {}
            None => out.push(r),
        }
    }
    out
}

/// Prints the interop matrix (mix, transport, size, result) of the run.
pub(super) fn print_interop(rows: &[InteropRow]) {
    if rows.is_empty() {
        return;
    }
    let w = |f: fn(&InteropRow) -> &str, title: &str| {
        rows.iter()
            .map(|r| f(r).len())
            .max()
            .unwrap_or(0)
            .max(title.len())
    };
    let (wm, wt, ws) = (
        w(|r| &r.mix, "mix"),
        w(|r| &r.transport, "transport"),
        w(|r| &r.size, "size"),
    );
    // A row passes when its result starts with "ok" ("ok (2nd try; ...)").
    let failed = rows.iter().filter(|r| !r.result.starts_with("ok")).count();
    say!("interop matrix ({} runs, {failed} failed):", rows.len());
    print_line(&format!(
        "  {:<wm$}  {:<wt$}  {:>ws$}  result",
        "mix", "transport", "size"
    ));
    for r in rows {
        print_line(&format!(
            "  {:<wm$}  {:<wt$}  {:>ws$}  {}",
            r.mix, r.transport, r.size, r.result
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interop_rows_merge_by_run() {
        let row = |m: &str, r: &str| InteropRow {
            mix: m.into(),
            transport: "rc".into(),
            size: "64".into(),
            result: r.into(),
        };
        let merged = merge_interop(vec![
            row("x", "ok"),
            row("y", "ok"),
            row("x", "FAIL (exit 1)"),
            row("y", "ok"),
        ]);
        assert_eq!(merged, vec![row("x", "FAIL (exit 1)"), row("y", "ok")]);
        let dir = std::env::temp_dir().join(format!("interop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join(INTEROP_FILE);
        std::fs::write(&f, "a\trc\t64\tok\nmalformed line\nb\tud\t1024\tFAIL (x)\n").unwrap();
        let rows = read_interop(&f);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].result, "FAIL (x)");
        assert!(read_interop(&dir.join("missing")).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
