//! EFA receive descriptors: a receive request is one 16-byte [`RxDesc`]
//! per buffer in the host receive ring, the first carrying the request id
//! and the FIRST bit, the last the LAST bit; the device fills the buffers
//! in order and completes the request under the first one's id.
//!
//! A buffer's length field is 16 bits: a longer buffer is offered as its
//! first 65535 bytes (the device writes no further), where libefa would
//! keep the low 16 bits of the length and offer a 64 KiB buffer as empty.
//! A request with no buffer is one empty descriptor, so it still takes
//! a slot and completes (a message with no payload, or only immediate
//! data), where libefa would write nothing yet count the slot as used.

use rverbs_abi::efa::io::{rx_ctrl, RxDesc, LKEY_MASK};
use rverbs_abi::wr::Sge;
use rverbs_provider::PostError;

/// The most bytes one descriptor offers.
pub const MAX_DESC_LEN: u32 = u16::MAX as u32;

/// Writes the descriptors of the receive of `sges` with request id
/// `req_id` into `out` (at least one, at most `max_sge`; `out` must have
/// room for them) and returns how many it wrote. Refuses more than
/// `max_sge` buffers (or more than `out` holds) before writing any.
#[inline]
pub fn build(
    sges: &[Sge],
    max_sge: u32,
    req_id: u16,
    out: &mut [RxDesc],
) -> Result<usize, PostError> {
    let room = out.len().min(max_sge as usize);
    if sges.len() > room {
        return Err(PostError::TooManySge {
            given: sges.len(),
            max: room as u32,
        });
    }
    let Some(first) = out.first_mut() else {
        return Err(PostError::TooManySge {
            given: sges.len().max(1),
            max: 0,
        });
    };
    if sges.is_empty() {
        *first = RxDesc {
            req_id: req_id.into(),
            lkey_ctrl: (rx_ctrl::FIRST | rx_ctrl::LAST).into(),
            ..RxDesc::default()
        };
        return Ok(1);
    }
    let last = sges.len() - 1;
    for (i, (sge, d)) in sges.iter().zip(out.iter_mut()).enumerate() {
        let mut ctrl = 0;
        if i == 0 {
            ctrl |= rx_ctrl::FIRST;
        }
        if i == last {
            ctrl |= rx_ctrl::LAST;
        }
        // Only the first descriptor names the request.
        *d = desc(sge, if i == 0 { req_id } else { 0 }, ctrl);
    }
    Ok(sges.len())
}

/// The one descriptor of a receive of the single buffer `sge` with
/// request id `req_id` (FIRST and LAST): what [`build`] writes for it.
#[inline]
pub fn one(sge: &Sge, req_id: u16) -> RxDesc {
    desc(sge, req_id, rx_ctrl::FIRST | rx_ctrl::LAST)
}

/// The descriptor of `sge` with request id `req_id` and the control bits
/// `ctrl` (FIRST, LAST).
#[inline]
fn desc(sge: &Sge, req_id: u16, ctrl: u32) -> RxDesc {
    RxDesc {
        buf_addr_lo: (sge.addr as u32).into(),
        buf_addr_hi: ((sge.addr >> 32) as u32).into(),
        req_id: req_id.into(),
        length: (sge.length.min(MAX_DESC_LEN) as u16).into(),
        lkey_ctrl: ((sge.lkey & LKEY_MASK) | ctrl).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    #[test]
    fn two_buffers_are_two_descriptors_first_and_last() {
        let sges = [
            Sge {
                addr: 0x7f00_0000_1000,
                length: 4096,
                lkey: 0xff00_0011,
            },
            Sge {
                addr: 0x2000,
                length: 1 << 20,
                lkey: 5,
            },
        ];
        let mut out = [RxDesc::default(); 4];
        assert_eq!(build(&sges, 2, 7, &mut out), Ok(2));
        assert_eq!(
            out[0].as_bytes(),
            &[0, 0x10, 0, 0, 0, 0x7f, 0, 0, 7, 0, 0, 0x10, 0x11, 0, 0, 0x40]
        );
        assert_eq!(out[1].req_id.get(), 0);
        assert_eq!(
            out[1].length.get(),
            0xffff,
            "a long buffer offers 64 KiB - 1"
        );
        assert_eq!(out[1].lkey_ctrl.get(), 5 | rx_ctrl::LAST);
        assert_eq!(
            out[2],
            RxDesc::default(),
            "nothing written past the request"
        );
    }

    #[test]
    fn one_buffer_is_what_build_writes() {
        let sge = Sge {
            addr: 0x1234_5678_9abc,
            length: 70_000,
            lkey: 0xff00_0042,
        };
        let mut out = [RxDesc::default(); 2];
        assert_eq!(build(&[sge], 2, 9, &mut out), Ok(1));
        assert_eq!(one(&sge, 9), out[0]);
    }

    #[test]
    fn an_empty_receive_is_one_empty_descriptor() {
        let mut out = [RxDesc::default(); 1];
        assert_eq!(build(&[], 2, 3, &mut out), Ok(1));
        assert_eq!(out[0].req_id.get(), 3);
        assert_eq!(out[0].lkey_ctrl.get(), rx_ctrl::FIRST | rx_ctrl::LAST);
    }

    #[test]
    fn too_many_buffers_write_nothing() {
        let s = Sge::default();
        let mut out = [RxDesc::default(); 4];
        assert_eq!(
            build(&[s; 3], 2, 0, &mut out),
            Err(PostError::TooManySge { given: 3, max: 2 })
        );
        assert_eq!(
            build(&[s; 3], 8, 0, &mut out[..2]),
            Err(PostError::TooManySge { given: 3, max: 2 })
        );
        assert!(build(&[], 2, 0, &mut []).is_err());
        assert!(out.iter().all(|d| *d == RxDesc::default()));
    }
}
