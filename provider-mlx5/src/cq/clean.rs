//! Cleaning a CQ: removing one QP's unpolled CQEs from the ring once the
//! device writes no more for it (libmlx5's `__mlx5_cq_clean`), compacting
//! the other QPs' CQEs over the gap.

use std::sync::atomic::Ordering;

use rverbs_abi::mlx5::prm::cqe_opcode as cqe_op;

use super::Mem;
use crate::hw::barrier;
use crate::wq::SrqShared;

impl Mem {
    /// Removes every CQE of one QP (user index `uidx` with CQE version 1,
    /// else QP number `qpn`) from the unpolled part of the ring, moving
    /// the later CQEs of other QPs down over them in order, and advances
    /// the consumer index past the gap; the SRQ WQE of each removed
    /// receive CQE goes back to `srq`'s free list. (What libmlx5's
    /// `__mlx5_cq_clean` does.) Returns how many CQEs were removed.
    ///
    /// Call it only once the device writes no more CQEs for that QP (after
    /// MODIFY_QP to RESET or DESTROY_QP returned): CQEs of other QPs may
    /// still arrive, past the producer index seen here, and are left
    /// alone.
    pub(super) fn clean(&self, uidx: u32, qpn: u32, srq: Option<&SrqShared>) -> u32 {
        self.cleaner_enter();
        let ring = self.current();
        let ncqe = ring.ncqe();
        let ci = self.cons_index.load(Ordering::Relaxed);
        // The producer index: the first entry the device has not written,
        // at most one lap ahead.
        let mut prod = ci;
        while prod.wrapping_sub(ci) < ncqe && ring.sw_cqe(prod).is_some() {
            prod = prod.wrapping_add(1);
        }
        let (key, by_qpn) = if self.cqe_version == 1 {
            (uidx, false)
        } else {
            (qpn, true)
        };
        // Backwards from the newest, so every CQE moves at most once.
        let mut nfreed: u32 = 0;
        let mut i = prod;
        while i != ci {
            i = i.wrapping_sub(1);
            // Written (seen above) and not yet consumed.
            let c = ring.read(i);
            let op = c.opcode();
            let mine = op != cqe_op::RESIZE_CQ
                && (if by_qpn { c.sop_drop_qpn } else { c.srqn_uidx }).get() & 0xFF_FFFF == key;
            if mine {
                let responder = matches!(
                    op,
                    cqe_op::RESP_WR_IMM..=cqe_op::RESP_SEND_INV | cqe_op::RESP_ERR
                );
                if let (true, Some(srq)) = (responder, srq) {
                    srq.complete(c.wqe_counter.get());
                }
                nfreed += 1;
            } else if nfreed != 0 {
                let to = i.wrapping_add(nfreed);
                let mut moved = c;
                // The owner bit the device would have given `to`.
                moved.op_own = (moved.op_own & !1) | u8::from(to & ncqe != 0);
                // `to` is before `prod`, an entry the device wrote and
                // will not write again until the consumer index passes it;
                // the owner is kept out (`cleaner_enter`).
                ring.write(to, moved);
            }
        }
        if nfreed != 0 {
            let ci = ci.wrapping_add(nfreed);
            self.cons_index.store(ci, Ordering::Relaxed);
            // The moved CQEs are in place before the device may reuse the
            // entries the consumer index now passes.
            barrier::to_device();
            self.db.set_ci(ci);
        }
        self.cleaner_exit();
        nfreed
    }
}
