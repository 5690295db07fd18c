//! Building CQEs and writing them into a CQ's ring as the device does.

use std::sync::atomic::{fence, AtomicU8, Ordering};

use rverbs_abi::mlx5::prm::{Cqe64, ErrCqe};
use zerocopy::network_endian::{U16, U32};
use zerocopy::IntoBytes;

use super::roce::RoceL3;
use super::synd;
use super::user::{read_dbrec, write_user};
use crate::emu::{self};

/// A 64-byte CQE being built (`struct mlx5_cqe64`; its layout is declared
/// in `rverbs_abi::mlx5::prm` and checked against rdma-core's `mlx5dv.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe(pub Cqe64);

impl Cqe {
    /// A CQE with everything zero but the opcode.
    pub fn new(opcode: u8) -> Self {
        Cqe(Cqe64 {
            op_own: opcode << 4,
            ..Cqe64::default()
        })
    }
    /// The same bytes as an error CQE (`struct mlx5_err_cqe`).
    fn err(&mut self) -> &mut ErrCqe {
        zerocopy::transmute_mut!(&mut self.0)
    }
    /// Source QP (bits 23..0 of flags_rqpn).
    pub fn rqpn(&mut self, qpn: u32) -> &mut Self {
        self.0.flags_rqpn = U32::new(qpn & 0xff_ffff);
        self
    }
    /// SRQ number (v0) or user index (v1).
    pub fn srqn_uidx(&mut self, v: u32) -> &mut Self {
        self.0.srqn_uidx = U32::new(v & 0xff_ffff);
        self
    }
    /// Immediate data, stored as posted (already in network order).
    pub fn imm(&mut self, imm: [u8; 4]) -> &mut Self {
        self.0.imm_inval_pkey = U32::from_bytes(imm);
        self
    }
    /// Byte count.
    pub fn byte_cnt(&mut self, n: u32) -> &mut Self {
        self.0.byte_cnt = U32::new(n);
        self
    }
    /// WQE opcode (requester) and local QPN.
    pub fn sop_qpn(&mut self, opcode: u8, qpn: u32) -> &mut Self {
        self.0.sop_drop_qpn = U32::new((u32::from(opcode) << 24) | (qpn & 0xff_ffff));
        self
    }
    /// WQE counter.
    pub fn wqe_counter(&mut self, n: u16) -> &mut Self {
        self.0.wqe_counter = U16::new(n);
        self
    }
    /// Error syndrome (and a vendor syndrome).
    pub fn syndrome(&mut self, s: u8) -> &mut Self {
        let e = self.err();
        e.vendor_err_synd = if s == synd::WR_FLUSH { 0xf9 } else { 0x80 };
        e.syndrome = s;
        self
    }
    /// Sets the solicited-event bit.
    pub fn solicited(&mut self) -> &mut Self {
        self.0.op_own |= 2;
        self
    }
    /// Marks a received GRH (flags_rqpn bits 29..28).
    pub fn grh(&mut self) -> &mut Self {
        self.0.flags_rqpn = U32::new(self.0.flags_rqpn.get() | 1 << 28);
        self
    }
    /// The network header of a RoCE receive (flags_rqpn bits 25..24: 0 an
    /// IB GRH, RoCE v1; 1 IPv6; 2 IPv4), what the kernel's mlx5
    /// `handle_responder` reads as `roce_packet_type` on an Ethernet port
    /// (`MLX5_CQE_ROCE_L3_HEADER_TYPE_*`).
    pub fn roce_l3(&mut self, l3: RoceL3) -> &mut Self {
        let t = match l3 {
            RoceL3::Grh => 0,
            RoceL3::Ipv6 => 1,
            RoceL3::Ipv4 => 2,
        };
        self.0.flags_rqpn = U32::new(self.0.flags_rqpn.get() | t << 24);
        self
    }
    /// The source LID.
    pub fn slid(&mut self, lid: u16) -> &mut Self {
        self.0.slid = U16::new(lid);
        self
    }
}

/// Writes `cqe` into the CQE slot at `addr` as the device does: every
/// byte but `op_own`, then (release) `op_own` with the `owner` bit.
pub(super) fn write_cqe(addr: u64, cqe: &Cqe, owner: u8) {
    let own = std::mem::offset_of!(Cqe64, op_own);
    write_user(addr, &cqe.0.as_bytes()[..own]);
    fence(Ordering::Release);
    // SAFETY: `addr + own` is the op_own byte of a CQE inside a live ring
    // (the callers' ranges are checked when the ring was installed and
    // they hold the emulator lock); the application reads it
    // concurrently, hence the atomic store.
    unsafe {
        (*((addr + own as u64) as *const AtomicU8)).store(cqe.0.op_own | owner, Ordering::Release)
    };
}

/// The CQEs of CQ `cq` its application has not consumed: the producer
/// counter minus the consumer index it last wrote to the doorbell record,
/// modulo 2^24 as the HCA compares them (called under the lock).
pub(crate) fn cq_outstanding(cq: &emu::Cq) -> u32 {
    // The record's range was checked mapped when the CQ was created.
    let ci = read_dbrec(cq.db_addr) & 0xff_ffff;
    cq.hw_pi.wrapping_sub(ci) & 0xff_ffff
}

/// Writes the RESIZE CQE (opcode 5, owner bit of counter `pi`) that ends
/// `ring` at producer counter `pi` (called by RESIZE_CQ under the lock).
pub(crate) fn write_resize_cqe(ring: emu::CqRing, pi: u32) {
    // Unit tests drive commands with fake buffer addresses.
    if cfg!(test) || ring.entries == 0 || ring.cqe_size < 64 {
        return;
    }
    let idx = u64::from(pi & (ring.entries - 1));
    let addr = ring.buf + idx * u64::from(ring.cqe_size) + u64::from(ring.cqe_size - 64);
    let cqe = Cqe::new(5);
    let owner = u8::from(pi & ring.entries != 0);
    // The ring being replaced was checked when it was installed; the
    // application keeps it mapped until RESIZE_CQ returns (it copies CQEs
    // out of it after), and the caller holds the emulator lock.
    write_cqe(addr, &cqe, owner);
}
