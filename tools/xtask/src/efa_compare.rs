//! The comparator of `cargo xtask efa`: the commands and the descriptors
//! the emulated EFA device saw (logs of `EFA_EMU_CMD_LOG` and
//! `EFA_EMU_DESC_LOG`, format: tests/efa-emu/src/record.rs) for the same
//! fixed sequence of verbs, made by rdma-core's libibverbs + libefa
//! (`tests/efa-emu/c/cmd_seq.c`) and by our library
//! (`tests/src/bin/efa_cmd_seq.rs`), compared byte for byte after the
//! normalisations of [`RULES`].
//!
//! Commands are aligned by command number (longest common subsequence),
//! so a command one side alone sends is reported as such; those in
//! [`ONE_SIDED`] are allowed, each with why, any other fails. Descriptors
//! are compared in order per QP and kind (send, receive).

use anyhow::{bail, Context, Result};

/// The normalisations: every way two logs may legitimately differ, with
/// why. Printed into the report.
pub const RULES: &[(&str, &str)] = &[
    (
        "response",
        "a command's response pointer names a buffer of each library: compared \
         is whether there is one",
    ),
    (
        "user_handle",
        "CREATE_CQ, CREATE_QP and CREATE_AH carry a cookie the kernel hands \
         back in events (libibverbs: its object's address; ours: an event id)",
    ),
    (
        "addresses",
        "user addresses (REG_MR's start and IOVA, descriptors' buffers) belong \
         to two processes: compared is their offset in the 4 KiB page",
    ),
    (
        "req_id",
        "a descriptor's request id is the slot the provider keeps its wr_id in, \
         which the device only echoes: libefa reuses freed slots last-in first \
         out, ours takes the next free one",
    ),
];

/// Commands only our library sends, with why.
pub const ONE_SIDED: &[(u32, &str, &str)] = &[
    (
        2,
        "QUERY_PORT",
        "ours: when a UD QP is given its port, the library reads the port's \
         active MTU to bound UD sends (a read-only query)",
    ),
    (
        0x8000_0001,
        "EX_QUERY_DEVICE",
        "ours: the library reads the device's attributes once, when first \
         needed (here the port count, to check the port query_gid names; \
         libibverbs reads the GID from sysfs without a command), besides the \
         provider's query at open",
    ),
];

/// One recorded command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmd {
    /// `ok` or the errno's name.
    pub result: String,
    /// All its bytes.
    pub bytes: Vec<u8>,
}

impl Cmd {
    /// The command number (with the extended flag).
    pub fn number(&self) -> u32 {
        self.bytes
            .get(..4)
            .map_or(u32::MAX, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

fn unhex(s: &str) -> Result<Vec<u8>> {
    if s.len() % 2 != 0 {
        bail!("odd hex length");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).context("bad hex"))
        .collect()
}

/// The commands of a command log.
pub fn parse_cmds(log: &str) -> Result<Vec<Cmd>> {
    log.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut f = l.split(' ');
            match (f.next(), f.next(), f.next()) {
                (Some("write"), Some(r), Some(h)) => Ok(Cmd {
                    result: r.to_string(),
                    bytes: unhex(h)?,
                }),
                _ => bail!("not a command record: {l}"),
            }
        })
        .collect()
}

/// A descriptor record: kind (`tx`, `rx`), QP ordinal, bytes.
pub type Desc = (String, usize, Vec<u8>);

/// The descriptors of a descriptor log.
pub fn parse_descs(log: &str) -> Result<Vec<Desc>> {
    log.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            match f.as_slice() {
                [kind @ ("tx" | "rx"), ord, _index, h] => {
                    Ok((kind.to_string(), ord.parse()?, unhex(h)?))
                }
                _ => bail!("not a descriptor record: {l}"),
            }
        })
        .collect()
}

/// Commands without a response pointer (`DEALLOC_PD`, `DESTROY_AH`,
/// `DEREG_MR`, `MODIFY_QP`).
const NO_RESPONSE: &[u32] = &[4, 8, 13, 26];

/// Replaces `b[at..at + 8]` by its page offset (a user address).
fn page_offset(b: &mut [u8], at: usize) {
    if let Some(w) = b.get_mut(at..at + 8) {
        let v = u64::from_le_bytes(w.try_into().unwrap_or([0; 8])) & 0xfff;
        w.copy_from_slice(&v.to_le_bytes());
    }
}

/// Replaces `b[at..at + n]` by whether it is non-zero.
fn presence(b: &mut [u8], at: usize, n: usize) {
    if let Some(w) = b.get_mut(at..at + n) {
        let any = w.iter().any(|&x| x != 0);
        w.fill(0);
        w[0] = u8::from(any);
    }
}

/// A command's bytes after the normalisations.
pub fn normalise_cmd(c: &Cmd) -> Vec<u8> {
    let mut b = c.bytes.clone();
    let n = c.number();
    if n & 0x8000_0000 != 0 {
        // The extended header's response pointer.
        presence(&mut b, 8, 8);
        return b;
    }
    if !NO_RESPONSE.contains(&n) {
        presence(&mut b, 8, 8);
    }
    match n {
        // CREATE_AH, CREATE_CQ, CREATE_QP: user_handle.
        5 | 18 | 24 => b.get_mut(16..24).into_iter().for_each(|w| w.fill(0)),
        // REG_MR: start, (length), hca_va.
        9 => {
            page_offset(&mut b, 16);
            page_offset(&mut b, 32);
        }
        _ => {}
    }
    b
}

/// A descriptor's bytes after the normalisations.
pub fn normalise_desc(kind: &str, bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if kind == "rx" {
        // buf_addr_lo/hi, then req_id at 8.
        page_offset(&mut b, 0);
        if let Some(w) = b.get_mut(8..10) {
            w.fill(0);
        }
        return b;
    }
    if let Some(w) = b.get_mut(0..2) {
        w.fill(0);
    }
    let ctrl1 = b.get(2).copied().unwrap_or(0);
    if ctrl1 & 0x20 != 0 {
        // Inline: the data is the payload.
        return b;
    }
    // Two 16-byte buffer descriptors (a gather list, or RDMA's remote and
    // local memory): the address is their last 8 bytes.
    page_offset(&mut b, 32 + 8);
    page_offset(&mut b, 48 + 8);
    b
}

/// Longest common subsequence of `a` and `b` by `key`: the aligned index
/// pairs.
fn align<T, K: PartialEq>(a: &[T], b: &[T], key: impl Fn(&T) -> K) -> Vec<(usize, usize)> {
    let (n, m) = (a.len(), b.len());
    let mut t = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[i][j] = if key(&a[i]) == key(&b[j]) {
                t[i + 1][j + 1] + 1
            } else {
                t[i + 1][j].max(t[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < n && j < m {
        if key(&a[i]) == key(&b[j]) {
            out.push((i, j));
            i += 1;
            j += 1;
        } else if t[i + 1][j] >= t[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// What a comparison found.
#[derive(Debug, Default)]
pub struct Report {
    /// Pairs compared.
    pub compared: usize,
    /// Identical after normalisation.
    pub identical: usize,
    /// Problems: differing pairs, records of one side not allowed.
    pub problems: Vec<String>,
    /// Lines for the report file.
    pub lines: Vec<String>,
}

fn diff_offsets(a: &[u8], b: &[u8]) -> String {
    let n = a.len().max(b.len());
    let offs: Vec<String> = (0..n)
        .filter(|&i| a.get(i) != b.get(i))
        .map(|i| format!("{i}"))
        .collect();
    format!("bytes {} differ", offs.join(","))
}

/// Compares the command logs of rdma-core (`theirs`) and ours.
pub fn compare_cmds(theirs: &[Cmd], ours: &[Cmd]) -> Report {
    let mut r = Report::default();
    let pairs = align(theirs, ours, Cmd::number);
    let (mut i, mut j) = (0, 0);
    let one_sided = |r: &mut Report, side: &str, c: &Cmd| {
        let n = c.number();
        match ONE_SIDED.iter().find(|(k, ..)| *k == n) {
            Some((_, name, why)) if side == "ours" => {
                r.lines.push(format!("ours only: {name} (allowed: {why})"));
            }
            _ => r.problems.push(format!("{side} only: command {n:#x}")),
        }
    };
    for &(a, b) in &pairs {
        while i < a {
            one_sided(&mut r, "rdma-core", &theirs[i]);
            i += 1;
        }
        while j < b {
            one_sided(&mut r, "ours", &ours[j]);
            j += 1;
        }
        r.compared += 1;
        let (x, y) = (normalise_cmd(&theirs[a]), normalise_cmd(&ours[b]));
        let n = theirs[a].number();
        if x == y && theirs[a].result == ours[b].result {
            r.identical += 1;
            r.lines.push(format!("command {n:#x}: identical"));
        } else {
            let why = if theirs[a].result != ours[b].result {
                format!("results {} and {}", theirs[a].result, ours[b].result)
            } else {
                diff_offsets(&x, &y)
            };
            r.problems
                .push(format!("command {n:#x} (#{}): {why}", r.compared));
        }
        i = a + 1;
        j = b + 1;
    }
    for c in &theirs[i..] {
        one_sided(&mut r, "rdma-core", c);
    }
    for c in &ours[j..] {
        one_sided(&mut r, "ours", c);
    }
    r
}

/// Compares the descriptor logs, in order per QP ordinal and kind.
pub fn compare_descs(theirs: &[Desc], ours: &[Desc]) -> Report {
    let mut r = Report::default();
    let mut keys: Vec<(String, usize)> = theirs
        .iter()
        .chain(ours)
        .map(|(k, o, _)| (k.clone(), *o))
        .collect();
    keys.sort();
    keys.dedup();
    for (kind, ord) in keys {
        let pick = |v: &[Desc]| -> Vec<Vec<u8>> {
            v.iter()
                .filter(|(k, o, _)| *k == kind && *o == ord)
                .map(|(_, _, b)| normalise_desc(&kind, b))
                .collect()
        };
        let (a, b) = (pick(theirs), pick(ours));
        if a.len() != b.len() {
            r.problems.push(format!(
                "{kind} of QP {ord}: {} descriptors from rdma-core, {} from ours",
                a.len(),
                b.len()
            ));
        }
        for (n, (x, y)) in a.iter().zip(&b).enumerate() {
            r.compared += 1;
            if x == y {
                r.identical += 1;
                r.lines.push(format!("{kind} {ord} #{n}: identical"));
            } else {
                r.problems
                    .push(format!("{kind} of QP {ord} #{n}: {}", diff_offsets(x, y)));
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_and_alignment() {
        let c = |h: &str| Cmd {
            result: "ok".into(),
            bytes: unhex(h).unwrap(),
        };
        // ALLOC_PD with two response pointers: identical.
        let a = c("030000000400030064ec6a68ff7f0000");
        let b = c("0300000004000300f8706dc0aa7f0000");
        // QUERY_PORT on ours only: allowed; DEALLOC_PD differing.
        let q = c("02000000060001000000000000000000");
        let d1 = c("040000000300000001000000");
        let d2 = c("040000000300000002000000");
        let r = compare_cmds(&[a.clone(), d1], &[b, q, d2]);
        assert_eq!(r.compared, 2);
        assert_eq!(r.identical, 1);
        assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
        assert!(r.problems[0].contains("bytes 8 differ"));
        // A command of rdma-core's alone is a problem.
        let r = compare_cmds(&[a.clone(), c("0d0000000300000002000000")], &[a]);
        assert_eq!(r.problems, vec!["rdma-core only: command 0xd".to_string()]);
    }

    #[test]
    fn descriptor_addresses_and_req_ids() {
        let rx = |addr: u64, req: u16| {
            let mut b = addr.to_le_bytes().to_vec();
            b.extend(req.to_le_bytes());
            b.extend([0, 4, 0x10, 0, 0, 0xc0]);
            ("rx".to_string(), 0usize, b)
        };
        let r = compare_descs(&[rx(0x7f00_1000_0010, 1)], &[rx(0x5500_2000_0010, 2)]);
        assert_eq!((r.compared, r.identical), (1, 1), "{:?}", r.problems);
        let r = compare_descs(&[rx(0x7f00_1000_0010, 1)], &[rx(0x5500_2000_0018, 1)]);
        assert_eq!(r.identical, 0);
    }
}
