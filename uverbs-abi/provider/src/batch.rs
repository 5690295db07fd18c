//! Batch posting: many send work requests of one operation to one remote
//! key, described once ([`SendBatch`]) and listed as plain entries
//! ([`BatchWr`]) that carry only what varies (the `wr_id`, one local SGE
//! and, for RDMA, the remote address).
//!
//! A provider checks the uniform part once per call
//! ([`SendChecks::check_batch`]) and each entry only for its length
//! ([`check_batch_wr`]); the entries then go to the ring without the
//! per-request decoding a [`SendWr`] chain needs. The WQEs are the ones
//! the same requests posted as a chain produce.

use rverbs_abi::qp::qp_type;
use rverbs_abi::wr::Sge;

use crate::check::{SendChecks, MAX_MSG};
use crate::wr::{SendFlags, SendWr, WrOpcode};
use crate::PostError;

/// The operation of every request of a batch: the simple ones, whose WQE
/// is a control segment, a remote address for RDMA, and one data segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BatchOp {
    /// RDMA WRITE of each entry's SGE to its remote address.
    RdmaWrite,
    /// RDMA WRITE with immediate data (the batch's): each consumes a
    /// receive at the peer.
    RdmaWriteWithImm,
    /// SEND of each entry's SGE (its remote address is ignored).
    Send,
    /// SEND with immediate data (the batch's).
    SendWithImm,
    /// RDMA READ from each entry's remote address into its SGE. RC only.
    RdmaRead,
}

impl BatchOp {
    /// The work-request opcode.
    #[inline(always)]
    pub const fn opcode(self) -> WrOpcode {
        match self {
            BatchOp::RdmaWrite => WrOpcode::RdmaWrite,
            BatchOp::RdmaWriteWithImm => WrOpcode::RdmaWriteWithImm,
            BatchOp::Send => WrOpcode::Send,
            BatchOp::SendWithImm => WrOpcode::SendWithImm,
            BatchOp::RdmaRead => WrOpcode::RdmaRead,
        }
    }
}

/// Which requests of a batch produce a completion (on top of the QP's
/// `sq_sig_all`, which signals them all whatever this says).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BatchSignal {
    /// The last request the call posts: the batch's last, or, when the
    /// queue fills before the end ([`PostError::QueueFull`] at index `k`),
    /// entry `k - 1`. One completion per call that frees every slot the
    /// call took (on mlx5 an unsignaled request's slot is freed only by a
    /// later signaled completion). The default.
    #[default]
    Last,
    /// Every request.
    Each,
    /// None: the caller signals later requests often enough (see
    /// `Qp::post_send` on why a send queue must see signaled requests).
    Never,
    /// Every `n`th request of the call (the `n`th, `2n`th, ...; 0 is taken
    /// as 1) and, as [`BatchSignal::Last`], the last one it posts: a
    /// batch larger than the send queue's half can be posted in one call
    /// and its slots freed as it goes, without chunking by hand (what
    /// `rverbs::SignalEvery` does for single posts). The queue's depth is
    /// what the kernel granted (`Qp::cap`), which may exceed the request.
    Every(u32),
}

impl BatchSignal {
    /// Whether entry `k` of `posted` entries a call posts is signaled.
    #[inline(always)]
    pub const fn signals(self, k: usize, posted: usize) -> bool {
        match self {
            BatchSignal::Each => true,
            BatchSignal::Last => k + 1 == posted,
            BatchSignal::Never => false,
            BatchSignal::Every(n) => {
                let n = if n == 0 { 1 } else { n as usize };
                (k + 1) % n == 0 || k + 1 == posted
            }
        }
    }
}

/// What every request of a batch shares: the operation, the remote key
/// (RDMA), the immediate data (`*_WITH_IMM`) and the signaling. Built by
/// the per-operation constructors, which take exactly what the operation
/// has (no immediate on a READ, no remote key on a SEND).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "a batch description does nothing until posted with post_send_batch"]
pub struct SendBatch {
    op: BatchOp,
    rkey: u32,
    imm: u32,
    signal: BatchSignal,
}

impl SendBatch {
    const fn new(op: BatchOp, rkey: u32, imm: u32) -> Self {
        SendBatch {
            op,
            rkey,
            imm,
            signal: BatchSignal::Last,
        }
    }
    /// RDMA WRITEs under the remote key `rkey`.
    pub const fn rdma_write(rkey: u32) -> Self {
        Self::new(BatchOp::RdmaWrite, rkey, 0)
    }
    /// RDMA WRITEs with immediate data `imm` (host order; sent big-endian)
    /// under `rkey`.
    pub const fn rdma_write_with_imm(rkey: u32, imm: u32) -> Self {
        Self::new(BatchOp::RdmaWriteWithImm, rkey, imm)
    }
    /// SENDs (the entries' remote addresses are ignored).
    pub const fn send() -> Self {
        Self::new(BatchOp::Send, 0, 0)
    }
    /// SENDs with immediate data `imm` (host order; sent big-endian).
    pub const fn send_with_imm(imm: u32) -> Self {
        Self::new(BatchOp::SendWithImm, 0, imm)
    }
    /// RDMA READs under `rkey` (RC only).
    pub const fn rdma_read(rkey: u32) -> Self {
        Self::new(BatchOp::RdmaRead, rkey, 0)
    }
    /// Sets which requests are signaled (default [`BatchSignal::Last`]).
    pub const fn signal(mut self, signal: BatchSignal) -> Self {
        self.signal = signal;
        self
    }

    /// The operation.
    #[inline(always)]
    pub const fn op(&self) -> BatchOp {
        self.op
    }
    /// The remote key (0 for SENDs).
    #[inline(always)]
    pub const fn rkey(&self) -> u32 {
        self.rkey
    }
    /// The immediate data in host order (0 without one).
    #[inline(always)]
    pub const fn imm(&self) -> u32 {
        self.imm
    }
    /// The signaling.
    #[inline(always)]
    pub const fn signaling(&self) -> BatchSignal {
        self.signal
    }

    /// Entry `e` as the equivalent [`SendWr`] (signaled if `signaled`),
    /// for providers that post batches as chains.
    #[inline(always)]
    pub fn to_wr<'a>(&self, e: &'a BatchWr, signaled: bool) -> SendWr<'a> {
        let sges = core::slice::from_ref(&e.sge);
        let wr = match self.op {
            BatchOp::RdmaWrite => SendWr::rdma_write(e.wr_id, sges, e.remote_addr, self.rkey),
            BatchOp::RdmaWriteWithImm => {
                SendWr::rdma_write_with_imm(e.wr_id, sges, e.remote_addr, self.rkey, self.imm)
            }
            BatchOp::Send => SendWr::send(e.wr_id, sges),
            BatchOp::SendWithImm => SendWr::send_with_imm(e.wr_id, sges, self.imm),
            BatchOp::RdmaRead => SendWr::rdma_read(e.wr_id, sges, e.remote_addr, self.rkey),
        };
        if signaled {
            wr.flags(SendFlags::SIGNALED)
        } else {
            wr
        }
    }
}

/// One request of a batch: what varies from request to request. 32 bytes,
/// plain data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchWr {
    /// Returned in the request's completion.
    pub wr_id: u64,
    /// The local buffer (gather for WRITE and SEND, scatter for READ); a
    /// zero length moves no data, as an empty gather list would.
    pub sge: Sge,
    /// The remote address (RDMA; ignored for SENDs).
    pub remote_addr: u64,
}

impl BatchWr {
    /// Entry `wr_id` for the local buffer `sge` and the remote address
    /// `remote_addr` (0 for SENDs).
    pub const fn new(wr_id: u64, sge: Sge, remote_addr: u64) -> Self {
        BatchWr {
            wr_id,
            sge,
            remote_addr,
        }
    }
}

/// The check of one entry: its length fits an IB message
/// ([`PostError::MessageTooLong`] past [`MAX_MSG`] bytes).
#[inline(always)]
pub fn check_batch_wr(e: &BatchWr) -> Result<(), PostError> {
    if u64::from(e.sge.length) > MAX_MSG {
        return Err(PostError::MessageTooLong);
    }
    Ok(())
}

impl SendChecks {
    /// The checks of a batch's uniform part, once per call: a UD QP is
    /// refused ([`PostError::MissingAddress`]: a batch carries no
    /// destination), the operation must be one of the QP type's simple
    /// opcodes (RDMA READ on RC only: [`PostError::InvalidOpcode`]), and
    /// the queue must take one SGE per request
    /// ([`PostError::TooManySge`]). An entry that passes
    /// [`check_batch_wr`] then passes every check its [`SendWr`] would.
    #[inline(always)]
    pub fn check_batch(&self, batch: &SendBatch) -> Result<(), PostError> {
        if self.simple_ops() & (1 << (batch.op().opcode() as u32)) == 0 {
            // UD has no simple opcode: a batch has no destination.
            return Err(if self.qp_type() == qp_type::UD {
                PostError::MissingAddress
            } else {
                PostError::InvalidOpcode
            });
        }
        if self.max_sge() == 0 {
            return Err(PostError::TooManySge {
                given: 1,
                max: self.max_sge(),
            });
        }
        Ok(())
    }
}

/// Pushes a batch request by request through a provider's own push of a
/// [`SendWr`] (for providers without a batch loop of their own; the
/// caller publishes what was pushed and rings once): after
/// [`SendChecks::check_batch`] (the caller's), the entries go to `push` as
/// the equivalent requests, one at a time (no array, no allocation),
/// signaled as the batch says. The call stops at the first entry refused
/// for its length ([`check_batch_wr`]) or where the `free` slots run out,
/// whichever comes first, as a batch loop that checks each entry as it
/// writes it stops: only the entries before it are pushed, and the last
/// of them is the one [`BatchSignal::Last`] signals. Returns the refused
/// entry's error or [`PostError::QueueFull`] at its index, or `push`'s
/// error at the index of the entry it refused.
pub fn push_batch(
    batch: &SendBatch,
    wrs: &[BatchWr],
    free: u32,
    mut push: impl FnMut(&SendWr<'_>) -> Result<(), PostError>,
) -> Result<(), (usize, PostError)> {
    let free = usize::try_from(free).unwrap_or(usize::MAX);
    let refused = wrs
        .iter()
        .take(free)
        .enumerate()
        .find_map(|(k, e)| check_batch_wr(e).err().map(|err| (k, err)));
    let fit = refused.as_ref().map_or(wrs.len().min(free), |&(k, _)| k);
    for (k, e) in wrs[..fit].iter().enumerate() {
        let signaled = batch.signal.signals(k, fit);
        push(&batch.to_wr(e, signaled)).map_err(|err| (k, err))?;
    }
    if let Some(refused) = refused {
        return Err(refused);
    }
    if fit < wrs.len() {
        return Err((fit, PostError::QueueFull));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::Payload;

    fn entry(k: u64, length: u32) -> BatchWr {
        BatchWr::new(
            k,
            Sge {
                addr: 0x1000 + k * 64,
                length,
                lkey: 5,
            },
            0x9000 + k * 64,
        )
    }

    #[test]
    fn uniform_checks() {
        let rc = SendChecks::new(qp_type::RC, 1, 0);
        let uc = SendChecks::new(qp_type::UC, 1, 0);
        let ud = SendChecks::new(qp_type::UD, 1, 0);
        let none = SendChecks::new(qp_type::RC, 0, 0);
        let all = [
            SendBatch::rdma_write(1),
            SendBatch::rdma_write_with_imm(1, 2),
            SendBatch::send(),
            SendBatch::send_with_imm(3),
            SendBatch::rdma_read(1),
        ];
        for b in all {
            assert_eq!(rc.check_batch(&b), Ok(()), "{b:?}");
            assert_eq!(ud.check_batch(&b), Err(PostError::MissingAddress));
            assert_eq!(
                none.check_batch(&b),
                Err(PostError::TooManySge { given: 1, max: 0 })
            );
            let want = if b.op() == BatchOp::RdmaRead {
                Err(PostError::InvalidOpcode)
            } else {
                Ok(())
            };
            assert_eq!(uc.check_batch(&b), want, "{b:?}");
        }
    }

    #[test]
    fn entry_lengths() {
        assert_eq!(check_batch_wr(&entry(0, 0)), Ok(()));
        assert_eq!(check_batch_wr(&entry(0, 1 << 31)), Ok(()));
        assert_eq!(
            check_batch_wr(&entry(0, (1 << 31) + 1)),
            Err(PostError::MessageTooLong)
        );
    }

    #[test]
    fn entries_become_the_same_requests() {
        let e = entry(7, 64);
        let w = SendBatch::rdma_write_with_imm(9, 0xabcd).to_wr(&e, true);
        assert_eq!(w.opcode(), WrOpcode::RdmaWriteWithImm);
        assert_eq!(
            (w.wr_id(), w.remote_addr(), w.rkey(), w.imm_data()),
            (7, e.remote_addr, 9, 0xabcd)
        );
        assert!(w.send_flags().contains(SendFlags::SIGNALED));
        assert!(matches!(w.payload(), Payload::Sge([s]) if *s == e.sge));
        let s = SendBatch::send().to_wr(&e, false);
        assert_eq!(
            (s.opcode(), s.remote_addr(), s.rkey()),
            (WrOpcode::Send, 0, 0)
        );
        assert!(s.send_flags().is_empty());
        let r = SendBatch::rdma_read(4).to_wr(&e, false);
        assert_eq!((r.opcode(), r.imm_data()), (WrOpcode::RdmaRead, 0));
    }

    /// The request-by-request fallback: the last pushed signaled, queue
    /// full, a refused entry and push's errors at the batch's indices.
    #[test]
    fn pushes() {
        let wrs: Vec<BatchWr> = (0..70).map(|k| entry(k, 64)).collect();
        let b = SendBatch::rdma_write(1);
        let run = |b: &SendBatch, wrs: &[BatchWr], free: u32, fail_at: Option<u64>| {
            let mut seen: Vec<(u64, bool)> = Vec::new();
            let r = push_batch(b, wrs, free, |w| {
                if Some(w.wr_id()) == fail_at {
                    return Err(PostError::MessageTooLong);
                }
                seen.push((w.wr_id(), w.send_flags().contains(SendFlags::SIGNALED)));
                Ok(())
            });
            (r, seen)
        };
        let (r, seen) = run(&b, &wrs, 100, None);
        assert_eq!(r, Ok(()));
        assert_eq!(seen.len(), 70);
        assert!(seen
            .iter()
            .enumerate()
            .all(|(k, &(id, sig))| id == k as u64 && sig == (k == 69)));
        // Queue full: what fits, the last of it signaled.
        let (r, seen) = run(&b, &wrs, 40, None);
        assert_eq!(r, Err((40, PostError::QueueFull)));
        assert_eq!((seen.len(), seen[39]), (40, (39, true)));
        assert_eq!(seen.iter().filter(|s| s.1).count(), 1);
        // Every one signaled; push refusing entry 35.
        let each = b.signal(BatchSignal::Each);
        let (r, seen) = run(&each, &wrs, 100, Some(35));
        assert_eq!(r, Err((35, PostError::MessageTooLong)));
        assert!(seen.len() == 35 && seen.iter().all(|s| s.1));
        let (r, seen) = run(&b.signal(BatchSignal::Never), &wrs, 100, None);
        assert!(r.is_ok() && seen.iter().all(|s| !s.1));
        // Every 16th, and the last posted: 15, 31, 47, 63, 69.
        let (r, seen) = run(&b.signal(BatchSignal::Every(16)), &wrs, 100, None);
        assert_eq!(r, Ok(()));
        let signaled: Vec<u64> = seen.iter().filter(|s| s.1).map(|s| s.0).collect();
        assert_eq!(signaled, [15, 31, 47, 63, 69]);
        // The queue fills at 40: 15, 31 and 39, the last that fit.
        let (r, seen) = run(&b.signal(BatchSignal::Every(16)), &wrs, 40, None);
        assert_eq!(r, Err((40, PostError::QueueFull)));
        let signaled: Vec<u64> = seen.iter().filter(|s| s.1).map(|s| s.0).collect();
        assert_eq!(signaled, [15, 31, 39]);
        // 0 is taken as 1: every one.
        let (_, seen) = run(&b.signal(BatchSignal::Every(0)), &wrs, 100, None);
        assert!(seen.iter().all(|s| s.1));
        // An entry too long: the ones before it, the last of them
        // signaled, the error at its index; unless the queue fills first.
        let mut long = wrs.clone();
        long[5].sge.length = (1 << 31) + 1;
        let (r, seen) = run(&b, &long, 100, None);
        assert_eq!(r, Err((5, PostError::MessageTooLong)));
        assert_eq!((seen.len(), seen[4]), (5, (4, true)));
        assert_eq!(seen.iter().filter(|s| s.1).count(), 1);
        let (r, seen) = run(&b, &long, 5, None);
        assert_eq!(r, Err((5, PostError::QueueFull)));
        assert_eq!((seen.len(), seen[4]), (5, (4, true)));
        // Nothing fits; nothing to do.
        assert_eq!(
            run(&b, &wrs, 0, None),
            (Err((0, PostError::QueueFull)), vec![])
        );
        assert_eq!(run(&b, &[], 0, None), (Ok(()), vec![]));
    }
}
