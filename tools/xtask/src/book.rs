//! `cargo xtask book`: the book under `docs/book` and the pages around it.
//!
//! 1. The size limits: `README.md` at most [`README_MAX_LINES`] lines (a
//!    landing page), `BENCHMARKS.md` at most [`BENCHMARKS_MAX_LINES`]
//!    (results, not a notebook).
//! 2. The links of the book's chapters, `README.md` and `BENCHMARKS.md`:
//!    every relative link names a file that exists (a chapter's link stays
//!    inside the book's `src`, or the rendered book would lose it), and
//!    every `#anchor` names a heading of its target, with the ids mdBook
//!    and GitHub give headings. Links with a scheme (`https:`) are not
//!    followed: no network.
//! 3. The chapters and the doc tests: every chapter is listed in
//!    `SUMMARY.md` and included in `verbs/src/lib.rs` or, for the
//!    connection manager's chapters, `verbs/cm/src/lib.rs` (module
//!    `book` of each, see [`BOOK_LIBS`]), so its Rust code is compiled by
//!    `cargo test --doc -p rverbs -p rverbs-cm`.
//! 4. `mdbook build docs/book` (into `target/book`), with mdBook
//!    [`MDBOOK_VERSION`], installed with `cargo install` if missing.
//! 5. The doc tests themselves, all of the README's and the book's
//!    (`cargo xtask book`), or only the tokio chapter's (`cargo xtask
//!    test`, whose host tests run the others but not with the `tokio`
//!    feature).

use std::collections::{BTreeSet, HashSet};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::util::{self, cargo_bin, describe, workspace_root};

/// The most lines `README.md` may have.
pub const README_MAX_LINES: usize = 250;
/// The most lines `BENCHMARKS.md` may have.
pub const BENCHMARKS_MAX_LINES: usize = 300;
/// The book's root (`book.toml`), from the workspace root.
const BOOK_DIR: &str = "docs/book";
/// The libraries whose module `book` includes the pages, each as its
/// `lib.rs` (from the workspace root), the prefix of its includes (the
/// workspace root from that file's folder) and its package.
const BOOK_LIBS: &[(&str, &str, &str)] = &[
    ("verbs/src/lib.rs", "../../", "rverbs"),
    ("verbs/cm/src/lib.rs", "../../../", "rverbs-cm"),
];
/// The module of each of [`BOOK_LIBS`] that holds the included pages.
const DOCTEST_MODULE: &str = "book::";
/// The chapter whose snippets need the `tokio` feature (in `rverbs-cm`).
const TOKIO_CHAPTER: &str = "book::ApiTokio";
/// The mdBook this project builds with (`.ci/run` installs it; so does
/// [`ensure_mdbook`] where it is missing).
pub const MDBOOK_VERSION: &str = "0.5.4";

/// Which of the README's and the book's doc tests to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Doctests {
    /// All of them (`cargo xtask book`).
    All,
    /// Only the tokio chapter's (`cargo xtask test`: its host tests
    /// compile the rest).
    TokioOnly,
}

/// Runs every check; returns each one's name and verdict (what failed is
/// printed).
pub fn check_all(doctests: Doctests) -> Vec<(String, bool)> {
    let ws = workspace_root();
    let mut results = Vec::new();
    let mut record = |name: &str, r: Result<String>| {
        match &r {
            Ok(detail) => say!("{name}: ok ({detail})"),
            Err(e) => say!("{name}: FAILED: {e:#}"),
        }
        results.push((name.to_string(), r.is_ok()));
    };
    record("book: page sizes", check_sizes(&ws));
    record("book: links", check_links(&ws));
    record("book: chapters compiled as doc tests", check_chapters(&ws));
    record("book: mdbook build", build(&ws));
    record("book: doc tests", doctests_run(&ws, doctests));
    results
}

/// `cargo xtask book`. Returns whether every check passed.
pub fn book_command() -> Result<bool> {
    let started = std::time::Instant::now();
    let results = check_all(Doctests::All);
    let failed: Vec<&str> = results
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(n, _)| n.as_str())
        .collect();
    say!("book: {} s", started.elapsed().as_secs());
    if !failed.is_empty() {
        say!("failed: {}", failed.join(", "));
    }
    util::print_line(&format!(
        "{} passed, {} failed",
        results.len() - failed.len(),
        failed.len()
    ));
    Ok(failed.is_empty())
}

/// The line limits of README.md and BENCHMARKS.md.
fn check_sizes(ws: &Path) -> Result<String> {
    let mut detail = Vec::new();
    let mut over = Vec::new();
    for (name, max) in [
        ("README.md", README_MAX_LINES),
        ("BENCHMARKS.md", BENCHMARKS_MAX_LINES),
    ] {
        let text = read(&ws.join(name))?;
        let n = text.lines().count();
        detail.push(format!("{name} {n} of {max} lines"));
        if n > max {
            over.push(format!("{name} has {n} lines, more than {max}"));
        }
    }
    if !over.is_empty() {
        bail!("{}", over.join("; "));
    }
    Ok(detail.join(", "))
}

/// The book's source folder.
fn src_dir(ws: &Path) -> PathBuf {
    ws.join(BOOK_DIR).join("src")
}

/// Every `.md` file under `dir`, sorted.
fn markdown_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// `path` relative to `base`, for messages.
fn rel<'a>(path: &'a Path, base: &Path) -> std::borrow::Cow<'a, str> {
    path.strip_prefix(base).unwrap_or(path).to_string_lossy()
}

/// The files whose links are checked: the chapters, README.md and
/// BENCHMARKS.md.
fn linked_pages(ws: &Path) -> Result<Vec<PathBuf>> {
    let mut pages = markdown_files(&src_dir(ws))?;
    pages.push(ws.join("README.md"));
    pages.push(ws.join("BENCHMARKS.md"));
    Ok(pages)
}

/// Every relative link and anchor of the pages resolves.
fn check_links(ws: &Path) -> Result<String> {
    let src = src_dir(ws);
    let mut broken = Vec::new();
    let (mut checked, mut external) = (0usize, 0usize);
    for page in linked_pages(ws)? {
        let text = read(&page)?;
        let dir = page.parent().unwrap_or(ws);
        let in_book = page.starts_with(&src);
        for (line, target) in links(&text) {
            let here = format!("{}:{line}: ({target})", rel(&page, ws));
            if has_scheme(&target) {
                external += 1;
                continue;
            }
            checked += 1;
            if let Err(why) = resolve(ws, &src, dir, &page, in_book, &target) {
                broken.push(format!("{here}: {why}"));
            }
        }
    }
    if !broken.is_empty() {
        bail!("{} broken:\n  {}", broken.len(), broken.join("\n  "));
    }
    Ok(format!(
        "{checked} links checked, {external} to web sites not followed"
    ))
}

/// Whether a link target starts with a URI scheme (`https:`, `mailto:`).
fn has_scheme(target: &str) -> bool {
    match target.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        }
        None => false,
    }
}

/// Checks one relative link of `page` (in `dir`): its file exists (inside
/// the book's `src` for a chapter) and its anchor names a heading.
fn resolve(
    ws: &Path,
    src: &Path,
    dir: &Path,
    page: &Path,
    in_book: bool,
    target: &str,
) -> std::result::Result<(), String> {
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        normalize(&dir.join(path))
    };
    if !file.exists() {
        return Err(format!("{} does not exist", rel(&file, ws)));
    }
    if in_book && !file.starts_with(src) {
        return Err(format!(
            "{} is outside the book's src: the rendered book has no such page",
            rel(&file, ws)
        ));
    }
    let Some(anchor) = anchor else {
        return Ok(());
    };
    if file.is_dir() || file.extension().is_none_or(|e| e != "md") {
        return Err(format!(
            "#{anchor} in {}, which is not a markdown page",
            rel(&file, ws)
        ));
    }
    let text = read(&file).map_err(|e| format!("{e:#}"))?;
    if heading_ids(&text).contains(anchor) {
        Ok(())
    } else {
        Err(format!(
            "no heading of {} has the id {anchor}",
            rel(&file, ws)
        ))
    }
}

/// `path` with `.` and `..` taken out (the file need not exist).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The lines of `text` outside fenced code blocks, with their numbers
/// (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = if t.starts_with("```") {
            Some("```")
        } else if t.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// `line` with the text of every inline code span (between backticks)
/// replaced by spaces, so that code is not read as links or markup.
fn blank_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(c);
        } else if in_code {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// The targets of the inline links and images (`[text](target "title")`)
/// and of the link definitions (`[name]: target`) of a markdown page, with
/// their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, raw) in prose_lines(text) {
        let line = blank_code_spans(raw);
        let t = line.trim_start();
        if let Some(close) = t.strip_prefix('[').and_then(|r| r.find(']')) {
            if let Some(def) = t[close + 1..].strip_prefix("]:") {
                if let Some(target) = def.split_whitespace().next() {
                    out.push((n, unbracket(target).to_string()));
                }
                continue;
            }
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            // The target ends at the parenthesis that closes the link
            // (targets may hold balanced parentheses).
            let mut depth = 0usize;
            let mut end = after.len();
            for (i, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = i;
                        break;
                    }
                    ')' => depth -= 1,
                    _ => {}
                }
            }
            let inner = after[..end].trim();
            let target = match inner.strip_prefix('<') {
                Some(b) => b.split('>').next().unwrap_or(""),
                None => inner.split_whitespace().next().unwrap_or(""),
            };
            if !target.is_empty() {
                out.push((n, target.to_string()));
            }
            rest = &after[end.min(after.len())..];
        }
    }
    out
}

/// A link target without its optional angle brackets (`<target>`).
fn unbracket(target: &str) -> &str {
    target
        .strip_prefix('<')
        .and_then(|t| t.strip_suffix('>'))
        .unwrap_or(target)
}

/// The ids of a page's headings (ATX, `#` to `######`), as mdBook makes
/// them (and, for these pages, GitHub): the heading's text, lowercased,
/// keeping letters, digits, `_` and `-`, spaces as `-`; a repeated id
/// gets `-1`, `-2`, ...
fn heading_ids(text: &str) -> HashSet<String> {
    let mut ids = HashSet::new();
    for (_, line) in prose_lines(text) {
        let t = line.trim_start();
        let hashes = t.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !t[hashes..].starts_with(' ') {
            continue;
        }
        let id = id_from_content(&heading_text(t[hashes..].trim()));
        let mut unique = id.clone();
        let mut k = 1;
        while !ids.insert(unique.clone()) {
            unique = format!("{id}-{k}");
            k += 1;
        }
    }
    ids
}

/// A heading's text as rendered: markup characters (code backticks,
/// emphasis) dropped, a link's text kept and its target dropped, a
/// closing run of `#` dropped.
fn heading_text(heading: &str) -> String {
    let heading = heading.trim_end_matches('#').trim_end();
    let mut out = String::new();
    let mut chars = heading.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' | '*' => {}
            '[' => {}
            ']' if chars.peek() == Some(&'(') => {
                for c in chars.by_ref() {
                    if c == ')' {
                        break;
                    }
                }
            }
            ']' => {}
            _ => out.push(c),
        }
    }
    out
}

/// mdBook's id of a heading's text (its `id_from_content`).
fn id_from_content(content: &str) -> String {
    content
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c)
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The chapters `SUMMARY.md` links, relative to the book's `src`.
fn summary_chapters(src: &Path) -> Result<BTreeSet<String>> {
    let text = read(&src.join("SUMMARY.md"))?;
    Ok(links(&text)
        .into_iter()
        .map(|(_, t)| t)
        .filter(|t| !has_scheme(t) && !t.is_empty())
        .map(|t| t.split('#').next().unwrap_or("").to_string())
        .collect())
}

/// Every chapter is in SUMMARY.md, and README.md and every chapter are
/// included in one of [`BOOK_LIBS`].
fn check_chapters(ws: &Path) -> Result<String> {
    let src = src_dir(ws);
    let libs = BOOK_LIBS
        .iter()
        .map(|(lib, prefix, _)| Ok((*lib, *prefix, read(&ws.join(lib))?)))
        .collect::<Result<Vec<_>>>()?;
    let summary = summary_chapters(&src)?;
    let mut problems = Vec::new();
    let mut included = 0usize;
    let mut pages = vec![("README.md".to_string(), ws.join("README.md"))];
    for file in markdown_files(&src)? {
        let name = rel(&file, &src).into_owned();
        if name == "SUMMARY.md" {
            continue;
        }
        if !summary.contains(&name) {
            problems.push(format!(
                "{name} is not in SUMMARY.md: mdBook would not render it"
            ));
        }
        pages.push((name, file));
    }
    for (name, file) in &pages {
        let path = rel(file, ws);
        let including = libs
            .iter()
            .filter(|(_, prefix, text)| text.contains(&format!("include_str!(\"{prefix}{path}\")")))
            .count();
        match including {
            1 => included += 1,
            0 => problems.push(format!(
                "{name}: no library's module book includes it (`#[doc = \
                 include_str!(\"../../{path}\")]` in verbs/src/lib.rs, or with \
                 ../../../ in verbs/cm/src/lib.rs), so its code is not compiled"
            )),
            _ => problems.push(format!(
                "{name}: included by both verbs/src/lib.rs and verbs/cm/src/lib.rs \
                 (its code would be compiled twice)"
            )),
        }
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("; "));
    }
    let names: Vec<&str> = libs.iter().map(|(lib, _, _)| *lib).collect();
    Ok(format!(
        "{included} pages included in {}",
        names.join(" and ")
    ))
}

/// The `mdbook` to build with: the one on the PATH (or in cargo's bin
/// folder) if it is [`MDBOOK_VERSION`], else installed with `cargo
/// install` (a debug build without the server and watcher: half a
/// release build's time, and fast enough for a book).
fn ensure_mdbook() -> Result<(PathBuf, String)> {
    let cargo_home_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|h| h.join("bin").join("mdbook"));
    let find = || {
        util::find_in_path("mdbook")
            .into_iter()
            .chain(cargo_home_bin.clone().filter(|p| util::is_executable(p)))
            .find_map(|p| {
                let v = util::output(Command::new(&p).arg("--version")).ok()?;
                (v.trim() == format!("mdbook v{MDBOOK_VERSION}")).then(|| (p, v.trim().to_string()))
            })
    };
    if let Some(found) = find() {
        return Ok(found);
    }
    let mut cmd = Command::new(cargo_bin());
    cmd.args([
        "install",
        "mdbook",
        "--locked",
        "--no-default-features",
        "--debug",
        "--version",
        MDBOOK_VERSION,
    ])
    .stdin(Stdio::null());
    say!(
        "book: mdbook {MDBOOK_VERSION} is missing: {}",
        describe(&cmd)
    );
    util::run(&mut cmd)?;
    find().with_context(|| format!("mdbook {MDBOOK_VERSION} was installed but is not on the PATH"))
}

/// `mdbook build docs/book`.
fn build(ws: &Path) -> Result<String> {
    let (mdbook, version) = ensure_mdbook()?;
    let mut cmd = Command::new(&mdbook);
    cmd.args(["build", BOOK_DIR])
        .current_dir(ws)
        .stdin(Stdio::null());
    say!("book: {}", describe(&cmd));
    util::run(&mut cmd)?;
    Ok(format!("{version} into target/book"))
}

/// The README's and the book's doc tests (`cargo test --doc -p rverbs
/// -p rverbs-cm --features rverbs/tokio,rverbs-cm/tokio`, filtered to
/// module `book`; the tokio chapter alone is `rverbs-cm`'s).
fn doctests_run(ws: &Path, which: Doctests) -> Result<String> {
    let (filter, packages) = match which {
        Doctests::All => (DOCTEST_MODULE, BOOK_LIBS.iter().map(|l| l.2).collect()),
        Doctests::TokioOnly => (TOKIO_CHAPTER, vec!["rverbs-cm"]),
    };
    let mut cmd = Command::new(cargo_bin());
    cmd.args(["test", "--doc"])
        .args(packages.iter().flat_map(|p| ["-p", p]))
        .args(["--features", "rverbs/tokio,rverbs-cm/tokio", "--", filter])
        .current_dir(ws)
        .stdin(Stdio::null());
    say!("book: {}", describe(&cmd));
    util::run(&mut cmd)?;
    Ok(format!("doc tests matching {filter}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_skip_code_and_keep_titles_and_anchors() {
        let md = "See [a](a.md#x \"t\") and `[no](n.md)`.\n\
                  ```rust\nlet v = [1](2);\n```\n\
                  ![img](../p.svg) [w](https://e.org/(x)) [d](<b c.md>)\n\
                  [def]: d.md#y\n";
        let got: Vec<(usize, String)> = links(md);
        let want = [
            (1, "a.md#x"),
            (5, "../p.svg"),
            (5, "https://e.org/(x)"),
            (5, "b c.md"),
            (6, "d.md#y"),
        ];
        assert_eq!(
            got,
            want.iter()
                .map(|(n, t)| (*n, t.to_string()))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn heading_ids_follow_mdbook() {
        let md = "# The `rverbs` tool\n## Who sends which command?\n\
                  ### Inspect limits\n## Safety\n## Safety\n\
                  ```sh\n# not a heading\n```\n## [Linked](x.md) *bold*\n";
        let ids = heading_ids(md);
        for id in [
            "the-rverbs-tool",
            "who-sends-which-command",
            "inspect-limits",
            "safety",
            "safety-1",
            "linked-bold",
        ] {
            assert!(ids.contains(id), "{id} missing from {ids:?}");
        }
        assert!(!ids.contains("not-a-heading"));
    }

    #[test]
    fn schemes_are_told_from_paths() {
        assert!(has_scheme("https://docs.rs/rverbs"));
        assert!(has_scheme("mailto:x@y"));
        assert!(!has_scheme("api/index.md"));
        assert!(!has_scheme("#anchor"));
        assert!(!has_scheme("../a:b.md"));
    }

    #[test]
    fn a_broken_link_and_a_missing_anchor_are_found() {
        let dir = std::env::temp_dir().join(format!("xtask-book-{}", std::process::id()));
        let src = dir.join("docs/book/src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("a.md"), "# A\n## Part one\n").unwrap();
        let page = src.join("b.md");
        let ok = resolve(&dir, &src, &src, &page, true, "a.md#part-one");
        let no_file = resolve(&dir, &src, &src, &page, true, "c.md");
        let no_anchor = resolve(&dir, &src, &src, &page, true, "a.md#part-two");
        let outside = resolve(&dir, &src, &src, &page, true, "../../../README.md");
        std::fs::write(dir.join("README.md"), "x").unwrap();
        let outside_exists = resolve(&dir, &src, &src, &page, true, "../../../README.md");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(ok, Ok(()));
        assert!(no_file.unwrap_err().contains("does not exist"));
        assert!(no_anchor.unwrap_err().contains("part-two"));
        assert!(outside.is_err());
        assert!(outside_exists.unwrap_err().contains("outside the book"));
    }
}
