//! RoCE on the emulated ConnectX-5 through our provider: the steps of
//! `tests/mlx5-emu/c/roce.c` (which rdma-core's libmlx5 passes) ported to
//! the `verbs` API.
//!
//! Run by `cargo xtask mlx5` with the emulator preloaded and its port an
//! Ethernet one (`MLX5_EMU_LINK=eth`, set for every `mlx5_roce*`
//! program). Opens the device named by the first argument, else the first
//! mlx5 device. Prints `PASS <step>` or `FAIL <step>: <why>` per step (the
//! C program's step names; after a failure the remaining steps are
//! reported as not run) and exits 1 if any step failed. Every wait is
//! bounded.
//!
//! Where our API differs from libibverbs the step checks ours:
//! * the GID table is read through [`Context::query_gid_entry`] and
//!   [`Context::query_gid_table`] (libibverbs: `ibv_query_gid_ex`,
//!   `ibv_query_gid_table`), both falling back to sysfs as the emulator
//!   has no ioctl methods;
//! * the answer to a datagram is addressed with [`Grh::read`] and
//!   [`Grh::reply_attr`] (libibverbs: `ibv_init_ah_from_wc`,
//!   `ibv_create_ah_from_wc`);
//! * the address handle refusals our library makes before the kernel (no
//!   GRH on a RoCE port, an empty source GID entry) are
//!   `Error::InvalidArgument`; the kernel's (no neighbour, mixed address
//!   families) come back as its errno.

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rverbs::{
    AccessFlags, AhAttr, ConnectOpts, Context, Cq, Errno, Error, Gid, GidType, GlobalRoute, Grh,
    LinkLayer, Mr, Mtu, NetworkHeader, Pd, Qp, QpAttr, QpCap, QpInitAttr, QpState, QpType, RecvWr,
    SendWr, Sge, UdSendWr, Wc, WcOpcode, WcStatus,
};

const STEPS: &[&str] = &[
    "setup",
    "port",
    "gid_table",
    "rc_ipv4",
    "rc_ipv6",
    "rc_refusals",
    "ud_ipv4",
    "ud_ipv6",
    "ud_roce_v1",
    "ud_dropped",
    "ah_refusals",
    "teardown",
];

const TIMEOUT: Duration = Duration::from_millis(2000);
const QUIET: Duration = Duration::from_millis(50);
const UD_QKEY: u32 = 0x1111_1111;
const BUF: usize = 1 << 20;
const SRC: usize = 0x00000;
const DST: usize = 0x40000;
const AUX: usize = 0x80000;

/// The GID indices of the table the emulated kernel builds.
const GID_V1_LL: u8 = 0;
const GID_V2_IPV4: u8 = 3;
const GID_V2_IPV6: u8 = 5;

/// A step's failure.
struct Fail {
    step: &'static str,
    why: String,
}

type R<T = ()> = Result<T, Fail>;

fn fail<T>(step: &'static str, why: impl Into<String>) -> R<T> {
    Err(Fail {
        step,
        why: why.into(),
    })
}

fn expect(step: &'static str, ok: bool, what: &str) -> R {
    if ok {
        Ok(())
    } else {
        fail(step, what)
    }
}

trait At<T> {
    fn at(self, step: &'static str) -> R<T>;
}

impl<T, E: std::fmt::Display> At<T> for Result<T, E> {
    fn at(self, step: &'static str) -> R<T> {
        self.map_err(|e| Fail {
            step,
            why: e.to_string(),
        })
    }
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|i| (seed as usize * 31 + i * 7 + (i >> 8)) as u8)
        .collect()
}

fn expect_bytes(step: &'static str, got: &[u8], want: &[u8], what: &str) -> R {
    if let Some(i) = (0..want.len()).find(|&i| got.get(i) != Some(&want[i])) {
        return fail(
            step,
            format!(
                "{what}: byte {i} is 0x{:02x}, expected 0x{:02x}",
                got.get(i).copied().unwrap_or(0),
                want[i]
            ),
        );
    }
    Ok(())
}

fn poll_ok(step: &'static str, cq: &mut Cq) -> R<Wc> {
    let mut wc = [Wc::default(); 1];
    match cq.poll_until(&mut wc, 1, TIMEOUT) {
        Ok(_) if wc[0].status() == WcStatus::SUCCESS => Ok(wc[0]),
        Ok(_) => fail(step, format!("completion status {}", wc[0].status())),
        Err(Error::Timeout(_)) => fail(step, "timed out waiting for a completion"),
        Err(e) => fail(step, format!("poll failed: {e}")),
    }
}

fn expect_quiet(step: &'static str, cq: &mut Cq) -> R {
    let mut wc = [Wc::default(); 1];
    let end = Instant::now() + QUIET;
    while Instant::now() < end {
        if cq.poll(&mut wc).at(step)? != 0 {
            return fail(step, format!("unexpected completion {:?}", wc[0]));
        }
    }
    Ok(())
}

/// The kernel's errno of a failed call, as the step expects it.
fn expect_errno<T>(step: &'static str, r: rverbs::Result<T>, want: Errno, what: &str) -> R {
    match r {
        Err(e) if e.errno() == Some(want) => Ok(()),
        Err(e) => fail(step, format!("{what}: {e}, expected {want}")),
        Ok(_) => fail(step, format!("{what}: accepted, expected {want}")),
    }
}

/// The IPv4 header checksum check: the words sum to 0xffff.
fn ipv4_sum(h: &[u8]) -> u32 {
    let mut sum: u32 = h[..20]
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

struct Roce {
    ctx: Context,
    pd: Pd,
    mr: Mr,
    gids: Vec<Gid>,
}

impl Roce {
    fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr() + off as u64,
            length: len,
            lkey: self.mr.lkey(),
        }
    }

    fn get(&self, off: usize, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        // In bounds: every offset here is inside the buffer.
        let _ = self.mr.read_at(off, &mut v);
        v
    }

    fn make_qp(&self, step: &'static str, qp_type: QpType, cq: &Cq) -> R<Qp> {
        self.pd
            .create_qp(&QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                qp_type,
                cap: QpCap {
                    max_send_wr: 16,
                    max_recv_wr: 16,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })
            .at(step)
    }

    fn gid(&self, index: u8) -> Gid {
        self.gids[usize::from(index)]
    }

    fn setup(step: &'static str) -> R<Roce> {
        let dev = verbs_tests::mlx5_device(std::env::args().nth(1).as_deref())
            .or_else(|e| fail(step, e))?;
        let ctx = dev.open().at(step)?;
        let pd = ctx.alloc_pd().at(step)?;
        let mr = pd
            .alloc_mr(BUF, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
            .at(step)?;
        Ok(Roce {
            ctx,
            pd,
            mr,
            gids: Vec::new(),
        })
    }

    fn port(&self, s: &'static str) -> R {
        let p = self.ctx.query_port(1).at(s)?;
        expect(
            s,
            p.link_layer() == LinkLayer::Ethernet,
            "link layer is not Ethernet",
        )?;
        expect(s, p.lid == 0 && p.sm_lid == 0, "a RoCE port has no LID")?;
        expect(s, p.gid_tbl_len == 256, "gid_tbl_len is not 256")?;
        expect(s, p.pkey_tbl_len == 1, "pkey_tbl_len is not 1")?;
        expect(s, p.active_mtu == 3, "active_mtu is not 1024")?;
        expect(s, p.max_mtu == 5, "max_mtu is not 4096")?;
        expect(
            s,
            p.port_cap_flags & (1 << 26) != 0,
            "IP-based GIDs not advertised",
        )
    }

    fn gid_table(&mut self, s: &'static str) -> R {
        let want = [
            "fe80::e42:a1ff:fefb:1234",
            "fe80::e42:a1ff:fefb:1234",
            "::ffff:192.0.2.1",
            "::ffff:192.0.2.1",
            "2001:db8::1",
            "2001:db8::1",
        ];
        // The netdev's ifindex, from the real sysfs.
        let lo: u32 = std::fs::read_to_string("/sys/class/net/lo/ifindex")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        for (i, w) in want.iter().enumerate() {
            let e = self.ctx.query_gid_entry(1, i as u32).at(s)?;
            let t = if i % 2 == 1 {
                GidType::RoceV2
            } else {
                GidType::RoceV1
            };
            let w: Gid = w.parse().map_err(|_| Fail {
                step: s,
                why: format!("bad GID literal {w}"),
            })?;
            if e.gid != w || e.gid_type != t || e.netdev_ifindex != lo {
                return fail(
                    s,
                    format!(
                        "GID {i} is {} {} netdev {}",
                        e.gid, e.gid_type, e.netdev_ifindex
                    ),
                );
            }
            self.gids.push(e.gid);
        }
        expect(
            s,
            matches!(
                self.ctx.query_gid_entry(1, 6),
                Err(Error::InvalidArgument(_))
            ),
            "the empty GID 6 has an entry",
        )?;
        let table = self.ctx.query_gid_table().at(s)?;
        expect(s, table.len() == 6, "query_gid_table does not list 6 GIDs")?;
        expect(
            s,
            self.ctx.default_gid_index(1).at(s)? == GID_V2_IPV4,
            "the default GID index is not the IPv4 RoCE v2 one",
        )
    }

    /// Two RC QPs connected over GID `sgid_index`, a WRITE and a SEND.
    fn rc_over(&mut self, s: &'static str, sgid_index: u8, seed: u32) -> R {
        let mut cq = self.ctx.create_cq(16).at(s)?;
        let mut a = self.make_qp(s, QpType::Rc, &cq)?;
        let mut b = self.make_qp(s, QpType::Rc, &cq)?;
        let o = ConnectOpts {
            sgid_index,
            hop_limit: 64,
            ..Default::default()
        };
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let (ea, eb) = (a.endpoint(&o).at(s)?, b.endpoint(&o).at(s)?);
        expect(
            s,
            ea.gid == self.gid(sgid_index) && ea.lid == 0,
            "the endpoint is not the GID without a LID",
        )?;
        a.connect(&eb, access, &o).at(s)?;
        b.connect(&ea, access, &o).at(s)?;

        let data = pattern(4096, seed);
        self.mr.write_at(SRC, &data).at(s)?;
        self.mr.fill(DST..DST + 8192, 0).at(s)?;
        let sg = [self.sge(SRC, 4096)];
        let remote = self.mr.addr() + DST as u64;
        a.post_send(&[SendWr::rdma_write(1, &sg, remote, self.mr.rkey()).signaled()])
            .at(s)?;
        let wc = poll_ok(s, &mut cq)?;
        expect(
            s,
            wc.wr_id() == 1 && wc.opcode() == WcOpcode::RDMA_WRITE,
            "not the WRITE",
        )?;
        expect_bytes(s, &self.get(DST, 4096), &data, "RDMA WRITE data")?;

        let r = [self.sge(DST + 4096, 4096)];
        b.post_recv(&[RecvWr::new(2, &r)]).at(s)?;
        let sg = [self.sge(SRC, 1000)];
        a.post_send(&[SendWr::send(3, &sg).signaled()]).at(s)?;
        // The send's and the receive's completions, in either order.
        let (w1, w2) = (poll_ok(s, &mut cq)?, poll_ok(s, &mut cq)?);
        let wc = if w1.wr_id() == 2 { w1 } else { w2 };
        expect(
            s,
            wc.wr_id() == 2 && wc.opcode() == WcOpcode::RECV,
            "not the receive",
        )?;
        expect(s, wc.byte_len() == 1000, "byte_len is not 1000")?;
        expect(s, wc.src_qp() == a.qp_num(), "src_qp is not the sender")?;
        expect(s, !wc.has_grh(), "GRH flag on an RC receive")?;
        expect_bytes(s, &self.get(DST + 4096, 1000), &data[..1000], "SEND data")?;
        expect_quiet(s, &mut cq)
    }

    /// The kernel's refusals of a RoCE path; the QP stays in INIT.
    fn rc_refusals(&self, s: &'static str) -> R {
        let cq = self.ctx.create_cq(4).at(s)?;
        let mut q = self.make_qp(s, QpType::Rc, &cq)?;
        q.to_init(
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            &ConnectOpts::default(),
        )
        .at(s)?;
        let qpn = q.qp_num();
        let rtr = |grh: Option<(u8, Gid)>| QpAttr {
            qp_state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::Mtu1024),
            dest_qp_num: Some(qpn),
            rq_psn: Some(0),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(1),
            ah_attr: Some(AhAttr {
                port_num: 1,
                grh: grh.map(|(sgid_index, dgid)| GlobalRoute {
                    dgid,
                    sgid_index,
                    hop_limit: 64,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut stranger = self.gid(GID_V2_IPV6);
        stranger.0[15] = 0x99;
        let v4 = self.gid(GID_V2_IPV4);
        expect_errno(s, q.modify(&rtr(None)), Errno::EINVAL, "RTR without a GRH")?;
        expect_errno(
            s,
            q.modify(&rtr(Some((6, v4)))),
            Errno::ENODATA,
            "RTR from an empty GID entry",
        )?;
        expect_errno(
            s,
            q.modify(&rtr(Some((GID_V2_IPV6, stranger)))),
            Errno::ETIMEDOUT,
            "RTR to a GID nobody has",
        )?;
        expect_errno(
            s,
            q.modify(&rtr(Some((GID_V2_IPV4, self.gid(GID_V2_IPV6))))),
            Errno::EINVAL,
            "RTR from IPv4 to IPv6",
        )?;
        expect(
            s,
            q.query().at(s)?.0.qp_state == Some(QpState::Init),
            "the QP left INIT",
        )?;
        q.modify(&rtr(Some((GID_V2_IPV4, v4)))).at(s)
    }

    fn roce_ah(&self, s: &'static str, sgid_index: u8, dgid: Gid) -> R<rverbs::Ah> {
        self.pd
            .create_ah(&AhAttr {
                port_num: 1,
                grh: Some(GlobalRoute {
                    dgid,
                    sgid_index,
                    hop_limit: 64,
                    traffic_class: 0x10,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .at(s)
    }

    /// Sends `len` bytes from `from` to `to` through `ah`; returns the
    /// receive's completion after checking what every RoCE UD receive has.
    #[allow(clippy::too_many_arguments)]
    fn ud_send(
        &self,
        s: &'static str,
        from: &mut Qp,
        to: &mut Qp,
        ah: &rverbs::Ah,
        scq: &mut Cq,
        rcq: &mut Cq,
        len: u32,
    ) -> R<Wc> {
        let r = [self.sge(AUX, 40 + 1024)];
        to.post_recv(&[RecvWr::new(20, &r)]).at(s)?;
        let sg = [self.sge(SRC, len)];
        from.post_send(&[SendWr::send(10, &sg)
            .signaled()
            .to(ah, to.qp_num(), UD_QKEY)])
            .at(s)?;
        let wc = poll_ok(s, scq)?;
        expect(s, wc.wr_id() == 10, "not the send")?;
        let wc = poll_ok(s, rcq)?;
        expect(
            s,
            wc.wr_id() == 20 && wc.opcode() == WcOpcode::RECV,
            "not the receive",
        )?;
        expect(
            s,
            wc.byte_len() == 40 + len,
            "byte_len is not 40 + the payload",
        )?;
        expect(s, wc.src_qp() == from.qp_num(), "src_qp is not the sender")?;
        expect(s, wc.has_grh(), "the GRH flag is not set")?;
        expect_bytes(
            s,
            &self.get(AUX + 40, len as usize),
            &self.get(SRC, len as usize),
            "payload",
        )?;
        Ok(wc)
    }

    fn ready_ud(s: &'static str, qp: &mut Qp) -> R {
        qp.ready_ud(1, UD_QKEY, 0).at(s)
    }

    fn ud(&mut self, rep: &mut Report) -> R {
        let s = "ud_ipv4";
        let mut c1 = self.ctx.create_cq(16).at(s)?;
        let mut c2 = self.ctx.create_cq(16).at(s)?;
        let mut u1 = self.make_qp(s, QpType::Ud, &c1)?;
        let mut u2 = self.make_qp(s, QpType::Ud, &c2)?;
        Self::ready_ud(s, &mut u1)?;
        Self::ready_ud(s, &mut u2)?;

        // RoCE v2 over IPv4, after 20 undefined bytes (an IPv6-looking
        // pattern here: the checksum tells the IPv4 header).
        let v4 = self.gid(GID_V2_IPV4);
        let ah = self.roce_ah(s, GID_V2_IPV4, v4)?;
        expect(s, ah.handle() != 0, "no kernel AH (no destination MAC)")?;
        self.mr.write_at(SRC, &pattern(200, 3)).at(s)?;
        self.mr.fill(AUX..AUX + 40, 0x65).at(s)?;
        self.ud_send(s, &mut u1, &mut u2, &ah, &mut c1, &mut c2, 200)?;
        let h = self.get(AUX, 40);
        expect(
            s,
            h[20] == 0x45,
            "no IPv4 header (version 4, 5 words) at 20",
        )?;
        expect(s, h[21] == 0x10, "TOS is not the traffic class")?;
        expect(
            s,
            u16::from_be_bytes([h[22], h[23]]) == 20 + 8 + 12 + 8 + 200 + 4,
            "IPv4 total length is not IP + UDP + BTH + DETH + 200 + ICRC",
        )?;
        expect(s, h[28] == 64 && h[29] == 17, "TTL or protocol wrong")?;
        expect(
            s,
            ipv4_sum(&h[20..]) == 0xffff,
            "IPv4 header checksum wrong",
        )?;
        let grh = Grh::read(&self.mr, AUX).at(s)?;
        let ip = Gid::from_ipv4(Ipv4Addr::new(192, 0, 2, 1));
        expect(
            s,
            grh.network == NetworkHeader::Ipv4 && grh.sgid == ip && grh.dgid == ip,
            "Grh::read does not see IPv4 from and to 192.0.2.1",
        )?;
        expect(
            s,
            (grh.hop_limit, grh.next_header, grh.traffic_class) == (64, 17, 0x10),
            "Grh::read: TTL, protocol or TOS wrong",
        )?;
        let reply = grh.reply_attr(&self.ctx, 1).at(s)?;
        expect(
            s,
            reply.grh.map(|g| (g.sgid_index, g.dgid)) == Some((GID_V2_IPV4, v4)),
            "the reply does not go from the IPv4 RoCE v2 GID to the sender",
        )?;
        drop(ah);
        // The answer, through an AH made from the header.
        let ah = self.pd.create_ah(&reply).at(s)?;
        self.mr.write_at(SRC, &pattern(64, 4)).at(s)?;
        self.ud_send(s, &mut u2, &mut u1, &ah, &mut c2, &mut c1, 64)?;
        expect(
            s,
            self.get(AUX + 20, 1)[0] == 0x45,
            "the reply has no IPv4 header",
        )?;
        drop(ah);
        rep.pass(s);

        // RoCE v2 over IPv6: an IPv6 header, UDP next.
        let s = "ud_ipv6";
        let v6 = self.gid(GID_V2_IPV6);
        let ah = self.roce_ah(s, GID_V2_IPV6, v6)?;
        self.mr.write_at(SRC, &pattern(300, 5)).at(s)?;
        self.mr.fill(AUX..AUX + 40, 0).at(s)?;
        self.ud_send(s, &mut u1, &mut u2, &ah, &mut c1, &mut c2, 300)?;
        let h = self.get(AUX, 40);
        let grh = Grh::parse(&h).at(s)?;
        expect(
            s,
            grh.network == NetworkHeader::Ipv6 && grh.traffic_class == 0x10,
            "not IPv6 with the traffic class",
        )?;
        expect(
            s,
            grh.payload_len == 8 + 12 + 8 + 300 + 4,
            "payload length is not UDP + BTH + DETH + 300 + ICRC",
        )?;
        expect(
            s,
            (grh.next_header, grh.hop_limit) == (17, 64),
            "next header or hop limit wrong",
        )?;
        expect(
            s,
            grh.sgid == v6 && grh.dgid == v6,
            "source or destination GID wrong",
        )?;
        let reply = grh.reply_attr(&self.ctx, 1).at(s)?;
        expect(
            s,
            reply.grh.map(|g| g.sgid_index) == Some(GID_V2_IPV6),
            "the reply does not go from the IPv6 RoCE v2 GID",
        )?;
        drop(ah);
        rep.pass(s);

        // RoCE v1 from the link-local GID: an IB GRH.
        let s = "ud_roce_v1";
        let ll = self.gid(GID_V1_LL);
        let ah = self.roce_ah(s, GID_V1_LL, ll)?;
        self.mr.write_at(SRC, &pattern(100, 6)).at(s)?;
        self.mr.fill(AUX..AUX + 40, 0).at(s)?;
        self.ud_send(s, &mut u1, &mut u2, &ah, &mut c1, &mut c2, 100)?;
        let grh = Grh::read(&self.mr, AUX).at(s)?;
        expect(
            s,
            grh.network == NetworkHeader::Ipv6 && grh.next_header == 0x1b,
            "not a GRH with next header 0x1B",
        )?;
        expect(
            s,
            grh.payload_len == 12 + 8 + 100 + 4,
            "payload length is not BTH + DETH + 100 + ICRC",
        )?;
        expect(s, grh.sgid == ll, "source GID wrong")?;
        drop(ah);
        rep.pass(s);

        // To a multicast GID nobody joined: sent, not received, and the
        // receive stays posted for the next datagram.
        let s = "ud_dropped";
        let mc: Gid = "ff0e::1".parse().map_err(|_| Fail {
            step: s,
            why: "bad GID literal".into(),
        })?;
        let ah = self.roce_ah(s, GID_V2_IPV6, mc)?;
        let r = [self.sge(AUX, 40 + 1024)];
        u2.post_recv(&[RecvWr::new(30, &r)]).at(s)?;
        let sg = [self.sge(SRC, 10)];
        u1.post_send(&[SendWr::send(31, &sg)
            .signaled()
            .to(&ah, u2.qp_num(), UD_QKEY)])
            .at(s)?;
        expect(s, poll_ok(s, &mut c1)?.wr_id() == 31, "not the send")?;
        expect_quiet(s, &mut c2)?;
        drop(ah);
        let ah = self.roce_ah(s, GID_V2_IPV6, v6)?;
        u1.post_send(&[SendWr::send(32, &sg)
            .signaled()
            .to(&ah, u2.qp_num(), UD_QKEY)])
            .at(s)?;
        poll_ok(s, &mut c1)?;
        let wc = poll_ok(s, &mut c2)?;
        expect(
            s,
            wc.wr_id() == 30 && wc.byte_len() == 50,
            "the posted receive did not take the next datagram",
        )?;
        drop(ah);
        drop((u1, u2));
        rep.pass(s);
        Ok(())
    }

    fn ah_refusals(&self, s: &'static str) -> R {
        let mut stranger = self.gid(GID_V2_IPV4);
        stranger.0[15] = 9;
        let at = |sgid_index: u8, dgid: Gid| AhAttr {
            port_num: 1,
            grh: Some(GlobalRoute {
                dgid,
                sgid_index,
                hop_limit: 64,
                ..Default::default()
            }),
            ..Default::default()
        };
        expect(
            s,
            matches!(
                self.pd.create_ah(&AhAttr {
                    port_num: 1,
                    ..Default::default()
                }),
                Err(Error::InvalidArgument(_))
            ),
            "an AH without a GRH is not refused",
        )?;
        expect_errno(
            s,
            self.pd.create_ah(&at(GID_V2_IPV4, stranger)),
            Errno::ETIMEDOUT,
            "an AH to a GID nobody has",
        )?;
        expect_errno(
            s,
            self.pd.create_ah(&at(GID_V2_IPV4, self.gid(GID_V2_IPV6))),
            Errno::EINVAL,
            "an AH from IPv4 to IPv6",
        )?;
        expect(
            s,
            matches!(
                self.pd.create_ah(&at(7, self.gid(GID_V2_IPV4))),
                Err(Error::InvalidArgument(_))
            ),
            "an AH from an empty GID entry is not refused",
        )
    }
}

/// The PASS/FAIL lines.
struct Report {
    done: usize,
    failed: usize,
}

impl Report {
    fn pass(&mut self, step: &str) {
        println!("PASS {step}");
        self.done += 1;
    }

    fn fail(&mut self, f: &Fail) {
        println!("FAIL {}: {}", f.step, f.why);
        self.failed += 1;
        if let Some(i) = STEPS.iter().position(|s| *s == f.step) {
            self.done = i + 1;
        }
        for s in &STEPS[self.done.min(STEPS.len())..] {
            println!("FAIL {s}: not run (an earlier step failed)");
            self.failed += 1;
        }
        self.done = STEPS.len();
    }
}

fn run(rep: &mut Report) -> R {
    let mut t = Roce::setup("setup")?;
    rep.pass("setup");
    t.port("port")?;
    rep.pass("port");
    t.gid_table("gid_table")?;
    rep.pass("gid_table");
    t.rc_over("rc_ipv4", GID_V2_IPV4, 1)?;
    rep.pass("rc_ipv4");
    t.rc_over("rc_ipv6", GID_V2_IPV6, 2)?;
    rep.pass("rc_ipv6");
    t.rc_refusals("rc_refusals")?;
    rep.pass("rc_refusals");
    t.ud(rep)?;
    t.ah_refusals("ah_refusals")?;
    rep.pass("ah_refusals");
    drop(t);
    rep.pass("teardown");
    Ok(())
}

fn main() -> ExitCode {
    let mut rep = Report { done: 0, failed: 0 };
    if let Err(f) = run(&mut rep) {
        rep.fail(&f);
    }
    if rep.failed == 0 {
        println!("mlx5_roce: all {} steps passed", STEPS.len());
        ExitCode::SUCCESS
    } else {
        println!("mlx5_roce: {} step(s) failed", rep.failed);
        ExitCode::FAILURE
    }
}
