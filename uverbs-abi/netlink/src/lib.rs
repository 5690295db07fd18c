//! The kernel's RDMA netlink interface (`NETLINK_RDMA`, `<rdma/rdma_netlink.h>`):
//! list the RDMA devices the kernel knows, the way `rdma dev show` does.
//!
//! [`devices`] is the one-call entry point: it dumps `RDMA_NLDEV_CMD_GET`
//! and, for each device, asks `RDMA_NLDEV_CMD_GET_CHARDEV` about its
//! "uverbs" char device, which is where the kernel reports the driver id
//! ([`RdmaDev::driver_id`], a [`driver_id`] value). That id is how a verbs
//! library picks its provider for devices without a `device/driver` sysfs
//! link, such as soft-RoCE (`rxe`).
//!
//! The generic pieces are public for other nldev requests (for example the
//! `RDMA_NLDEV_CMD_RES_*_GET` resource dumps): [`NlSocket`] frames requests
//! and walks the replies (sequence numbers, `NLMSG_ERROR`, `NLMSG_DONE`);
//! [`Attrs`] iterates the `struct nlattr` TLVs of a reply; [`cmd`] and
//! [`attr`] hold the command and attribute numbers of the installed header.
//! [`dump_res`] dumps one resource table ([`ResKind`]) of one device and
//! hands out each entry's fields.
//!
//! Every length read from the kernel is checked: a malformed message is
//! [`Errno::EPROTO`](nix::errno::Errno::EPROTO), never a panic.
//!
//! One module a job, all re-exported here: `abi` (the header's tables),
//! `attrs` (attribute parsing), `framing` (requests and reply messages),
//! `socket` (the netlink socket), `device` (the device model) and `res`
//! (resource dumps).

#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod fuzz;

mod abi;
mod attrs;
mod device;
mod framing;
mod res;
mod socket;

pub use abi::{
    attr, cmd, driver_id, nldev_type, node_type, rdma_nl_get_type, NLA_F_NESTED, NLA_TYPE_MASK,
    RDMA_NL_NLDEV, RECV_TIMEOUT_SECS,
};
pub use attrs::{Attr, Attrs};
pub use device::{chardev, devices, Chardev, RdmaDev};
pub use res::{dump_res, for_each_res_entry, ResKind};
pub use socket::NlSocket;

#[cfg(test)]
mod tests {
    use nix::errno::Errno;

    use super::*;
    use crate::abi::{
        NLA_HDRLEN, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, NLMSG_NOOP, NLMSG_OVERRUN, NLM_F_ACK,
        NLM_F_DUMP, NLM_F_REQUEST,
    };
    use crate::framing::{classify, encode_request, Messages, NlMsg, Step};

    /// One padded `struct nlattr` with raw type `ty`.
    fn nla(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((NLA_HDRLEN + payload.len()) as u16).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(payload);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    /// One message: header then `payload`.
    fn msg(ty: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&flags.to_ne_bytes());
        v.extend_from_slice(&seq.to_ne_bytes());
        v.extend_from_slice(&4242u32.to_ne_bytes());
        v.extend_from_slice(payload);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    fn collect(buf: &[u8]) -> Vec<Result<Attr<'_>, Errno>> {
        Attrs::new(buf).collect()
    }

    /// An `RDMA_NLDEV_CMD_GET` reply for rxe0 as the kernel lays it out,
    /// including the zero-length PAD attributes before the u64s.
    fn rxe0_reply() -> Vec<u8> {
        [
            nla(attr::DEV_INDEX, &3u32.to_ne_bytes()),
            nla(attr::DEV_NAME, b"rxe0\0"),
            nla(attr::PORT_INDEX, &1u32.to_ne_bytes()),
            nla(attr::PAD, &[]),
            nla(attr::CAP_FLAGS, &0x1234u64.to_ne_bytes()),
            nla(attr::NODE_GUID, &0x0200_00ff_fe00_0001u64.to_ne_bytes()),
            nla(
                attr::SYS_IMAGE_GUID,
                &0x0200_00ff_fe00_0001u64.to_ne_bytes(),
            ),
            nla(attr::DEV_NODE_TYPE, &[node_type::IB_CA]),
            nla(attr::DEV_DIM, &[0]),
            nla(attr::DEV_PROTOCOL, b"roce\0"),
        ]
        .concat()
    }

    #[test]
    fn header_constants() {
        assert_eq!(nldev_type(cmd::GET), (5 << 10) + 1);
        assert_eq!(nldev_type(cmd::GET_CHARDEV), 0x140f);
        assert_eq!(nldev_type(cmd::RES_QP_GET), 0x140a);
        assert_eq!(attr::UVERBS_DRIVER_ID, 73);
        assert_eq!(driver_id::RXE, 14);
        assert_eq!(driver_id::SIW, 18);
        assert_eq!(driver_id::MLX5, 1);
        assert_eq!(driver_id::IRDMA, driver_id::I40IW);
    }

    #[test]
    fn attrs_valid() {
        let buf = [
            nla(attr::DEV_INDEX, &7u32.to_ne_bytes()),
            nla(attr::DEV_NAME, b"mlx5_0\0"),
            nla(attr::DEV_NODE_TYPE, &[1]),
            nla(attr::NODE_GUID, &0x1122_3344_5566_7788u64.to_ne_bytes()),
        ]
        .concat();
        let a: Vec<Attr<'_>> = collect(&buf).into_iter().map(Result::unwrap).collect();
        assert_eq!(a.len(), 4);
        assert_eq!((a[0].kind, a[0].u32()), (attr::DEV_INDEX, Some(7)));
        assert_eq!((a[1].kind, a[1].str()), (attr::DEV_NAME, Some("mlx5_0")));
        assert_eq!(a[1].payload, b"mlx5_0\0");
        assert_eq!((a[2].kind, a[2].u8()), (attr::DEV_NODE_TYPE, Some(1)));
        assert_eq!(a[2].payload.len(), 1);
        assert_eq!(a[3].u64(), Some(0x1122_3344_5566_7788));
        assert!(a.iter().all(|a| !a.nested_flag));
        assert_eq!(
            Attrs::new(&buf).get(attr::DEV_NAME).unwrap().unwrap().str(),
            Some("mlx5_0")
        );
        assert_eq!(Attrs::new(&buf).get(attr::FW_VERSION), Ok(None));
    }

    #[test]
    fn attrs_empty_buffer() {
        assert!(collect(&[]).is_empty());
    }

    #[test]
    fn attrs_truncated_header() {
        for cut in 1..NLA_HDRLEN {
            let buf = nla(attr::DEV_INDEX, &1u32.to_ne_bytes());
            assert_eq!(collect(&buf[..cut]), vec![Err(Errno::EPROTO)], "cut {cut}");
        }
    }

    #[test]
    fn attrs_truncated_payload() {
        let mut buf = nla(attr::DEV_INDEX, &1u32.to_ne_bytes());
        buf.extend(nla(attr::DEV_NAME, b"rxe0\0"));
        // The second attribute claims 9 bytes but only 7 are there.
        let r = collect(&buf[..8 + 7]);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].unwrap().u32(), Some(1));
        assert_eq!(r[1], Err(Errno::EPROTO));
        // `get` reports the malformation instead of "absent".
        assert_eq!(
            Attrs::new(&buf[..15]).get(attr::DEV_NAME),
            Err(Errno::EPROTO)
        );
    }

    #[test]
    fn attrs_len_below_header() {
        for bad in 0..NLA_HDRLEN as u16 {
            let mut buf = Vec::new();
            buf.extend_from_slice(&bad.to_ne_bytes());
            buf.extend_from_slice(&attr::DEV_INDEX.to_ne_bytes());
            buf.extend_from_slice(&[0; 8]);
            // Must neither loop forever nor panic: one error, then the end.
            assert_eq!(collect(&buf), vec![Err(Errno::EPROTO)], "nla_len {bad}");
        }
    }

    #[test]
    fn attrs_nested() {
        let entry = [
            nla(attr::RES_SUMMARY_ENTRY_NAME, b"qp\0"),
            nla(attr::RES_SUMMARY_ENTRY_CURR, &5u64.to_ne_bytes()),
        ]
        .concat();
        let table = nla(attr::RES_SUMMARY_ENTRY | NLA_F_NESTED, &entry);
        let buf = [
            nla(attr::DEV_INDEX, &0u32.to_ne_bytes()),
            nla(attr::RES_SUMMARY | NLA_F_NESTED, &table),
        ]
        .concat();
        let outer: Vec<Attr<'_>> = collect(&buf).into_iter().map(Result::unwrap).collect();
        assert_eq!(outer.len(), 2);
        assert_eq!(outer[1].kind, attr::RES_SUMMARY);
        assert!(outer[1].nested_flag);
        assert_eq!(outer[1].payload, &table[..]);
        let entries: Vec<Attr<'_>> = outer[1].nested().map(Result::unwrap).collect();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].kind, attr::RES_SUMMARY_ENTRY);
        let fields: Vec<Attr<'_>> = entries[0].nested().map(Result::unwrap).collect();
        assert_eq!(fields[0].str(), Some("qp"));
        assert_eq!(fields[1].u64(), Some(5));
        // A nested table without NLA_F_NESTED (nla_nest_start_noflag) parses
        // the same way.
        let plain = nla(attr::RES_SUMMARY, &table);
        let a = collect(&plain)[0].unwrap();
        assert!(!a.nested_flag);
        assert_eq!(a.nested().count(), 1);
        // A malformed nested payload errors inside, not outside.
        let bad = nla(attr::RES_SUMMARY, &[9, 0, 1, 0]);
        let a = collect(&bad)[0].unwrap();
        assert_eq!(a.nested().collect::<Vec<_>>(), vec![Err(Errno::EPROTO)]);
    }

    #[test]
    fn attrs_type_mask() {
        // NLA_F_NET_BYTEORDER (1 << 14) and NLA_F_NESTED are masked off.
        let buf = nla(
            attr::DEV_INDEX | (1 << 14) | NLA_F_NESTED,
            &1u32.to_ne_bytes(),
        );
        let a = collect(&buf)[0].unwrap();
        assert_eq!(a.kind, attr::DEV_INDEX);
        assert!(a.nested_flag);
    }

    #[test]
    fn attrs_zero_length() {
        let buf = [nla(attr::PAD, &[]), nla(attr::FW_VERSION, &[])].concat();
        assert_eq!(buf.len(), 8);
        let a: Vec<Attr<'_>> = collect(&buf).into_iter().map(Result::unwrap).collect();
        assert_eq!(a.len(), 2);
        for a in &a {
            assert!(a.payload.is_empty());
            assert_eq!(
                (a.u8(), a.u16(), a.u32(), a.u64(), a.uint()),
                (None, None, None, None, None)
            );
            assert_eq!(a.str(), Some(""));
            assert_eq!(a.nested().count(), 0);
        }
    }

    #[test]
    fn attrs_unaligned_padding() {
        // A 1-byte u8 and a 5-byte string are each padded to 8; the next
        // attribute starts after the padding.
        let buf = [
            nla(attr::DEV_NODE_TYPE, &[4]),
            nla(attr::DEV_NAME, b"siw0\0"),
            nla(attr::DEV_INDEX, &9u32.to_ne_bytes()),
        ]
        .concat();
        assert_eq!(buf.len(), 8 + 12 + 8);
        let a: Vec<Attr<'_>> = collect(&buf).into_iter().map(Result::unwrap).collect();
        assert_eq!(a[0].u8(), Some(4));
        assert_eq!(a[1].str(), Some("siw0"));
        assert_eq!(a[2].u32(), Some(9));
        // The padding of the last attribute may be missing.
        let short = &buf[..8 + 9];
        let a: Vec<Attr<'_>> = collect(short).into_iter().map(Result::unwrap).collect();
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].str(), Some("siw0"));
        // Stray bytes after the last attribute (fewer than a header) are an
        // error.
        let mut stray = nla(attr::DEV_INDEX, &9u32.to_ne_bytes());
        stray.extend_from_slice(&[0, 0]);
        let r = collect(&stray);
        assert_eq!(r.len(), 2);
        assert_eq!(r[1], Err(Errno::EPROTO));
    }

    #[test]
    fn attr_helpers_short_payloads() {
        let one = nla(1, &[0xab]);
        let a = collect(&one)[0].unwrap();
        assert_eq!(
            (a.u8(), a.u16(), a.u32(), a.u64()),
            (Some(0xab), None, None, None)
        );
        let three = nla(1, &[1, 2, 3]);
        let a = collect(&three)[0].unwrap();
        assert_eq!(
            (a.u16(), a.u32(), a.uint()),
            (Some(u16::from_ne_bytes([1, 2])), None, None)
        );
        let seven = nla(1, &[0; 7]);
        let a = collect(&seven)[0].unwrap();
        assert_eq!((a.u32(), a.u64(), a.uint()), (Some(0), None, None));
        // uint accepts the widths the kernel may use for one value.
        let w4 = nla(1, &14u32.to_ne_bytes());
        let w8 = nla(1, &14u64.to_ne_bytes());
        assert_eq!(collect(&w4)[0].unwrap().uint(), Some(14));
        assert_eq!(collect(&w8)[0].unwrap().uint(), Some(14));
        // Strings: no NUL is fine, bytes after the NUL are ignored, and
        // invalid UTF-8 is None.
        let s = nla(1, b"abc");
        assert_eq!(collect(&s)[0].unwrap().str(), Some("abc"));
        let s = nla(1, b"ab\0cd");
        assert_eq!(collect(&s)[0].unwrap().str(), Some("ab"));
        let s = nla(1, &[0xff, 0xfe, 0]);
        assert_eq!(collect(&s)[0].unwrap().str(), None);
    }

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

    #[test]
    fn parse_get_reply() {
        let dev = RdmaDev::parse(&rxe0_reply()).unwrap();
        assert_eq!(
            dev,
            RdmaDev {
                index: 3,
                name: "rxe0".into(),
                driver_id: None,
                node_guid: Some(0x0200_00ff_fe00_0001),
                fw_version: None,
                node_type: Some(node_type::IB_CA),
                protocol: Some("roce".into()),
                port_count: Some(1),
            }
        );
        // A driver id in the reply (u32 as the kernel sends, or u64 as the
        // header says) is taken.
        for width in [4, 8] {
            let id = if width == 4 {
                nla(attr::UVERBS_DRIVER_ID, &14u32.to_ne_bytes())
            } else {
                nla(attr::UVERBS_DRIVER_ID, &14u64.to_ne_bytes())
            };
            let reply = [rxe0_reply(), id].concat();
            assert_eq!(
                RdmaDev::parse(&reply).unwrap().driver_id,
                Some(driver_id::RXE)
            );
        }
        // Short optional fields are None, not errors.
        let reply = [
            nla(attr::DEV_INDEX, &0u32.to_ne_bytes()),
            nla(attr::DEV_NAME, b"x\0"),
            nla(attr::NODE_GUID, &[1, 2, 3]),
            nla(attr::PORT_INDEX, &[1]),
        ]
        .concat();
        let dev = RdmaDev::parse(&reply).unwrap();
        assert_eq!((dev.node_guid, dev.port_count), (None, None));
        // Index and name are required.
        let no_name = nla(attr::DEV_INDEX, &0u32.to_ne_bytes());
        assert_eq!(RdmaDev::parse(&no_name), Err(Errno::EPROTO));
        let no_index = nla(attr::DEV_NAME, b"rxe0\0");
        assert_eq!(RdmaDev::parse(&no_index), Err(Errno::EPROTO));
        // Every truncation of a valid reply either parses (cut on an
        // attribute boundary after the name) or is EPROTO; never a panic.
        let full = rxe0_reply();
        for cut in 0..full.len() {
            let _ = RdmaDev::parse(&full[..cut]);
        }
        // Only the last attribute's padding may go missing.
        assert!(RdmaDev::parse(&full[..full.len() - 3]).is_ok());
        assert_eq!(RdmaDev::parse(&full[..full.len() - 4]), Err(Errno::EPROTO));
    }

    #[test]
    fn parse_chardev_reply() {
        // huge_encode_dev(MKDEV(231, 192)) = minor & 0xff | major << 8 |
        // (minor & ~0xff) << 12.
        let dev = 192u64 | (231 << 8);
        let reply = [
            nla(attr::UVERBS_DRIVER_ID, &driver_id::RXE.to_ne_bytes()),
            nla(attr::PAD, &[]),
            nla(attr::CHARDEV, &dev.to_ne_bytes()),
            nla(attr::PAD, &[]),
            nla(attr::CHARDEV_ABI, &6u64.to_ne_bytes()),
            nla(attr::CHARDEV_NAME, b"uverbs0\0"),
        ]
        .concat();
        let c = Chardev::parse(&reply).unwrap();
        assert_eq!(
            c,
            Chardev {
                name: "uverbs0".into(),
                abi: 6,
                dev,
                driver_id: Some(driver_id::RXE)
            }
        );
        assert_eq!((c.major(), c.minor()), (231, 192));
        let big = Chardev {
            dev: 0x1_2300 | (0xabc_u64 << 20) | 0x45,
            ..c.clone()
        };
        assert_eq!((big.major(), big.minor()), (0x123, 0xabc45));
        // Without a driver id (uverbs_no_driver_id_binding) it is None.
        let no_id = &reply[8..];
        assert_eq!(Chardev::parse(no_id).unwrap().driver_id, None);
        // Name, ABI and dev are required.
        assert_eq!(Chardev::parse(&reply[..8]), Err(Errno::EPROTO));
    }

    #[test]
    fn res_entries_of_a_dump_message() {
        let qp = |n: u32, pid: u32| {
            nla(
                attr::RES_QP_ENTRY | NLA_F_NESTED,
                &[
                    nla(attr::RES_LQPN, &n.to_ne_bytes()),
                    nla(attr::RES_PID, &pid.to_ne_bytes()),
                ]
                .concat(),
            )
        };
        let table = [qp(17, 148), nla(attr::PAD, &[]), qp(18, 150)].concat();
        let msg = [
            nla(attr::DEV_INDEX, &0u32.to_ne_bytes()),
            nla(attr::DEV_NAME, b"rxe0\0"),
            // A table of another kind is not ours.
            nla(attr::RES_CQ | NLA_F_NESTED, &qp(99, 1)),
            // The QP table without NLA_F_NESTED (nla_nest_start_noflag).
            nla(attr::RES_QP, &table),
        ]
        .concat();
        let mut seen = Vec::new();
        for_each_res_entry(&msg, ResKind::Qp, |e| {
            let n = e.clone().get(attr::RES_LQPN)?.and_then(|a| a.u32());
            let p = e.get(attr::RES_PID)?.and_then(|a| a.u32());
            seen.push((n, p));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![(Some(17), Some(148)), (Some(18), Some(150))]);
        // No table: no entries, no error.
        let mut n = 0;
        for_each_res_entry(&msg[..8], ResKind::Qp, |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 0);
        // A malformed table is EPROTO, and the callback's error comes back.
        let bad = nla(attr::RES_QP, &[9, 0, 1, 0]);
        assert_eq!(
            for_each_res_entry(&bad, ResKind::Qp, |_| Ok(())),
            Err(Errno::EPROTO)
        );
        assert_eq!(
            for_each_res_entry(&msg, ResKind::Qp, |_| Err(Errno::EBADMSG)),
            Err(Errno::EBADMSG)
        );
    }

    #[test]
    fn res_kinds_match_the_header() {
        let all = [
            ResKind::Qp,
            ResKind::CmId,
            ResKind::Cq,
            ResKind::Mr,
            ResKind::Pd,
            ResKind::Ctx,
            ResKind::Srq,
        ];
        let got: Vec<(u16, u16, u16)> = all
            .iter()
            .map(|k| (k.cmd(), k.table(), k.entry()))
            .collect();
        assert_eq!(
            got,
            vec![
                (10, 19, 20),
                (11, 30, 31),
                (12, 35, 36),
                (13, 40, 41),
                (14, 46, 47),
                (22, 86, 87),
                (23, 88, 89),
            ]
        );
    }
}
