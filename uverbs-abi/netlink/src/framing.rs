//! Message framing: encoding a request (`nlmsghdr` and padded attributes),
//! splitting a reply datagram into messages, and deciding what each means
//! for the exchange in progress (data, error, done, another exchange's).

use nix::errno::Errno;

use super::abi::{
    NLA_HDRLEN, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, NLMSG_MIN_TYPE, NLMSG_NOOP, NLMSG_OVERRUN,
};
use super::attrs::{align4, ne_u16, ne_u32};

/// One netlink message of a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NlMsg<'a> {
    pub(super) ty: u16,
    pub(super) flags: u16,
    pub(super) seq: u32,
    pub(super) payload: &'a [u8],
}

/// The messages of a datagram (`NLMSG_OK`/`NLMSG_NEXT`); a truncated
/// header or a length running past the datagram is [`Errno::EPROTO`].
pub(super) struct Messages<'a> {
    pub(super) rest: &'a [u8],
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<NlMsg<'a>, Errno>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let rest = self.rest;
        self.rest = &[];
        let hdr = match rest.get(..NLMSG_HDRLEN) {
            Some(h) => h,
            None => return Some(Err(Errno::EPROTO)),
        };
        let (Some(len), Some(ty), Some(flags), Some(seq)) = (
            ne_u32(hdr),
            ne_u16(&hdr[4..]),
            ne_u16(&hdr[6..]),
            ne_u32(&hdr[8..]),
        ) else {
            return Some(Err(Errno::EPROTO));
        };
        let len = match usize::try_from(len) {
            Ok(l) if (NLMSG_HDRLEN..=rest.len()).contains(&l) => l,
            _ => return Some(Err(Errno::EPROTO)),
        };
        let next = align4(len).map_or(rest.len(), |n| n.min(rest.len()));
        self.rest = &rest[next..];
        Some(Ok(NlMsg {
            ty,
            flags,
            seq,
            payload: &rest[NLMSG_HDRLEN..len],
        }))
    }
}

/// Append one request message to `out`: `struct nlmsghdr` then each
/// `(type, payload)` as a padded `struct nlattr`. [`Errno::E2BIG`] if an
/// attribute or the message does not fit its length field.
pub(super) fn encode_request(
    out: &mut Vec<u8>,
    nl_type: u16,
    flags: u16,
    seq: u32,
    attrs: &[(u16, &[u8])],
) -> Result<(), Errno> {
    let start = out.len();
    out.extend_from_slice(&[0; NLMSG_HDRLEN]);
    for &(kind, payload) in attrs {
        let len = u16::try_from(NLA_HDRLEN + payload.len()).map_err(|_| Errno::E2BIG)?;
        out.extend_from_slice(&len.to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(payload);
        let padded = align4(out.len()).ok_or(Errno::E2BIG)?;
        out.resize(padded, 0);
    }
    let total = u32::try_from(out.len() - start).map_err(|_| Errno::E2BIG)?;
    let hdr = &mut out[start..start + NLMSG_HDRLEN];
    hdr[0..4].copy_from_slice(&total.to_ne_bytes());
    hdr[4..6].copy_from_slice(&nl_type.to_ne_bytes());
    hdr[6..8].copy_from_slice(&flags.to_ne_bytes());
    hdr[8..12].copy_from_slice(&seq.to_ne_bytes());
    // nlmsg_pid stays 0: the kernel fills in the sender's port id.
    Ok(())
}

/// What one reply message means for the exchange in progress.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step<'a> {
    /// A data message: its attribute bytes.
    Data(&'a [u8]),
    /// Not ours or nothing to do (`NLMSG_NOOP`, a stale sequence number).
    Skip,
    /// The exchange is over (`NLMSG_DONE`, or an `NLMSG_ERROR` ack of 0).
    Done,
    /// The kernel failed the request (negative errno of `NLMSG_ERROR` or of
    /// `NLMSG_DONE`), or the message is malformed.
    Fail(Errno),
}

/// Classify a reply message of the exchange with sequence number `seq`.
pub(super) fn classify<'a>(msg: &NlMsg<'a>, seq: u32) -> Step<'a> {
    if msg.seq != seq {
        // Left over from an earlier exchange on this socket.
        return Step::Skip;
    }
    let error = || match msg.payload.get(..4).and_then(ne_u32) {
        Some(e) => Ok(e as i32),
        None => Err(Errno::EPROTO),
    };
    match msg.ty {
        NLMSG_ERROR => match error() {
            Ok(0) => Step::Done,
            Ok(e) if e < 0 => Step::Fail(Errno::from_raw(e.saturating_neg())),
            Ok(_) | Err(_) => Step::Fail(Errno::EPROTO),
        },
        // A dump's NLMSG_DONE carries the dump's status; an old kernel may
        // send it without payload.
        NLMSG_DONE => match error() {
            Ok(e) if e < 0 => Step::Fail(Errno::from_raw(e.saturating_neg())),
            _ => Step::Done,
        },
        NLMSG_OVERRUN => Step::Fail(Errno::EPROTO),
        NLMSG_NOOP => Step::Skip,
        // Other (reserved) control messages carry nothing for us.
        t if t < NLMSG_MIN_TYPE => Step::Skip,
        _ => Step::Data(msg.payload),
    }
}

/// Walks one reply datagram of the exchange with sequence number `seq`,
/// handing the attributes of each data message to `f` until it fails (its
/// first error is kept in `cb_err`). `Some` with the exchange's result once
/// a message ends it, `None` while more datagrams are to come.
pub(super) fn feed(
    datagram: &[u8],
    seq: u32,
    cb_err: &mut Option<Errno>,
    f: &mut impl FnMut(&[u8]) -> Result<(), Errno>,
) -> Option<Result<(), Errno>> {
    for msg in (Messages { rest: datagram }) {
        let step = match msg {
            Ok(ref m) => classify(m, seq),
            Err(e) => Step::Fail(e),
        };
        match step {
            Step::Skip => {}
            Step::Data(attrs) => {
                if cb_err.is_none() {
                    *cb_err = f(attrs).err();
                }
            }
            Step::Done => return Some(cb_err.map_or(Ok(()), Err)),
            Step::Fail(e) => return Some(Err(cb_err.unwrap_or(e))),
        }
    }
    None
}
