//! EFA send descriptors: the 64-byte [`TxWqe`] of one send work request,
//! as the device reads it from the low-latency queue, built only after
//! every rule the device and libefa hold it to has passed ([`SqLimits`]).
//!
//! EFA's queue pairs are datagram QPs (SRD and UD): every request names
//! its destination (address handle, QP number, Q_Key), every send is
//! completed (so every request is signaled, or the QP signals all), and
//! the operations are SEND (with immediate), and on devices that say so
//! RDMA READ and RDMA WRITE (with immediate) of one local buffer. A gather
//! list holds two buffers; inline data (SEND only) 32 bytes.

use rverbs_abi::efa::io::{
    send_op, tx_ctrl1, tx_ctrl2, RdmaReq, RemoteMemAddr, TxBufDesc, TxWqe, LKEY_MASK,
    TX_DESC_INLINE_MAX_SIZE, TX_DESC_NUM_BUFS, TX_DESC_NUM_RDMA_BUFS,
};
use rverbs_abi::wr::Sge;
use rverbs_provider::check::{inline_len, sge_len, MAX_MSG};
use rverbs_provider::wr::{Payload, SendFlags, SendRequest, WrOpcode};
use rverbs_provider::PostError;
use zerocopy::IntoBytes;

/// What one EFA send queue accepts, from the device query and the QP's
/// creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqLimits {
    /// SGEs of a SEND (at most [`TX_DESC_NUM_BUFS`]).
    pub max_sge: u32,
    /// Inline bytes of a SEND (at most [`TX_DESC_INLINE_MAX_SIZE`]).
    pub max_inline: u32,
    /// The largest SEND in bytes (the port's MTU).
    pub max_msg: u32,
    /// The largest RDMA READ or WRITE in bytes (`max_rdma_size`).
    pub max_rdma_size: u32,
    /// The device does RDMA READ.
    pub rdma_read: bool,
    /// The device does RDMA WRITE.
    pub rdma_write: bool,
    /// The QP completes every send (`sq_sig_all`): unsignaled requests are
    /// signaled anyway.
    pub sig_all: bool,
}

impl SqLimits {
    /// `self` with the SGE and inline limits no larger than a 64-byte
    /// descriptor holds.
    pub fn clamped(mut self) -> SqLimits {
        self.max_sge = self.max_sge.min(TX_DESC_NUM_BUFS as u32);
        self.max_inline = self.max_inline.min(TX_DESC_INLINE_MAX_SIZE as u32);
        self
    }
}

/// The send flags EFA takes; the others (FENCE, SOLICITED, ...) are
/// refused, as libefa refuses them.
const TAKEN_FLAGS: SendFlags = SendFlags::SIGNALED.union(SendFlags::INLINE);

/// Checks `wr` against `lim` and returns its descriptor, with request id
/// `req_id` (the slot the caller keeps its `wr_id` in) and the ring's
/// current `phase` (its low bit). Nothing is written anywhere: the caller
/// copies the descriptor into the queue.
pub fn build<R: SendRequest + ?Sized>(
    wr: &R,
    lim: &SqLimits,
    req_id: u16,
    phase: u8,
) -> Result<TxWqe, PostError> {
    let mut w = TxWqe::default();
    build_into(wr, lim, req_id, phase, &mut w)?;
    Ok(w)
}

/// [`build`] into `w` (a zeroed descriptor), what the queue calls: the
/// descriptor is not returned through the result. On an error `w` holds
/// part of a descriptor, which the caller drops.
#[inline(always)]
pub fn build_into<R: SendRequest + ?Sized>(
    wr: &R,
    lim: &SqLimits,
    req_id: u16,
    phase: u8,
    w: &mut TxWqe,
) -> Result<(), PostError> {
    let flags = wr.send_flags();
    if !TAKEN_FLAGS.contains(flags) {
        return Err(PostError::FlagsUnsupported(
            flags.difference(TAKEN_FLAGS).bits(),
        ));
    }
    if !flags.contains(SendFlags::SIGNALED) && !lim.sig_all {
        return Err(PostError::Unsignaled);
    }
    let op = wr.opcode();
    let (op_type, rdma) = match op {
        WrOpcode::Send | WrOpcode::SendWithImm => (send_op::SEND, false),
        WrOpcode::RdmaRead if lim.rdma_read => (send_op::RDMA_READ, true),
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm if lim.rdma_write => {
            (send_op::RDMA_WRITE, true)
        }
        _ => return Err(PostError::OpcodeUnsupported(op)),
    };
    let dest = wr.ud_dest().ok_or(PostError::MissingAddress)?;
    let (Ok(dest_qpn), Ok(ah)) = (u16::try_from(dest.remote_qpn), u16::try_from(dest.ah_num))
    else {
        return Err(PostError::DestOutOfRange);
    };

    let m = &mut w.meta;
    match wr.payload() {
        Payload::Inline(bufs) => {
            if rdma {
                return Err(PostError::InvalidOpcode);
            }
            let len = inline_len(op, bufs, lim.max_inline)?;
            check_msg(u64::from(len), lim)?;
            let mut at = 0usize;
            for b in bufs {
                // Within `data`: the total is at most max_inline, which
                // `clamped` keeps within the 32 inline bytes; get_mut
                // keeps a caller's unclamped limit from indexing past.
                let end = at + b.len();
                let Some(dst) = w.data.get_mut(at..end) else {
                    return Err(PostError::InlineTooLarge {
                        len: len as usize,
                        max: TX_DESC_INLINE_MAX_SIZE as u32,
                    });
                };
                dst.copy_from_slice(b);
                at = end;
            }
            m.ctrl1 |= tx_ctrl1::INLINE_MSG;
            m.length.set(len as u16);
        }
        Payload::Sge(sges) if rdma => {
            if sges.len() > TX_DESC_NUM_RDMA_BUFS {
                return Err(PostError::TooManySge {
                    given: sges.len(),
                    max: TX_DESC_NUM_RDMA_BUFS as u32,
                });
            }
            let len = sge_len(sges);
            if len > MAX_MSG {
                return Err(PostError::MessageTooLong);
            }
            // At most 2^31: a u32.
            let len = len as u32;
            if len > lim.max_rdma_size {
                return Err(PostError::RdmaTooLong {
                    len,
                    max: lim.max_rdma_size,
                });
            }
            let mut req = RdmaReq {
                remote_mem: RemoteMemAddr {
                    length: len.into(),
                    rkey: wr.rkey().into(),
                    buf_addr_lo: (wr.remote_addr() as u32).into(),
                    buf_addr_hi: ((wr.remote_addr() >> 32) as u32).into(),
                },
                ..RdmaReq::default()
            };
            if let [sge] = sges {
                req.local_mem[0] = buf_desc(sge);
            }
            w.data.copy_from_slice(req.as_bytes());
            m.length.set(sges.len() as u16);
        }
        // The common case, one buffer: no loop over the list.
        Payload::Sge([sge]) if lim.max_sge >= 1 => {
            check_msg(u64::from(sge.length), lim)?;
            w.data[..16].copy_from_slice(buf_desc(sge).as_bytes());
            m.length.set(1);
        }
        Payload::Sge(sges) => {
            if sges.len() > lim.max_sge as usize || sges.len() > TX_DESC_NUM_BUFS {
                return Err(PostError::TooManySge {
                    given: sges.len(),
                    max: lim.max_sge.min(TX_DESC_NUM_BUFS as u32),
                });
            }
            check_msg(sge_len(sges), lim)?;
            for (i, sge) in sges.iter().enumerate() {
                let at = i * core::mem::size_of::<TxBufDesc>();
                w.data[at..at + 16].copy_from_slice(buf_desc(sge).as_bytes());
            }
            m.length.set(sges.len() as u16);
        }
    }
    if matches!(op, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm) {
        m.immediate_data.set(wr.imm_data());
        m.ctrl1 |= tx_ctrl1::HAS_IMM;
    }
    m.ctrl1 |= tx_ctrl1::META_DESC | op_type;
    m.ctrl2 = (phase & tx_ctrl2::PHASE) | tx_ctrl2::FIRST | tx_ctrl2::LAST | tx_ctrl2::COMP_REQ;
    m.req_id.set(req_id);
    m.dest_qp_num.set(dest_qpn);
    m.ah.set(ah);
    m.qkey.set(dest.remote_qkey);
    Ok(())
}

/// A SEND of `len` bytes fits the message limits.
fn check_msg(len: u64, lim: &SqLimits) -> Result<(), PostError> {
    if len > MAX_MSG {
        return Err(PostError::MessageTooLong);
    }
    if len > u64::from(lim.max_msg) {
        return Err(PostError::UdTooLong {
            len,
            mtu: lim.max_msg,
        });
    }
    Ok(())
}

/// The descriptor of one local buffer.
fn buf_desc(sge: &Sge) -> TxBufDesc {
    TxBufDesc {
        length: sge.length.into(),
        lkey: (sge.lkey & LKEY_MASK).into(),
        buf_addr_lo: (sge.addr as u32).into(),
        buf_addr_hi: ((sge.addr >> 32) as u32).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_provider::wr::{SendWr, UdDest};
    use std::io::IoSlice;

    const LIM: SqLimits = SqLimits {
        max_sge: 2,
        max_inline: 32,
        max_msg: 8928,
        max_rdma_size: 1 << 30,
        rdma_read: true,
        rdma_write: false,
        sig_all: false,
    };

    fn dest() -> UdDest<'static> {
        UdDest {
            ah_num: 0x0102,
            remote_qpn: 0x0304,
            remote_qkey: 0x1122_3344,
            ..UdDest::default()
        }
    }

    fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
        Sge { addr, length, lkey }
    }

    #[test]
    fn a_send_of_two_buffers_is_laid_out_as_libefa_lays_it_out() {
        let sges = [sge(0x7f00_1234_5678, 100, 0xab12_3456), sge(0x9000, 28, 7)];
        let wr = SendWr::send(5, &sges).dest(dest()).signaled();
        let w = build(&wr, &LIM, 9, 1).unwrap();
        let b = w.as_bytes();
        #[rustfmt::skip]
        let meta: [u8; 32] = [
            9, 0,                         // req_id
            0x80,                         // META_DESC | SEND
            0b0001_1101,                  // COMP_REQ | LAST | FIRST | phase 1
            0x04, 0x03,                   // dest QPN
            2, 0,                         // two buffers
            0, 0, 0, 0,                   // no immediate
            0x02, 0x01,                   // ah
            0, 0,
            0x44, 0x33, 0x22, 0x11,       // qkey
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(&b[..32], &meta);
        assert_eq!(&b[32..36], &100u32.to_le_bytes());
        assert_eq!(
            &b[36..40],
            &0x12_3456u32.to_le_bytes(),
            "lkey cut to 24 bits"
        );
        assert_eq!(&b[40..44], &0x1234_5678u32.to_le_bytes());
        assert_eq!(&b[44..48], &0x7f00u32.to_le_bytes());
        assert_eq!(&b[48..52], &28u32.to_le_bytes());
        assert_eq!(&b[56..60], &0x9000u32.to_le_bytes());
    }

    #[test]
    fn inline_bytes_and_immediate_data_go_where_the_device_reads_them() {
        let bufs = [IoSlice::new(b"hello "), IoSlice::new(b"efa")];
        let wr = opcode_send_inline_imm(&bufs);
        let w = build(&wr, &LIM, 0, 0).unwrap();
        assert_eq!(
            w.meta.ctrl1,
            0x80 | tx_ctrl1::INLINE_MSG | tx_ctrl1::HAS_IMM
        );
        assert_eq!(w.meta.ctrl2 & tx_ctrl2::PHASE, 0);
        assert_eq!(w.meta.length.get(), 9);
        assert_eq!(w.meta.immediate_data.get(), 0xdead_beef, "host order");
        assert_eq!(&w.data[..9], b"hello efa");
        assert!(w.data[9..].iter().all(|&b| b == 0));
    }

    fn opcode_send_inline_imm<'a>(bufs: &'a [IoSlice<'a>]) -> SendWr<'a> {
        rverbs_provider::wr::opcode::Send::inline(0, bufs)
            .imm(0xdead_beef)
            .build()
            .dest(dest())
            .signaled()
    }

    #[test]
    fn an_rdma_read_carries_the_remote_range_then_the_local_buffer() {
        let s = [sge(0x5000, 4096, 3)];
        let wr = SendWr::rdma_read(1, &s, 0x1_0000_2000, 0x77)
            .dest(dest())
            .signaled();
        let w = build(&wr, &LIM, 2, 1).unwrap();
        assert_eq!(w.meta.ctrl1, 0x80 | send_op::RDMA_READ);
        assert_eq!(w.meta.length.get(), 1);
        let b = w.as_bytes();
        assert_eq!(&b[32..36], &4096u32.to_le_bytes(), "remote length");
        assert_eq!(&b[36..40], &0x77u32.to_le_bytes(), "rkey");
        assert_eq!(&b[40..48], &[0, 0x20, 0, 0, 1, 0, 0, 0], "remote address");
        assert_eq!(&b[48..52], &4096u32.to_le_bytes(), "local length");
        assert_eq!(&b[56..60], &0x5000u32.to_le_bytes());
    }

    #[test]
    fn what_efa_lacks_is_refused_before_a_byte_is_written() {
        let s = [sge(0x5000, 8, 3)];
        let three = [s[0], s[0], s[0]];
        let cases: Vec<(SendWr<'_>, PostError)> = vec![
            (SendWr::send(0, &s).dest(dest()), PostError::Unsignaled),
            (
                SendWr::send(0, &s)
                    .dest(dest())
                    .flags(SendFlags::SIGNALED | SendFlags::FENCE),
                PostError::FlagsUnsupported(SendFlags::FENCE.bits()),
            ),
            (SendWr::send(0, &s).signaled(), PostError::MissingAddress),
            (
                SendWr::fetch_add(0, &s[0], 0, 1, 1).dest(dest()).signaled(),
                PostError::OpcodeUnsupported(WrOpcode::AtomicFetchAndAdd),
            ),
            (
                SendWr::rdma_write(0, &s, 0, 1).dest(dest()).signaled(),
                PostError::OpcodeUnsupported(WrOpcode::RdmaWrite),
            ),
            (
                SendWr::send(0, &three).dest(dest()).signaled(),
                PostError::TooManySge { given: 3, max: 2 },
            ),
            (
                SendWr::rdma_read(0, &s[..0], 0, 1)
                    .dest(UdDest {
                        remote_qpn: 0x1_0000,
                        ..dest()
                    })
                    .signaled(),
                PostError::DestOutOfRange,
            ),
        ];
        for (wr, want) in cases {
            assert_eq!(build(&wr, &LIM, 0, 0), Err(want), "{wr:?}");
        }
        let big = [sge(0, 9000, 1)];
        let wr = SendWr::send(0, &big).dest(dest()).signaled();
        assert_eq!(
            build(&wr, &LIM, 0, 0),
            Err(PostError::UdTooLong {
                len: 9000,
                mtu: 8928
            })
        );
        let far = [sge(0, 1 << 30 | 1, 1)];
        let wr = SendWr::rdma_read(0, &far, 0, 1).dest(dest()).signaled();
        assert_eq!(
            build(&wr, &LIM, 0, 0),
            Err(PostError::RdmaTooLong {
                len: 1 << 30 | 1,
                max: 1 << 30
            })
        );
        let bytes = [0u8; 33];
        let bufs = [IoSlice::new(&bytes)];
        let wr = SendWr::send_inline(0, &bufs).dest(dest()).signaled();
        assert_eq!(
            build(&wr, &LIM, 0, 0),
            Err(PostError::InlineTooLarge { len: 33, max: 32 })
        );
    }

    #[test]
    fn an_unclamped_inline_limit_cannot_write_past_the_descriptor() {
        let lim = SqLimits {
            max_inline: 1000,
            ..LIM
        };
        let bytes = [1u8; 40];
        let bufs = [IoSlice::new(&bytes)];
        let wr = SendWr::send_inline(0, &bufs).dest(dest()).signaled();
        assert_eq!(
            build(&wr, &lim, 0, 0),
            Err(PostError::InlineTooLarge { len: 40, max: 32 })
        );
        assert_eq!(lim.clamped().max_inline, 32);
    }

    #[test]
    fn sig_all_signals_what_the_request_does_not() {
        let s = [sge(0x5000, 8, 3)];
        let wr = SendWr::send(0, &s).dest(dest());
        let lim = SqLimits {
            sig_all: true,
            ..LIM
        };
        let w = build(&wr, &lim, 0, 1).unwrap();
        assert_ne!(w.meta.ctrl2 & tx_ctrl2::COMP_REQ, 0);
    }
}
