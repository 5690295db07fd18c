//! Batch posting on the send queue ([`SendQueue::post_batch`]): many
//! requests of one simple operation, checked once, written one BB each in
//! a tight loop, one doorbell.

use rverbs_abi::mlx5::prm;
use rverbs_provider::batch::{BatchSignal, BatchWr, SendBatch};
use zerocopy::network_endian::U32;

use super::{SendQueue, WQE_OPS};
use crate::hw::wqe::BatchWqe;
use crate::{PostError, PostFailed};

impl SendQueue {
    /// Posts the batch `wrs` of `batch`'s operation: the same WQEs as the
    /// chain of the equivalent [`SendWr`](rverbs_provider::wr::SendWr)s
    /// ([`SendBatch::to_wr`]), signaled as the batch says, one doorbell.
    ///
    /// The uniform part is checked once (state, then
    /// [`check_batch`](rverbs_provider::check::SendChecks::check_batch):
    /// an error there is at index 0, nothing posted), the ring's room
    /// once for the whole batch (entries past it end with
    /// [`PostError::QueueFull`] at the first of them), each entry's
    /// length as it is written ([`check_batch_wr`](rverbs_provider::batch::check_batch_wr): an entry refused is
    /// not written, the ones before it are posted). Every WQE is one BB
    /// (control, remote address for RDMA, one data segment).
    #[inline]
    pub fn post_batch(&mut self, batch: &SendBatch, wrs: &[BatchWr]) -> Result<(), PostFailed> {
        if !self.enabled {
            return Err(PostFailed::first(PostError::InvalidState));
        }
        self.checks.check_batch(batch)?;
        // How many of `wrs` fit.
        let room = self.room(wrs.len());
        let (todo, full) = match wrs.split_at_checked(room) {
            Some((todo, _)) if todo.len() < wrs.len() => (todo, true),
            _ => (wrs, false),
        };
        // `check_batch` allowed only the simple opcodes.
        let fast = WQE_OPS[batch.op().opcode() as usize];
        let (opcode, raddr) = (fast.op, fast.raddr);
        let signal = match batch.signaling() {
            BatchSignal::Each => prm::WQE_CTRL_CQ_UPDATE,
            BatchSignal::Last | BatchSignal::Never | BatchSignal::Every(_) => 0,
        };
        let c = BatchWqe {
            opcode,
            qpn: self.qpn,
            ds: if raddr { 2 } else { 1 },
            fm_ce_se: self.sig_bits | signal,
            imm: U32::new(if batch.op().opcode().has_imm() {
                batch.imm()
            } else {
                0
            }),
            rkey: U32::new(batch.rkey()),
        };
        let (posted, err) = if raddr {
            self.write_batch::<true>(&c, todo)
        } else {
            self.write_batch::<false>(&c, todo)
        };
        // The last WQE's size, for the doorbell: exact for a lone WQE
        // (a BlueFlame copy if more than the control segment); after
        // several the doorbell reads only its first BB, which every
        // batch WQE is.
        let last_ds = match todo {
            [e, ..] if posted == 1 => c.ds + u32::from(e.sge.length != 0),
            _ => c.ds + 1,
        };
        if posted != 0 {
            let cur_post = self.cur_post.wrapping_add(posted);
            match batch.signaling() {
                BatchSignal::Last => self
                    .ring
                    .add_fm_ce_se(cur_post.wrapping_sub(1), prm::WQE_CTRL_CQ_UPDATE),
                BatchSignal::Every(n) => {
                    // Every WQE is one BB: entry k is at cur_post + k. The
                    // WQEs are the device's only once the doorbell record
                    // covers them (below).
                    let n = n.max(1);
                    let mut k = n - 1;
                    while k < posted - 1 {
                        self.ring
                            .add_fm_ce_se(self.cur_post.wrapping_add(k), prm::WQE_CTRL_CQ_UPDATE);
                        k = k.saturating_add(n);
                    }
                    self.ring
                        .add_fm_ce_se(cur_post.wrapping_sub(1), prm::WQE_CTRL_CQ_UPDATE);
                }
                BatchSignal::Each | BatchSignal::Never => {}
            }
            self.cur_post = cur_post;
            self.head = self.head.wrapping_add(posted);
            self.bf
                .ring(&self.ring, &self.db, self.cur_post, posted, last_ds);
        }
        match err {
            Some(e) => Err(PostFailed::new(posted as usize, e)),
            None if full => Err(PostFailed::new(posted as usize, PostError::QueueFull)),
            None => Ok(()),
        }
    }

    /// Writes the WQEs of `wrs` (which fit the ring) from the producer
    /// counters on, each after [`check_batch_wr`](rverbs_provider::batch::check_batch_wr).
    /// Returns how many were written and the error that stopped the loop,
    /// if one did.
    #[inline(always)]
    fn write_batch<const RADDR: bool>(
        &self,
        c: &BatchWqe,
        wrs: &[BatchWr],
    ) -> (u32, Option<PostError>) {
        let mut w = self.ring.batch_cursor(c, self.cur_post, self.head);
        let (n, err) = w.write::<RADDR>(wrs);
        // At most `max_post` (a u32) entries fit.
        (n as u32, err)
    }
}
