//! Message framing: encoding a request (`nlmsghdr` and padded attributes),
//! splitting a reply datagram into messages, and deciding what each means
//! for the exchange in progress (data, error, done, another exchange's).

use rverbs_abi::Errno;

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

#[cfg(test)]
mod tests {
    use rverbs_abi::Errno;

    use super::{classify, encode_request, Messages, NlMsg, Step};
    use crate::abi::{
        NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
    };
    use crate::tests::{msg, nla};
    use crate::*;

    #[test]
    fn messages_split_and_truncation() {
        let a = msg(nldev_type(cmd::GET), 2, 5, &nla(1, &1u32.to_ne_bytes()));
        let b = msg(NLMSG_DONE, 2, 5, &0i32.to_ne_bytes());
        let buf = [a.clone(), b].concat();
        let m: Vec<NlMsg<'_>> = Messages { rest: &buf }.map(Result::unwrap).collect();
        assert_eq!(m.len(), 2);
        assert_eq!(
            (m[0].ty, m[0].flags, m[0].seq),
            (nldev_type(cmd::GET), 2, 5)
        );
        assert_eq!(m[0].payload, &nla(1, &1u32.to_ne_bytes())[..]);
        assert_eq!(m[1].ty, NLMSG_DONE);

        // A header cut short, a length past the datagram, a length below
        // the header: EPROTO, once.
        for cut in [1, 15, 16, 23] {
            let r: Vec<_> = Messages { rest: &a[..cut] }.collect();
            assert_eq!(r, vec![Err(Errno::EPROTO)], "cut {cut}");
        }
        for bad_len in [0u32, 15, 1000] {
            let mut m = a.clone();
            m[..4].copy_from_slice(&bad_len.to_ne_bytes());
            let r: Vec<_> = Messages { rest: &m }.collect();
            assert_eq!(r, vec![Err(Errno::EPROTO)], "nlmsg_len {bad_len}");
        }
        // The padding of the last message may be missing.
        let odd = msg(nldev_type(cmd::GET), 0, 1, &[7]);
        let r: Vec<_> = Messages { rest: &odd[..17] }.collect();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].unwrap().payload, &[7]);
    }

    #[test]
    fn classify_replies() {
        let t = nldev_type(cmd::GET);
        let one = |v: Vec<u8>| {
            Messages { rest: &v }
                .next()
                .unwrap()
                .map(|m| classify(&m, 9).to_owned_step())
        };
        assert_eq!(
            one(msg(t, 2, 9, &[1, 2, 3, 4])),
            Ok(OwnedStep::Data(vec![1, 2, 3, 4]))
        );
        assert_eq!(one(msg(t, 2, 8, &[1, 2, 3, 4])), Ok(OwnedStep::Skip));
        assert_eq!(one(msg(NLMSG_NOOP, 0, 9, &[])), Ok(OwnedStep::Skip));
        assert_eq!(
            one(msg(NLMSG_DONE, 2, 9, &0i32.to_ne_bytes())),
            Ok(OwnedStep::Done)
        );
        assert_eq!(one(msg(NLMSG_DONE, 2, 9, &[])), Ok(OwnedStep::Done));
        assert_eq!(
            one(msg(NLMSG_DONE, 2, 9, &(-libc::EBUSY).to_ne_bytes())),
            Ok(OwnedStep::Fail(Errno::EBUSY))
        );
        // An ack (error 0) followed by the echoed request header.
        let ack = [0i32.to_ne_bytes().to_vec(), msg(t, 5, 9, &[])].concat();
        assert_eq!(one(msg(NLMSG_ERROR, 0x100, 9, &ack)), Ok(OwnedStep::Done));
        let err = [(-libc::ENOENT).to_ne_bytes().to_vec(), msg(t, 5, 9, &[])].concat();
        assert_eq!(
            one(msg(NLMSG_ERROR, 0, 9, &err)),
            Ok(OwnedStep::Fail(Errno::ENOENT))
        );
        assert_eq!(
            one(msg(NLMSG_ERROR, 0, 9, &[0, 0])),
            Ok(OwnedStep::Fail(Errno::EPROTO))
        );
        assert_eq!(
            one(msg(NLMSG_ERROR, 0, 9, &5i32.to_ne_bytes())),
            Ok(OwnedStep::Fail(Errno::EPROTO))
        );
        assert_eq!(
            one(msg(NLMSG_ERROR, 0, 9, &i32::MIN.to_ne_bytes())),
            Ok(OwnedStep::Fail(Errno::from_raw(i32::MAX)))
        );
        assert_eq!(
            one(msg(NLMSG_OVERRUN, 0, 9, &[])),
            Ok(OwnedStep::Fail(Errno::EPROTO))
        );
    }

    /// [`Step`] without the borrow, for comparisons.
    #[derive(Debug, PartialEq, Eq)]
    enum OwnedStep {
        Data(Vec<u8>),
        Skip,
        Done,
        Fail(Errno),
    }

    impl Step<'_> {
        fn to_owned_step(&self) -> OwnedStep {
            match self {
                Step::Data(d) => OwnedStep::Data(d.to_vec()),
                Step::Skip => OwnedStep::Skip,
                Step::Done => OwnedStep::Done,
                Step::Fail(e) => OwnedStep::Fail(*e),
            }
        }
    }

    #[test]
    fn encode_chardev_request() {
        let mut out = Vec::new();
        let index = 3u32.to_ne_bytes();
        let attrs: [(u16, &[u8]); 2] =
            [(attr::DEV_INDEX, &index), (attr::CHARDEV_TYPE, b"uverbs\0")];
        encode_request(
            &mut out,
            nldev_type(cmd::GET_CHARDEV),
            NLM_F_REQUEST | NLM_F_ACK,
            77,
            &attrs,
        )
        .unwrap();
        // 16 header + 8 (u32) + 12 ("uverbs\0" padded from 11).
        assert_eq!(out.len(), 36);
        let m = Messages { rest: &out }.next().unwrap().unwrap();
        assert_eq!((m.ty, m.flags, m.seq), (0x140f, 5, 77));
        assert_eq!(&out[12..16], &[0; 4], "nlmsg_pid");
        let a: Vec<Attr<'_>> = Attrs::new(m.payload).map(Result::unwrap).collect();
        assert_eq!((a[0].kind, a[0].u32()), (attr::DEV_INDEX, Some(3)));
        assert_eq!(
            (a[1].kind, a[1].payload),
            (attr::CHARDEV_TYPE, &b"uverbs\0"[..])
        );
        assert_eq!(&out[35..], &[0], "attribute padding");

        let mut dump = Vec::new();
        encode_request(
            &mut dump,
            nldev_type(cmd::GET),
            NLM_F_REQUEST | NLM_F_DUMP,
            1,
            &[],
        )
        .unwrap();
        assert_eq!(dump.len(), 16);
        let m = Messages { rest: &dump }.next().unwrap().unwrap();
        assert_eq!(
            (m.ty, m.flags, m.seq, m.payload),
            (0x1401, 0x301, 1, &[][..])
        );

        let big = vec![0u8; 70_000];
        let mut o = Vec::new();
        assert_eq!(
            encode_request(&mut o, 1, 0, 0, &[(1, &big)]),
            Err(Errno::E2BIG)
        );
    }
}
