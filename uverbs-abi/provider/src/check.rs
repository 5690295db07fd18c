//! The checks every provider applies to a work request before a byte of it
//! is written: payload sizes (SGE count, inline bytes, message length,
//! summed without overflow), and the opcode, QP type and destination rules.
//! [`SendChecks`] holds one send queue's limits and runs them all; the
//! providers call it instead of each carrying a copy.

use std::io::IoSlice;

use rverbs_abi::qp::qp_type;
use rverbs_abi::wr::Sge;

use crate::wr::{FlushType, Payload, SendRequest, UdDest, WrOpcode};
use crate::PostError;

/// Opcodes (bit `1 << opcode`) that, on a QP of type `qp_type` and without
/// a UD destination, pass every check of [`check_send`] whatever the
/// payload: SEND, SEND_WITH_IMM, RDMA_WRITE(_WITH_IMM), and on RC also
/// RDMA_READ. Providers skip [`check_send`] for them on the data path.
pub fn simple_send_ops(qp_type: u8) -> u32 {
    let bit = |op: WrOpcode| 1u32 << (op as u32);
    let connected = bit(WrOpcode::Send)
        | bit(WrOpcode::SendWithImm)
        | bit(WrOpcode::RdmaWrite)
        | bit(WrOpcode::RdmaWriteWithImm);
    match qp_type {
        qp_type::RC => connected | bit(WrOpcode::RdmaRead),
        qp_type::UC => connected,
        _ => 0,
    }
}

/// The largest message IB allows: 2^31 bytes.
pub const MAX_MSG: u64 = 1 << 31;

/// Total bytes of the scatter/gather list `sges`, saturating at
/// `u64::MAX` (so an impossible total still compares as too long, never
/// wraps to a small one).
#[inline(always)]
pub fn sge_len(sges: &[Sge]) -> u64 {
    match sges {
        [one] => u64::from(one.length),
        _ => sges
            .iter()
            .fold(0u64, |acc, s| acc.saturating_add(u64::from(s.length))),
    }
}

/// The checks every provider applies to an inline payload `bufs` of a send
/// with `opcode` on a QP taking at most `max_inline` inline bytes: the
/// total fits `max_inline` ([`PostError::InlineTooLarge`]) and the opcode
/// carries local data to the peer (SEND and RDMA WRITE, with or without
/// immediate; else [`PostError::InvalidOpcode`]). Returns the total.
///
/// The caller's slice lengths are summed with saturating arithmetic: a
/// set of slices whose lengths add up past `usize::MAX` reports
/// `len: usize::MAX` rather than wrapping to a small total that would
/// pass the check while the slices themselves are copied in full.
#[inline(always)]
pub fn inline_len(
    opcode: WrOpcode,
    bufs: &[IoSlice<'_>],
    max_inline: u32,
) -> Result<u32, PostError> {
    let len = bufs
        .iter()
        .fold(0usize, |acc, b| acc.saturating_add(b.len()));
    let Ok(len32) = u32::try_from(len) else {
        return Err(PostError::InlineTooLarge {
            len,
            max: max_inline,
        });
    };
    if len32 > max_inline {
        return Err(PostError::InlineTooLarge {
            len,
            max: max_inline,
        });
    }
    if !matches!(
        opcode,
        WrOpcode::Send
            | WrOpcode::SendWithImm
            | WrOpcode::SendWithInv
            | WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm
    ) {
        return Err(PostError::InvalidOpcode);
    }
    Ok(len32)
}

/// The opcode, QP type and destination rules every provider applies to a
/// send request on a QP of type `qpt` whose payload checks passed
/// (`length` bytes): READ and atomics on RC only, no RDMA on UD, atomics
/// 8 bytes in one SGE to an 8-byte aligned address, no memory window
/// operation (BIND_MW, LOCAL_INV, SEND_WITH_INV: see [`check_mw`] for a
/// provider that has them), no ATOMIC_WRITE or FLUSH (see
/// [`check_capability_op`]), and a UD destination
/// exactly on UD QPs (`has_dest`: the provider found in `wr.ud` what its
/// WQE needs), UD messages at most `ud_mtu` bytes (one packet).
pub fn check_send<R: SendRequest + ?Sized>(
    qpt: u8,
    ud_mtu: u32,
    wr: &R,
    length: u64,
    has_dest: bool,
) -> Result<(), PostError> {
    if wr.opcode().is_mw() {
        return Err(PostError::InvalidateUnsupported);
    }
    if wr.opcode().needs_capability() {
        return Err(PostError::OpcodeUnsupported(wr.opcode()));
    }
    if qpt != qp_type::RC && (wr.opcode() == WrOpcode::RdmaRead || wr.opcode().is_atomic()) {
        return Err(PostError::InvalidOpcode);
    }
    if qpt == qp_type::UD && wr.opcode().is_rdma() {
        return Err(PostError::InvalidOpcode);
    }
    if wr.opcode().is_atomic() {
        let one_sge = matches!(wr.payload(), Payload::Sge([_]));
        if length != 8 || wr.remote_addr() % 8 != 0 || !one_sge {
            return Err(PostError::BadAtomic);
        }
    }
    if qpt == qp_type::UD {
        if !has_dest {
            return Err(PostError::MissingAddress);
        }
        if length > ud_mtu as u64 {
            return Err(PostError::UdTooLong {
                len: length,
                mtu: ud_mtu,
            });
        }
    } else if wr.ud_dest().is_some() {
        return Err(PostError::UnexpectedAddress);
    }
    Ok(())
}

/// The rules of the memory window operations, for a provider that has
/// them ([`SendChecks::allow_mw`]): BIND_MW on RC and UC, LOCAL_INV and
/// SEND_WITH_INV on RC only (the only transport with an invalidating
/// packet), BIND_MW and LOCAL_INV without data, none with a UD
/// destination. `length` is the payload's.
pub fn check_mw<R: SendRequest + ?Sized>(qpt: u8, wr: &R, length: u64) -> Result<(), PostError> {
    let transport_ok = match wr.opcode() {
        WrOpcode::BindMw => qpt == qp_type::RC || qpt == qp_type::UC,
        _ => qpt == qp_type::RC,
    };
    if !transport_ok {
        return Err(PostError::InvalidOpcode);
    }
    if wr.opcode() != WrOpcode::SendWithInv {
        let empty = matches!(wr.payload(), Payload::Sge([]));
        if !empty || length != 0 {
            return Err(PostError::InvalidOpcode);
        }
    }
    if wr.ud_dest().is_some() {
        return Err(PostError::UnexpectedAddress);
    }
    Ok(())
}

/// The rules of the operations a device may lack (ATOMIC_WRITE, FLUSH),
/// for a queue that accepts them ([`SendChecks::allow`]): RC only, no data
/// of their own in SGEs or inline bytes, no UD destination; an
/// ATOMIC_WRITE to an 8-byte aligned address, a FLUSH of a known placement
/// type. Returns the length the operation moves or covers: 8 for
/// ATOMIC_WRITE, the range's for FLUSH.
pub fn check_capability_op<R: SendRequest + ?Sized>(qpt: u8, wr: &R) -> Result<u64, PostError> {
    if qpt != qp_type::RC || !matches!(wr.payload(), Payload::Sge([])) {
        return Err(PostError::InvalidOpcode);
    }
    if wr.ud_dest().is_some() {
        return Err(PostError::UnexpectedAddress);
    }
    if wr.atomic_write_value().is_some() {
        if wr.remote_addr() % 8 != 0 {
            return Err(PostError::BadAtomic);
        }
        return Ok(8);
    }
    match wr.flush() {
        Some(f) if !f.kind.is_empty() && FlushType::all().contains(f.kind) => {
            Ok(u64::from(f.length))
        }
        _ => Err(PostError::InvalidOpcode),
    }
}

/// Largest IB MTU: the UD message bound until [`SendChecks::set_ud_mtu`]
/// says what the port's active MTU is.
pub const MAX_MTU: u32 = 4096;

/// One send queue's limits and the checks made against them. Built at QP
/// creation from what the kernel (or the provider) granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendChecks {
    qp_type: u8,
    max_sge: u32,
    max_inline: u32,
    ud_mtu: u32,
    simple_ops: u32,
    mw: bool,
    /// Opcodes (bit `1 << opcode`) of [`WrOpcode::needs_capability`]
    /// that this queue accepts.
    capable_ops: u32,
}

impl SendChecks {
    /// The checks of a send queue of a QP of type `qp_type` (`IB_QPT_*`)
    /// taking `max_sge` SGEs and `max_inline` inline bytes per request.
    /// UD messages are bounded by [`MAX_MTU`] until
    /// [`SendChecks::set_ud_mtu`].
    pub fn new(qp_type: u8, max_sge: u32, max_inline: u32) -> Self {
        SendChecks {
            qp_type,
            max_sge,
            max_inline,
            ud_mtu: MAX_MTU,
            simple_ops: simple_send_ops(qp_type),
            mw: false,
            capable_ops: 0,
        }
    }
    /// Accepts `op`, one of [`WrOpcode::needs_capability`]'s (the caller
    /// has seen the device's capability for it and builds its WQE), under
    /// [`check_capability_op`]'s rules; until then it is refused with
    /// [`PostError::OpcodeUnsupported`]. Other opcodes are ignored.
    pub fn allow(&mut self, op: WrOpcode) {
        if op.needs_capability() {
            self.capable_ops |= 1 << (op as u32);
        }
    }
    /// Whether `op` is accepted (always for the opcodes that need no
    /// capability and the memory window ones where [`SendChecks::allow_mw`]
    /// was called; see [`SendChecks::allow`]).
    pub fn allows(&self, op: WrOpcode) -> bool {
        if op.needs_capability() {
            self.capable_ops & (1 << (op as u32)) != 0
        } else {
            !op.is_mw() || self.mw
        }
    }
    /// Accepts the memory window operations (BIND_MW, LOCAL_INV,
    /// SEND_WITH_INV) under [`check_mw`]'s rules; without this they are
    /// refused with [`PostError::InvalidateUnsupported`].
    pub fn allow_mw(&mut self) {
        self.mw = true;
    }
    /// Bounds UD messages by the port's active MTU (bytes).
    pub fn set_ud_mtu(&mut self, mtu: u32) {
        self.ud_mtu = mtu;
    }
    /// SGEs per request.
    #[inline(always)]
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }
    /// Inline bytes per request.
    #[inline(always)]
    pub fn max_inline(&self) -> u32 {
        self.max_inline
    }
    /// The QP type (`IB_QPT_*`).
    #[inline(always)]
    pub fn qp_type(&self) -> u8 {
        self.qp_type
    }
    /// The [`simple_send_ops`] of the QP type (bit `1 << opcode`).
    #[inline(always)]
    pub fn simple_ops(&self) -> u32 {
        self.simple_ops
    }
    /// Whether `wr` is a [`simple_send_ops`] opcode without a UD
    /// destination, which passes the opcode and destination rules whatever
    /// its payload: only the payload checks remain.
    #[inline(always)]
    pub fn is_simple<R: SendRequest + ?Sized>(&self, wr: &R) -> bool {
        self.simple_ops & (1 << (wr.opcode() as u32)) != 0 && wr.ud_dest().is_none()
    }
    /// Every check of a send request: SGE count or inline size, message
    /// length, then (unless [`SendChecks::is_simple`]) the opcode, QP type
    /// and destination rules of [`check_send`], where `has_dest` says
    /// whether the UD destination carries what this provider's WQE needs.
    /// Returns the message length in bytes (for ATOMIC_WRITE and FLUSH,
    /// what [`check_capability_op`] returns).
    #[inline(always)]
    pub fn check<R: SendRequest + ?Sized>(
        &self,
        wr: &R,
        has_dest: impl FnOnce(&UdDest<'_>) -> bool,
    ) -> Result<u64, PostError> {
        let length = match wr.payload() {
            Payload::Sge(sges) => {
                if sges.len() > self.max_sge as usize {
                    return Err(PostError::TooManySge {
                        given: sges.len(),
                        max: self.max_sge,
                    });
                }
                sge_len(sges)
            }
            Payload::Inline(bufs) => u64::from(inline_len(wr.opcode(), bufs, self.max_inline)?),
        };
        if length > MAX_MSG {
            return Err(PostError::MessageTooLong);
        }
        if !self.is_simple(wr) {
            if self.mw && wr.opcode().is_mw() {
                check_mw(self.qp_type, wr, length)?;
            } else if wr.opcode().needs_capability() {
                return self.check_capable(wr);
            } else {
                let dest = wr.ud_dest().is_some_and(|d| has_dest(&d));
                check_send(self.qp_type, self.ud_mtu, wr, length, dest)?;
            }
        }
        Ok(length)
    }
}

impl SendChecks {
    /// ATOMIC_WRITE and FLUSH: rare, kept out of the post path's line.
    #[cold]
    #[inline(never)]
    fn check_capable<R: SendRequest + ?Sized>(&self, wr: &R) -> Result<u64, PostError> {
        if !self.allows(wr.opcode()) {
            return Err(PostError::OpcodeUnsupported(wr.opcode()));
        }
        check_capability_op(self.qp_type, wr)
    }
}

/// The checks of a receive request against a queue taking `max_sge` SGEs
/// per request: at most `max_sge` SGEs ([`PostError::TooManySge`]) and at
/// most [`MAX_MSG`] bytes in all ([`PostError::MessageTooLong`]). Returns
/// the scatter list's length in bytes.
#[inline(always)]
pub fn check_recv(sg_list: &[Sge], max_sge: u32) -> Result<u64, PostError> {
    check_recv_sges(sg_list, max_sge)?;
    let length = sge_len(sg_list);
    if length > MAX_MSG {
        return Err(PostError::MessageTooLong);
    }
    Ok(length)
}

/// The SGE count check alone ([`PostError::TooManySge`]), for providers
/// whose receive entries carry a byte count per SGE and no total (mlx5).
#[inline(always)]
pub fn check_recv_sges(sg_list: &[Sge], max_sge: u32) -> Result<(), PostError> {
    if sg_list.len() > max_sge as usize {
        return Err(PostError::TooManySge {
            given: sg_list.len(),
            max: max_sge,
        });
    }
    Ok(())
}

#[cfg(test)]
mod send_check_tests {
    use super::*;
    use crate::wr::SendWr;

    /// Providers skip `check_send` exactly for the opcodes in
    /// `simple_send_ops` without a UD destination: for every QP type,
    /// opcode, payload shape and destination, `check_send` must then
    /// accept.
    #[test]
    fn simple_ops_pass_every_check() {
        let one = [Sge {
            addr: 0x1000,
            length: 64,
            lkey: 1,
        }];
        let three = [one[0]; 3];
        let av = [0u8; 48];
        let dest = UdDest {
            ah_num: 1,
            av: Some(&av),
            remote_qpn: 2,
            remote_qkey: 3,
            hold: None,
        };
        let mut skipped = 0;
        for qpt in [qp_type::RC, qp_type::UC, qp_type::UD] {
            for op in WrOpcode::ALL {
                for ud in [None, Some(dest)] {
                    for (length, sges) in [
                        (64u64, &one[..]),
                        (8, &one[..]),
                        (0, &[][..]),
                        (5000, &three[..]),
                    ] {
                        let mut wr = SendWr::any(1, op, Payload::Sge(sges)).at(0x2001, 0);
                        if let Some(d) = ud {
                            wr = wr.dest(d);
                        }
                        if simple_send_ops(qpt) & (1 << (op as u32)) != 0 && ud.is_none() {
                            skipped += 1;
                            for has_dest in [false, true] {
                                assert_eq!(
                                    check_send(qpt, 4096, &wr, length, has_dest),
                                    Ok(()),
                                    "qp type {qpt}, {op:?}, {length} bytes in {} SGEs",
                                    sges.len()
                                );
                            }
                        }
                    }
                }
            }
        }
        // RC: 5 opcodes, UC: 4, UD: none; 4 payload shapes each.
        assert_eq!(skipped, (5 + 4) * 4);
    }

    /// And the full checks refuse what the fast path must never let
    /// through: one example per refusal.
    #[test]
    fn check_send_refusals() {
        let sge = [Sge::default()];
        let wr = |op| SendWr::any(1, op, Payload::Sge(&sge));
        let ud = SendWr::send(1, &sge).ud(1, 2, 3);
        let cases = [
            (
                qp_type::UC,
                wr(WrOpcode::RdmaRead),
                PostError::InvalidOpcode,
            ),
            (
                qp_type::UD,
                wr(WrOpcode::RdmaWrite),
                PostError::InvalidOpcode,
            ),
            (
                qp_type::UD,
                wr(WrOpcode::AtomicCmpAndSwp),
                PostError::InvalidOpcode,
            ),
            (
                qp_type::RC,
                wr(WrOpcode::AtomicFetchAndAdd).at(0x1001, 1),
                PostError::BadAtomic,
            ),
            (
                qp_type::RC,
                wr(WrOpcode::SendWithInv),
                PostError::InvalidateUnsupported,
            ),
            (qp_type::UD, wr(WrOpcode::Send), PostError::MissingAddress),
            (qp_type::RC, ud, PostError::UnexpectedAddress),
        ];
        for (qpt, wr, want) in cases {
            assert_eq!(check_send(qpt, 4096, &wr, 8, false), Err(want), "{wr:?}");
        }
        assert_eq!(
            check_send(qp_type::UD, 1024, &ud, 1025, true),
            Err(PostError::UdTooLong {
                len: 1025,
                mtu: 1024
            })
        );
    }

    /// Memory window operations: refused where the provider has none,
    /// and under `check_mw`'s transport and payload rules where it has.
    #[test]
    fn memory_window_rules() {
        use crate::wr::MwBindWr;
        use rverbs_abi::mr::AccessFlags;
        let bind = SendWr::bind_mw_wr(
            1,
            MwBindWr {
                mw_rkey: 0x1234_5601,
                rkey: 0x1234_5602,
                mr_lkey: 0x77,
                addr: 0x1000,
                length: 4096,
                access: AccessFlags::REMOTE_WRITE,
            },
        );
        let b = bind.bind_mw().unwrap();
        assert_eq!(
            (b.mw_rkey, b.rkey, b.mr_lkey, b.addr, b.length, b.access),
            (
                0x1234_5601,
                0x1234_5602,
                0x77,
                0x1000,
                4096,
                AccessFlags::REMOTE_WRITE
            )
        );
        assert_eq!(bind.imm_data(), AccessFlags::REMOTE_WRITE.bits());
        let inv = SendWr::local_inv(2, 0xabcd);
        assert_eq!(inv.invalidate_rkey(), 0xabcd);
        let sge = [Sge {
            addr: 0x1000,
            length: 64,
            lkey: 1,
        }];
        let sinv = SendWr::send_with_inv(3, &sge, 0xbeef);
        assert_eq!(
            (sinv.opcode(), sinv.invalidate_rkey()),
            (WrOpcode::SendWithInv, 0xbeef)
        );
        assert_eq!(SendWr::send(4, &sge).invalidate_rkey(), 0);

        let mut rc = SendChecks::new(qp_type::RC, 4, 64);
        let uc_plain = SendChecks::new(qp_type::UC, 4, 64);
        for wr in [bind, inv, sinv] {
            assert_eq!(
                rc.check(&wr, |_| true),
                Err(PostError::InvalidateUnsupported),
                "{wr:?}"
            );
            assert_eq!(
                uc_plain.check(&wr, |_| true),
                Err(PostError::InvalidateUnsupported)
            );
        }
        rc.allow_mw();
        assert_eq!(rc.check(&bind, |_| true), Ok(0));
        assert_eq!(rc.check(&inv, |_| true), Ok(0));
        assert_eq!(rc.check(&sinv, |_| true), Ok(64));
        let mut uc = SendChecks::new(qp_type::UC, 4, 64);
        uc.allow_mw();
        assert_eq!(uc.check(&bind, |_| true), Ok(0));
        assert_eq!(uc.check(&inv, |_| true), Err(PostError::InvalidOpcode));
        assert_eq!(uc.check(&sinv, |_| true), Err(PostError::InvalidOpcode));
        let mut ud = SendChecks::new(qp_type::UD, 4, 64);
        ud.allow_mw();
        assert_eq!(ud.check(&bind, |_| true), Err(PostError::InvalidOpcode));
        // No data on BIND_MW or LOCAL_INV, no UD destination on any.
        let with_data = SendWr::any(5, WrOpcode::LocalInv, Payload::Sge(&sge));
        assert_eq!(
            rc.check(&with_data, |_| true),
            Err(PostError::InvalidOpcode)
        );
        assert_eq!(
            rc.check(&sinv.ud(1, 2, 3), |_| true),
            Err(PostError::UnexpectedAddress)
        );
    }

    /// ATOMIC_WRITE and FLUSH: refused until allowed (and always by
    /// `check_send`), then RC only, without data or UD destination, an
    /// ATOMIC_WRITE 8-byte aligned, a FLUSH of a known type; the length
    /// returned is what the WQE's data length must say.
    #[test]
    fn capability_op_rules() {
        use crate::wr::{opcode, FlushLevel, FlushType};
        let aw = SendWr::atomic_write(1, 0x2000, 7, *b"abcdefgh");
        assert_eq!(aw.atomic_write_value(), Some(*b"abcdefgh"));
        assert_eq!((aw.remote_addr(), aw.rkey()), (0x2000, 7));
        assert_eq!(aw.flush(), None);
        let fl = SendWr::rdma_flush(2, 0x3000, 9, 4096, FlushType::GLOBAL);
        let f = fl.flush().unwrap();
        assert_eq!(
            (f.remote_addr, f.rkey, f.length, f.kind, f.level),
            (0x3000, 9, 4096, FlushType::GLOBAL, FlushLevel::Range)
        );
        assert_eq!(fl.atomic_write_value(), None);
        let whole = opcode::Flush::new(3, 0, 9, 0, FlushType::all())
            .whole_mr()
            .build();
        let w = whole.flush().unwrap();
        assert_eq!((w.kind, w.level), (FlushType::all(), FlushLevel::Mr));

        let mut rc = SendChecks::new(qp_type::RC, 4, 64);
        for wr in [aw, fl, whole] {
            let want = PostError::OpcodeUnsupported(wr.opcode());
            assert_eq!(rc.check(&wr, |_| true), Err(want));
            assert_eq!(check_send(qp_type::RC, 4096, &wr, 0, false), Err(want));
        }
        rc.allow(WrOpcode::AtomicWrite);
        assert!(rc.allows(WrOpcode::AtomicWrite) && !rc.allows(WrOpcode::Flush));
        assert_eq!(rc.check(&aw, |_| true), Ok(8));
        assert_eq!(
            rc.check(&fl, |_| true),
            Err(PostError::OpcodeUnsupported(WrOpcode::Flush))
        );
        rc.allow(WrOpcode::Flush);
        assert_eq!(rc.check(&fl, |_| true), Ok(4096));
        assert_eq!(rc.check(&whole, |_| true), Ok(0));
        let unaligned = SendWr::atomic_write(4, 0x2004, 7, [0; 8]);
        assert_eq!(rc.check(&unaligned, |_| true), Err(PostError::BadAtomic));
        let no_type = SendWr::rdma_flush(5, 0x3000, 9, 64, FlushType::empty());
        assert_eq!(rc.check(&no_type, |_| true), Err(PostError::InvalidOpcode));
        let sge = [Sge::default()];
        let with_data = SendWr::any(6, WrOpcode::AtomicWrite, Payload::Sge(&sge));
        assert_eq!(
            rc.check(&with_data, |_| true),
            Err(PostError::InvalidOpcode)
        );
        assert_eq!(
            rc.check(&aw.ud(1, 2, 3), |_| true),
            Err(PostError::UnexpectedAddress)
        );
        for qpt in [qp_type::UC, qp_type::UD] {
            let mut q = SendChecks::new(qpt, 4, 64);
            q.allow(WrOpcode::AtomicWrite);
            q.allow(WrOpcode::Flush);
            assert_eq!(q.check(&aw, |_| true), Err(PostError::InvalidOpcode));
            assert_eq!(q.check(&fl, |_| true), Err(PostError::InvalidOpcode));
        }
        // `allow` ignores the opcodes that need no capability.
        let mut plain = SendChecks::new(qp_type::RC, 4, 64);
        plain.allow(WrOpcode::BindMw);
        assert!(!plain.allows(WrOpcode::BindMw) && plain.allows(WrOpcode::Send));
    }

    /// The shared payload checks: inline totals up to the maximum pass,
    /// one byte more or a READ/atomic opcode does not; SGE totals add up.
    #[test]
    fn payload_lengths() {
        use std::io::IoSlice;
        let a = [1u8; 40];
        let b = [2u8; 20];
        let bufs = [IoSlice::new(&a), IoSlice::new(&b)];
        assert_eq!(inline_len(WrOpcode::Send, &bufs, 60), Ok(60));
        assert_eq!(
            inline_len(WrOpcode::RdmaWriteWithImm, &bufs[..1], 60),
            Ok(40)
        );
        assert_eq!(inline_len(WrOpcode::Send, &[], 0), Ok(0));
        assert_eq!(inline_len(WrOpcode::SendWithInv, &bufs, 60), Ok(60));
        assert_eq!(
            inline_len(WrOpcode::Send, &bufs, 59),
            Err(PostError::InlineTooLarge { len: 60, max: 59 })
        );
        for op in [
            WrOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp,
            WrOpcode::AtomicFetchAndAdd,
            WrOpcode::LocalInv,
            WrOpcode::BindMw,
        ] {
            assert_eq!(
                inline_len(op, &bufs, 60),
                Err(PostError::InvalidOpcode),
                "{op:?}"
            );
        }
        let sge = |length| Sge {
            addr: 0,
            length,
            lkey: 0,
        };
        assert_eq!(sge_len(&[]), 0);
        assert_eq!(sge_len(&[sge(7)]), 7);
        assert_eq!(
            sge_len(&[sge(u32::MAX), sge(u32::MAX), sge(2)]),
            2 * u64::from(u32::MAX) + 2
        );
    }
}
