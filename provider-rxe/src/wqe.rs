//! The opcode's fields of an rxe send WQE (`struct rxe_send_wqe`'s `wr`
//! union), built from a work request; the ring's producer
//! ([`crate::queue`]) writes the rest.

use rverbs_abi::rxe;
use rverbs_provider::wr::{SendFlags, SendRequest, WrOpcode};
use zerocopy::{FromBytes, IntoBytes};

/// Fills in the opcode's fields of the send WQE header `hdr` for `wr`
/// (`wr_id` and `dma` are written and the rest zeroed by
/// [`Producer::push_send`](crate::queue::Producer::push_send));
/// `inline_flag` is `SendFlags::INLINE`'s bits if the payload is inline.
#[inline(always)]
pub(crate) fn build_wqe<R: SendRequest + ?Sized>(hdr: &mut rxe::SendWqe, wr: &R, inline_flag: u32) {
    let op = wr.opcode();
    hdr.wr.opcode = op as u32;
    hdr.wr.send_flags = wr.send_flags().difference(SendFlags::INLINE).bits() | inline_flag;
    // One match on the opcode for `ex` and the arm (a jump table), not a
    // chain of tests: its shape does not depend on how the compiler
    // merges them.
    let imm = wr.imm_data().to_be();
    match op {
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
            hdr.wr.ex = imm;
            let r: &mut rxe::WrRdma = wr_arm(&mut hdr.wr);
            r.remote_addr = wr.remote_addr();
            r.rkey = wr.rkey();
            hdr.iova = wr.remote_addr();
        }
        WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
            hdr.wr.ex = imm;
            let a: &mut rxe::WrAtomic = wr_arm(&mut hdr.wr);
            a.remote_addr = wr.remote_addr();
            a.compare_add = wr.compare_add();
            a.swap = wr.swap();
            a.rkey = wr.rkey();
            hdr.iova = wr.remote_addr();
        }
        WrOpcode::Send | WrOpcode::SendWithImm => hdr.wr.ex = imm,
        WrOpcode::SendWithInv | WrOpcode::LocalInv => hdr.wr.ex = wr.invalidate_rkey(),
        WrOpcode::BindMw => {
            hdr.wr.ex = 0;
            build_bind(hdr, wr);
        }
        WrOpcode::AtomicWrite | WrOpcode::Flush => {
            hdr.wr.ex = imm;
            build_capable(hdr, wr);
        }
    }
    if let Some(d) = wr.ud_dest() {
        let u: &mut rxe::WrUd = wr_arm(&mut hdr.wr);
        u.remote_qpn = d.remote_qpn;
        u.remote_qkey = d.remote_qkey;
        u.ah_num = d.ah_num;
    }
}

/// The BIND_MW arm of a send WQE: rare, kept out of the post path's line.
#[cold]
#[inline(never)]
fn build_bind<R: SendRequest + ?Sized>(hdr: &mut rxe::SendWqe, wr: &R) {
    if let Some(b) = wr.bind_mw() {
        let m: &mut rxe::WrMw = wr_arm(&mut hdr.wr);
        m.addr = b.addr;
        m.length = b.length;
        m.mr_lkey = b.mr_lkey;
        m.mw_rkey = b.mw_rkey;
        m.rkey = b.rkey;
        m.access = b.access.bits();
    }
}

/// The ATOMIC_WRITE and FLUSH arms of a send WQE, as rare as BIND_MW.
/// An ATOMIC_WRITE addresses remote memory like an RDMA WRITE (its 8 bytes
/// are in the WQE's data area, written by `push_send`); a FLUSH has its
/// own arm. Both take their length from `dma` (8, or the range's).
#[cold]
#[inline(never)]
fn build_capable<R: SendRequest + ?Sized>(hdr: &mut rxe::SendWqe, wr: &R) {
    if let Some(f) = wr.flush() {
        let a: &mut rxe::WrFlush = wr_arm(&mut hdr.wr);
        a.remote_addr = f.remote_addr;
        a.length = f.length;
        a.rkey = f.rkey;
        a.type_ = f.kind.bits();
        a.level = f.level as u8;
    } else {
        let r: &mut rxe::WrRdma = wr_arm(&mut hdr.wr);
        r.remote_addr = wr.remote_addr();
        r.rkey = wr.rkey();
    }
    hdr.iova = wr.remote_addr();
}

/// The `wr` union of a send WQE being built, as one of its arms
/// ([`rxe::WrRdma`], [`rxe::WrAtomic`], [`rxe::WrUd`]). A cast, without
/// the run-time alignment check of [`rxe::SendWr::rdma`] and its siblings.
#[inline(always)]
#[allow(unsafe_code)]
fn wr_arm<T: FromBytes + IntoBytes>(wr: &mut rxe::SendWr) -> &mut T {
    const {
        assert!(size_of::<T>() <= rxe::SEND_WR_UNION_BYTES);
        assert!(align_of::<T>() <= align_of::<u64>());
    }
    // SAFETY: the union's words are 8-byte aligned and at least as large as
    // `T` (asserted above); any bytes are a valid `T` and any `T` is valid
    // words (`FromBytes`, `IntoBytes`); the borrow of `wr` is exclusive and
    // passed on.
    unsafe { &mut *wr.wr.as_mut_ptr().cast::<T>() }
}
