//! Soak: a long stream of SENDs of mixed sizes over one RC connection,
//! every message carrying its sequence number and a checksum of its
//! payload. At the end: nothing lost, nothing reordered, every checksum
//! matches, and the process did not leak file descriptors or memory (fd
//! count unchanged, RSS within a small bound of what it was after warm-up).
//!
//! The message count is `RVERBS_SOAK_MESSAGES` (default [`DEFAULT_MESSAGES`],
//! the million of the issue). The test crate is built with `opt-level = 2`
//! even in the dev profile (the workspace Cargo.toml says why): in the
//! TCG-emulated VM of `cargo xtask test` (Linux 6.1) this runs at about
//! 7,500 messages/s (19 MiB/s), so the default takes about two and a half
//! minutes (unoptimized, the test's own checksums and copies made it
//! four times slower).
//! A shorter run, for instance while working on the suite:
//!
//! ```text
//! RVERBS_SOAK_MESSAGES=50000 cargo xtask test
//! ```
//!
//! (`cargo xtask` passes every `RVERBS_*` variable into the VM).

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use rverbs::{QpCap, RecvWr, SendWr, Wc, WcOpcode};
use verbs_tests::{pattern, Pair, PairOpts, TIMEOUT};

/// Messages when `RVERBS_SOAK_MESSAGES` is unset.
const DEFAULT_MESSAGES: u64 = 1_000_000;
/// Messages in flight (and receives posted).
const WINDOW: usize = 16;
/// Header: seq (u64), payload length (u32), pool offset (u32), checksum (u64).
const HDR: usize = 32;
/// Largest payload.
const MAX_PAYLOAD: usize = 32 * 1024;
/// The pool payloads are cut from.
const POOL: usize = 256 * 1024;
/// RSS may grow by at most this much after warm-up.
const RSS_SLACK: u64 = 2 << 20;

fn messages() -> u64 {
    match std::env::var("RVERBS_SOAK_MESSAGES") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("RVERBS_SOAK_MESSAGES must be a message count, not {v:?}")),
        Err(_) => DEFAULT_MESSAGES,
    }
}

/// A 64-bit checksum, eight bytes at a time (and the length), so a single
/// flipped, lost or moved byte changes it.
fn checksum(data: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ data.len() as u64;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap_or_default());
        h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(29);
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// xorshift64: sizes and offsets, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Mostly small, some medium, a few large, and some empty payloads.
    fn size(&mut self) -> usize {
        (match self.below(100) {
            0..=4 => 0,
            5..=59 => 1 + self.below(256),
            60..=89 => 257 + self.below(4096 - 256),
            _ => 4097 + self.below((MAX_PAYLOAD - 4096) as u64),
        }) as usize
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("statm resident field");
    // The page size is what alloc_mr aligns to; 4 KiB on the VM's x86-64.
    pages * 4096
}

#[test]
fn soak_mixed_sizes_no_loss_no_corruption_no_leak() {
    let total = messages();
    assert!(total > 0, "RVERBS_SOAK_MESSAGES must be at least 1");
    let warm_up = (total / 10).clamp(1, 5_000);
    let mut p = Pair::with(PairOpts {
        cap: QpCap {
            max_send_wr: WINDOW as u32,
            max_recv_wr: WINDOW as u32,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        cqe: 2 * WINDOW as u32,
        ..PairOpts::default()
    });
    let acc = verbs_tests::all_access();
    let mut pool = p.pd.alloc_mr(POOL, acc).unwrap();
    pool.write_at(0, &pattern(POOL, 77)).unwrap();
    let mut hdrs = p.pd.alloc_mr(WINDOW * HDR, acc).unwrap();
    let slot = HDR + MAX_PAYLOAD;
    let slots = p.pd.alloc_mr(WINDOW * slot, acc).unwrap();
    let pool_copy = pool.to_vec();

    let recv_sges: Vec<[rverbs::Sge; 1]> = (0..WINDOW)
        .map(|i| [slots.sge(i * slot..(i + 1) * slot).unwrap()])
        .collect();
    for (i, s) in recv_sges.iter().enumerate() {
        p.b.post_recv(&[RecvWr::new(i as u64, s)]).unwrap();
    }

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut got = vec![0u8; slot];
    let mut wc = [Wc::default(); WINDOW];
    let (mut next, mut sent_done, mut recvd) = (0u64, 0u64, 0u64);
    let mut bytes = 0u64;
    let mut baseline: Option<(usize, u64)> = None;
    let mut last_progress = Instant::now();
    let start = Instant::now();

    while recvd < total {
        // Send while the window allows (see the module docs: never more in
        // flight than receives posted, so no RNR).
        while next < total && next - recvd < WINDOW as u64 && next - sent_done < WINDOW as u64 {
            let len = rng.size();
            let off = rng.below((POOL - len + 1) as u64) as usize;
            let h = (next as usize % WINDOW) * HDR;
            let mut hdr = [0u8; HDR];
            hdr[..8].copy_from_slice(&next.to_le_bytes());
            hdr[8..12].copy_from_slice(&(len as u32).to_le_bytes());
            hdr[12..16].copy_from_slice(&(off as u32).to_le_bytes());
            hdr[16..24].copy_from_slice(&checksum(&pool_copy[off..off + len]).to_le_bytes());
            hdrs.write_at(h, &hdr).unwrap();
            let sg = [
                hdrs.sge(h..h + HDR).unwrap(),
                pool.sge(off..off + len).unwrap(),
            ];
            let n = if len == 0 { 1 } else { 2 };
            p.a.post_send(&[SendWr::send(next, &sg[..n]).signaled()])
                .unwrap();
            next += 1;
        }

        let mut progressed = false;
        let n = p.cq_b.poll(&mut wc).unwrap();
        for w in &wc[..n] {
            assert!(w.is_success(), "receive {recvd} failed: {w:?}");
            assert_eq!(w.opcode(), WcOpcode::RECV);
            let i = (recvd % WINDOW as u64) as usize;
            assert_eq!(w.wr_id(), i as u64, "receives complete in order");
            let len = w.byte_len() as usize;
            assert!((HDR..=slot).contains(&len), "receive {recvd}: {len} bytes");
            slots.read_at(i * slot, &mut got[..len]).unwrap();
            let seq = u64::from_le_bytes(got[..8].try_into().unwrap());
            let plen = u32::from_le_bytes(got[8..12].try_into().unwrap()) as usize;
            let sum = u64::from_le_bytes(got[16..24].try_into().unwrap());
            assert_eq!(seq, recvd, "message lost or reordered");
            assert_eq!(HDR + plen, len, "message {seq}: length");
            assert_eq!(
                checksum(&got[HDR..len]),
                sum,
                "message {seq} ({plen} bytes): checksum mismatch"
            );
            bytes += len as u64;
            recvd += 1;
            p.b.post_recv(&[RecvWr::new(i as u64, &recv_sges[i])])
                .unwrap();
            progressed = true;
        }
        let n = p.cq_a.poll(&mut wc).unwrap();
        for w in &wc[..n] {
            assert!(w.is_success(), "send {sent_done} failed: {w:?}");
            assert_eq!(
                (w.wr_id(), w.opcode()),
                (sent_done, WcOpcode::SEND),
                "sends complete in order"
            );
            sent_done += 1;
            progressed = true;
        }

        if progressed {
            last_progress = Instant::now();
        } else {
            assert!(
                last_progress.elapsed() < TIMEOUT,
                "stalled: {recvd} received, {sent_done} sent of {total}"
            );
        }
        if baseline.is_none() && recvd >= warm_up {
            baseline = Some((open_fds(), rss_bytes()));
        }
    }
    // Drain the last send completions.
    let t = Instant::now();
    while sent_done < total {
        let n = p.cq_a.poll(&mut wc).unwrap();
        for w in &wc[..n] {
            assert!(w.is_success(), "send {sent_done} failed: {w:?}");
            assert_eq!(w.wr_id(), sent_done);
            sent_done += 1;
        }
        assert!(t.elapsed() < TIMEOUT, "send completions missing");
    }
    let took = start.elapsed();
    verbs_tests::assert_quiet(&mut p.cq_b, Duration::from_millis(50));

    let (fds0, rss0) = baseline.expect("warm-up reached");
    let (fds1, rss1) = (open_fds(), rss_bytes());
    eprintln!(
        "soak: {total} messages, {:.1} MiB in {took:.1?} ({:.0} msg/s, {:.2} MiB/s); \
         fds {fds0} -> {fds1}; RSS {} KiB -> {} KiB",
        bytes as f64 / 1048576.0,
        total as f64 / took.as_secs_f64(),
        bytes as f64 / 1048576.0 / took.as_secs_f64(),
        rss0 >> 10,
        rss1 >> 10,
    );
    assert_eq!(fds1, fds0, "file descriptors leaked");
    assert!(
        rss1 <= rss0 + RSS_SLACK,
        "RSS grew from {rss0} to {rss1} bytes after warm-up"
    );
}
