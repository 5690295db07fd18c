//! The fixed work-request sequence of `tests/mlx5-emu/c/wqe_seq.c`, posted
//! through the `verbs` API (so through provider-mlx5): the same objects in
//! the same order with the same sizes, and the same work requests with the
//! same fields. Run by `cargo xtask mlx5` under the mlx5 emulator with
//! `MLX5_EMU_WQE_LOG=<path>`, which records every WQE the emulated HCA
//! executes; the xtask then compares that log with the one of wqe_seq.c
//! byte for byte (tools/xtask/src/wqe_compare.rs). Any change here must be
//! mirrored in wqe_seq.c, in the same order.
//!
//! After every post it waits for exactly the completions the post causes
//! (and 20 ms of quiet), so the HCA consumed the WQEs before the next post
//! and the log order is deterministic. Prints `PASS <step>` per step, and on
//! the first failure `FAIL <step>: <why>` and exits 1. Every wait is
//! bounded. Opens the device named by the first argument, else the first
//! mlx5 device.

use std::io::IoSlice;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rverbs::{
    opcode, AccessFlags, Ah, AhAttr, ConnectOpts, Context, Cq, Mr, Pd, Qp, QpCap, QpInitAttr,
    QpType, RecvWr, SendFlags, SendWr, Sge, Srq, SrqInitAttr, UdSendWr, Wc, WcStatus, WrOpcode,
};
use verbs_tests::step::{main_with, pass, At, Fail, R};

/// The registered buffer (wqe_seq.c `BUF_SIZE`).
const BUF_SIZE: usize = 1 << 20;
/// How long the completions of one post may take (`TIMEOUT_MS`).
const TIMEOUT: Duration = Duration::from_millis(2000);
/// How long no further completion must arrive.
const QUIET: Duration = Duration::from_millis(20);
const UD_QKEY: u32 = 0x1111_1111;

// Offsets in the one registered buffer (as in wqe_seq.c).
const SRC: usize = 0x00000;
const DST: usize = 0x40000;
const RCV: usize = 0x80000;
const ATOM: usize = 0xF0000;

/// The byte wqe_seq.c stores at `buf[SRC + i]` (i < 0x1000).
fn src_byte(i: usize) -> u8 {
    (i * 7 + 3) as u8
}

/// One send work request with up to 3 SGEs (wqe_seq.c `struct wr_desc`).
#[derive(Clone, Copy, Default)]
struct Desc {
    wr_id: u64,
    opcode: Option<WrOpcode>,
    flags: SendFlags,
    imm: u32,
    loff: [usize; 3],
    len: [u32; 3],
    nsge: usize,
    roff: usize,
    add_swap: u64,
    compare: u64,
}

/// Everything the sequence uses.
struct Seq {
    mr: Mr,
    cq: Cq,
}

impl Seq {
    fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr() + off as u64,
            length: len,
            lkey: self.mr.lkey(),
        }
    }

    /// Waits for exactly `n` successful completions on the one CQ.
    fn wait_n(&mut self, step: &str, n: usize) -> R {
        let mut wc = [Wc::default(); 1];
        let mut got = 0;
        let end = Instant::now() + TIMEOUT;
        while got < n {
            let k = self.cq.poll(&mut wc).at(step)?;
            if k == 1 {
                if wc[0].status() != WcStatus::SUCCESS {
                    return Err(Fail(
                        step.into(),
                        format!("wr_id {}: {}", wc[0].wr_id(), wc[0].status()),
                    ));
                }
                got += 1;
            } else if Instant::now() > end {
                return Err(Fail(
                    step.into(),
                    "timed out waiting for completions".into(),
                ));
            }
        }
        let end = Instant::now() + QUIET;
        while Instant::now() < end {
            if self.cq.poll(&mut wc).at(step)? != 0 {
                return Err(Fail(step.into(), "unexpected extra completion".into()));
            }
        }
        Ok(())
    }

    /// A receive of one SGE (`len1`) or two (`len1`, `len2`) at RCV, on a
    /// QP or an SRQ (wqe_seq.c `recv_on`).
    fn recv_on(
        &self,
        step: &str,
        qp: Option<&mut Qp>,
        srq: Option<&mut Srq>,
        wr_id: u64,
        len1: u32,
        len2: u32,
    ) -> R {
        let s = [self.sge(RCV, len1), self.sge(RCV + 0x1000, len2)];
        let n = if len2 != 0 { 2 } else { 1 };
        let wr = [RecvWr::new(wr_id, &s[..n])];
        match (qp, srq) {
            (Some(q), _) => q.post_recv(&wr).at(step),
            (None, Some(s)) => s.post_srq_recv(&wr).at(step),
            (None, None) => Err(Fail(step.into(), "no queue".into())),
        }
    }

    /// Posts the WRs of `descs` as one chain on `qp` (one doorbell), then
    /// waits for `n` completions. `ud` addresses UD sends.
    fn post(
        &mut self,
        step: &str,
        qp: &mut Qp,
        descs: &[Desc],
        ud: Option<(&Ah, u32)>,
        n: usize,
    ) -> R {
        let mut sges: Vec<[Sge; 3]> = Vec::new();
        let mut inl: Vec<Vec<Vec<u8>>> = Vec::new();
        for d in descs {
            let mut s = [Sge::default(); 3];
            let mut bytes = Vec::new();
            for (slot, (&off, &len)) in s.iter_mut().zip(d.loff.iter().zip(&d.len)).take(d.nsge) {
                *slot = self.sge(off, len);
                // Inline payloads: the bytes wqe_seq.c copies from its
                // buffer (the same pattern is in our MR).
                bytes.push(
                    (0..len as usize)
                        .map(|j| src_byte(off - SRC + j))
                        .collect::<Vec<u8>>(),
                );
            }
            sges.push(s);
            inl.push(bytes);
        }
        let slices: Vec<Vec<IoSlice<'_>>> = inl
            .iter()
            .map(|b| b.iter().map(|v| IoSlice::new(v)).collect())
            .collect();
        let mut wrs = Vec::new();
        for (k, d) in descs.iter().enumerate() {
            let opcode = d.opcode.unwrap_or(WrOpcode::Send);
            let payload = if d.flags.contains(SendFlags::INLINE) {
                rverbs::Payload::Inline(&slices[k])
            } else {
                rverbs::Payload::Sge(&sges[k][..d.nsge])
            };
            let (raddr, rkey) = (self.mr.addr() + d.roff as u64, self.mr.rkey());
            let sge = &sges[k][0];
            let wr = match opcode {
                WrOpcode::Send => opcode::Send::with_payload(d.wr_id, payload).build(),
                WrOpcode::SendWithImm => opcode::Send::with_payload(d.wr_id, payload)
                    .imm(d.imm)
                    .build(),
                WrOpcode::RdmaWrite => {
                    opcode::Write::with_payload(d.wr_id, payload, raddr, rkey).build()
                }
                WrOpcode::RdmaWriteWithImm => {
                    opcode::Write::with_payload(d.wr_id, payload, raddr, rkey)
                        .imm(d.imm)
                        .build()
                }
                WrOpcode::RdmaRead => SendWr::rdma_read(d.wr_id, &sges[k][..d.nsge], raddr, rkey),
                WrOpcode::AtomicCmpAndSwp => {
                    SendWr::cmp_swap(d.wr_id, sge, raddr, rkey, d.compare, d.add_swap)
                }
                WrOpcode::AtomicFetchAndAdd => {
                    SendWr::fetch_add(d.wr_id, sge, raddr, rkey, d.add_swap)
                }
                other => {
                    return Err(Fail(
                        step.into(),
                        format!("{other:?} is not in the sequence"),
                    ))
                }
            };
            let mut wr = wr.flags(d.flags);
            if let Some((ah, qpn)) = ud {
                wr = wr.to(ah, qpn, UD_QKEY);
            }
            wrs.push(wr);
        }
        qp.post_send(&wrs).at(step)?;
        self.wait_n(step, n)
    }

    fn post1(&mut self, step: &str, qp: &mut Qp, d: Desc, n: usize) -> R {
        self.post(step, qp, &[d], None, n)?;
        pass(step);
        Ok(())
    }
}

fn make_qp(pd: &Pd, cq: &Cq, qp_type: QpType, srq: Option<&Srq>) -> R<Qp> {
    let attr = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        qp_type,
        cap: QpCap {
            max_send_wr: 16,
            max_recv_wr: if srq.is_some() { 0 } else { 16 },
            max_send_sge: 3,
            max_recv_sge: if srq.is_some() { 0 } else { 2 },
            max_inline_data: 128,
        },
        sq_sig_all: false,
    };
    match srq {
        Some(s) => pd.create_qp_with_srq(&attr, s),
        None => pd.create_qp(&attr),
    }
    .at("create_qp")
}

/// Connects `a` to `b` (RC or UC) like wqe_seq.c `connect_rc`.
fn connect(a: &mut Qp, b: &Qp, rc: bool) -> R {
    let o = ConnectOpts {
        max_dest_rd_atomic: 4,
        max_rd_atomic: 4,
        min_rnr_timer: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..ConnectOpts::default()
    };
    let mut access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    if rc {
        access |= AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    }
    let remote = b.endpoint(&o).at("connect")?;
    a.connect(&remote, access, &o).at("connect")
}

fn run() -> R {
    let dev = verbs_tests::mlx5_device(std::env::args().nth(1).as_deref())
        .map_err(|e| Fail("open".into(), e))?;
    let ctx: Context = dev.open().at("open")?;
    let lid = ctx.query_port(1).at("open")?.lid;
    let pd = ctx.alloc_pd().at("pd")?;
    let mut mr = pd
        .alloc_mr(
            BUF_SIZE,
            AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        )
        .at("mr")?;
    let src: Vec<u8> = (0..0x1000).map(src_byte).collect();
    mr.write_at(SRC, &src).at("mr")?;
    let cq = ctx.create_cq(64).at("cq")?;
    // Creation order: RC pair, UC pair, UD pair, SRQ, RC pair on the SRQ.
    let mut qa = make_qp(&pd, &cq, QpType::Rc, None)?;
    let mut qb = make_qp(&pd, &cq, QpType::Rc, None)?;
    let mut ua = make_qp(&pd, &cq, QpType::Uc, None)?;
    let mut ub = make_qp(&pd, &cq, QpType::Uc, None)?;
    let mut da = make_qp(&pd, &cq, QpType::Ud, None)?;
    let mut db = make_qp(&pd, &cq, QpType::Ud, None)?;
    let mut srq = pd
        .create_srq(&SrqInitAttr {
            max_wr: 16,
            max_sge: 2,
            srq_limit: 0,
        })
        .at("srq")?;
    let mut sa = make_qp(&pd, &cq, QpType::Rc, Some(&srq))?;
    let mut sb = make_qp(&pd, &cq, QpType::Rc, Some(&srq))?;
    connect(&mut qa, &qb, true)?;
    connect(&mut qb, &qa, true)?;
    connect(&mut ua, &ub, false)?;
    connect(&mut ub, &ua, false)?;
    da.ready_ud(1, UD_QKEY, 0).at("ud_to_rts")?;
    db.ready_ud(1, UD_QKEY, 0).at("ud_to_rts")?;
    connect(&mut sa, &sb, true)?;
    connect(&mut sb, &sa, true)?;
    let ah = pd
        .create_ah(&AhAttr {
            dlid: lid,
            port_num: 1,
            ..AhAttr::default()
        })
        .at("ah")?;
    pass("objects");

    let mut s = Seq { mr, cq };
    let sig = SendFlags::SIGNALED;
    let inline = SendFlags::INLINE;
    let d = |wr_id: u64, opcode: WrOpcode, flags: SendFlags| Desc {
        wr_id,
        opcode: Some(opcode),
        flags,
        ..Desc::default()
    };

    // RC, qa -> qb.
    s.recv_on("send_signaled", Some(&mut qb), None, 100, 256, 0)?;
    s.post1(
        "send_signaled",
        &mut qa,
        Desc {
            loff: [SRC, 0, 0],
            len: [64, 0, 0],
            nsge: 1,
            ..d(1, WrOpcode::Send, sig)
        },
        2,
    )?;
    s.recv_on("send_unsignaled", Some(&mut qb), None, 101, 128, 128)?;
    s.post1(
        "send_unsignaled",
        &mut qa,
        Desc {
            loff: [SRC + 8, 0, 0],
            len: [200, 0, 0],
            nsge: 1,
            ..d(2, WrOpcode::Send, SendFlags::empty())
        },
        1,
    )?;
    s.recv_on("send_imm", Some(&mut qb), None, 102, 256, 0)?;
    s.post1(
        "send_imm",
        &mut qa,
        Desc {
            imm: 0x1234_5678,
            loff: [SRC, 0, 0],
            len: [32, 0, 0],
            nsge: 1,
            ..d(3, WrOpcode::SendWithImm, sig)
        },
        2,
    )?;
    s.post1(
        "write",
        &mut qa,
        Desc {
            loff: [SRC, 0, 0],
            len: [300, 0, 0],
            nsge: 1,
            roff: DST,
            ..d(4, WrOpcode::RdmaWrite, sig)
        },
        1,
    )?;
    s.recv_on("write_imm", Some(&mut qb), None, 103, 16, 0)?;
    s.post1(
        "write_imm",
        &mut qa,
        Desc {
            imm: 0xabcd_ef01,
            loff: [SRC, 0, 0],
            len: [100, 0, 0],
            nsge: 1,
            roff: DST + 0x400,
            ..d(5, WrOpcode::RdmaWriteWithImm, sig)
        },
        2,
    )?;
    s.post1(
        "read",
        &mut qa,
        Desc {
            loff: [SRC + 0x2000, 0, 0],
            len: [128, 0, 0],
            nsge: 1,
            roff: DST,
            ..d(6, WrOpcode::RdmaRead, sig)
        },
        1,
    )?;
    s.post1(
        "cas",
        &mut qa,
        Desc {
            loff: [SRC + 0x3000, 0, 0],
            len: [8, 0, 0],
            nsge: 1,
            roff: ATOM,
            compare: 0,
            add_swap: 0x1122_3344_5566_7788,
            ..d(7, WrOpcode::AtomicCmpAndSwp, sig)
        },
        1,
    )?;
    s.post1(
        "faa",
        &mut qa,
        Desc {
            loff: [SRC + 0x3008, 0, 0],
            len: [8, 0, 0],
            nsge: 1,
            roff: ATOM,
            add_swap: 5,
            ..d(8, WrOpcode::AtomicFetchAndAdd, sig)
        },
        1,
    )?;
    s.recv_on("inline_send", Some(&mut qb), None, 104, 256, 0)?;
    s.post1(
        "inline_send",
        &mut qa,
        Desc {
            loff: [SRC, SRC + 0x100, 0],
            len: [20, 13, 0],
            nsge: 2,
            ..d(9, WrOpcode::Send, sig | inline)
        },
        2,
    )?;
    s.post1(
        "inline_write",
        &mut qa,
        Desc {
            loff: [SRC, 0, 0],
            len: [64, 0, 0],
            nsge: 1,
            roff: DST + 0x800,
            ..d(10, WrOpcode::RdmaWrite, sig | inline)
        },
        1,
    )?;
    s.recv_on("multi_sge", Some(&mut qb), None, 105, 256, 0)?;
    s.post1(
        "multi_sge",
        &mut qa,
        Desc {
            loff: [SRC, SRC + 0x40, SRC + 0x80],
            len: [16, 0, 24],
            nsge: 3,
            ..d(11, WrOpcode::Send, sig)
        },
        2,
    )?;
    s.post1(
        "fence",
        &mut qa,
        Desc {
            loff: [SRC, 0, 0],
            len: [8, 0, 0],
            nsge: 1,
            roff: DST + 0xc00,
            ..d(12, WrOpcode::RdmaWrite, sig | SendFlags::FENCE)
        },
        1,
    )?;
    s.recv_on("solicited", Some(&mut qb), None, 106, 256, 0)?;
    s.post1(
        "solicited",
        &mut qa,
        Desc {
            loff: [SRC, 0, 0],
            len: [4, 0, 0],
            nsge: 1,
            ..d(13, WrOpcode::Send, sig | SendFlags::SOLICITED)
        },
        1 + 1,
    )?;
    let chain: Vec<Desc> = (0..3)
        .map(|i| Desc {
            loff: [SRC + 0x10 * i, 0, 0],
            len: [16, 0, 0],
            nsge: 1,
            roff: DST + 0x1000 + 0x10 * i,
            ..d(
                20 + i as u64,
                WrOpcode::RdmaWrite,
                if i == 2 { sig } else { SendFlags::empty() },
            )
        })
        .collect();
    s.post("chain", &mut qa, &chain, None, 1)?;
    pass("chain");
    // 3-BB inline writes across two wraps of the ring (see wqe_seq.c).
    for i in 0..90 {
        s.post(
            "wrap",
            &mut qa,
            &[Desc {
                loff: [SRC + i, 0, 0],
                len: [100, 0, 0],
                nsge: 1,
                roff: DST + 0x2000 + 0x80 * i,
                ..d(100 + i as u64, WrOpcode::RdmaWrite, sig | inline)
            }],
            None,
            1,
        )?;
    }
    pass("wrap");
    // Chains of 12 mixing every opcode of the common path (one doorbell
    // each), a FETCH_AND_ADD and a 2-SGE WRITE among them; ten of them go
    // round the ring (see wqe_seq.c).
    for r in 0..10u32 {
        for i in 0..3 {
            s.recv_on(
                "mixed_chain",
                Some(&mut qb),
                None,
                300 + 3 * u64::from(r) + i,
                256,
                0,
            )?;
        }
        let chain: Vec<Desc> = (0..12usize)
            .map(|i| {
                let base = Desc {
                    loff: [SRC + 0x40 * i, 0, 0],
                    len: [16 + 8 * i as u32, 0, 0],
                    nsge: 1,
                    roff: DST + 0x3000 + 0x80 * i,
                    ..d(
                        400 + 12 * u64::from(r) + i as u64,
                        WrOpcode::RdmaWrite,
                        SendFlags::empty(),
                    )
                };
                match i {
                    2 => Desc {
                        opcode: Some(WrOpcode::RdmaWriteWithImm),
                        imm: 0x1000 + r,
                        ..base
                    },
                    3 => Desc {
                        opcode: Some(WrOpcode::Send),
                        ..base
                    },
                    4 => Desc {
                        opcode: Some(WrOpcode::SendWithImm),
                        imm: 0x2000 + r,
                        ..base
                    },
                    5 => Desc {
                        opcode: Some(WrOpcode::RdmaRead),
                        ..base
                    },
                    6 => Desc {
                        opcode: Some(WrOpcode::AtomicFetchAndAdd),
                        loff: [SRC + 0x3100 + 8 * r as usize, 0, 0],
                        len: [8, 0, 0],
                        roff: ATOM + 0x100 + 8 * r as usize,
                        add_swap: 1 + u64::from(r),
                        ..base
                    },
                    7 => Desc {
                        flags: SendFlags::FENCE,
                        ..base
                    },
                    8 => Desc {
                        loff: [base.loff[0], SRC + 0x800, 0],
                        len: [base.len[0], 8, 0],
                        nsge: 2,
                        ..base
                    },
                    11 => Desc { flags: sig, ..base },
                    _ => base,
                }
            })
            .collect();
        s.post("mixed_chain", &mut qa, &chain, None, 1 + 3)?;
    }
    pass("mixed_chain");

    // UC, ua -> ub.
    s.recv_on("uc_send", Some(&mut ub), None, 200, 256, 0)?;
    s.post1(
        "uc_send",
        &mut ua,
        Desc {
            loff: [SRC, 0, 0],
            len: [48, 0, 0],
            nsge: 1,
            ..d(30, WrOpcode::Send, sig)
        },
        2,
    )?;
    s.post1(
        "uc_write",
        &mut ua,
        Desc {
            loff: [SRC, 0, 0],
            len: [48, 0, 0],
            nsge: 1,
            roff: DST + 0x8000,
            ..d(31, WrOpcode::RdmaWrite, sig)
        },
        1,
    )?;

    // UD, da -> db (the receive leaves room for the 40-byte GRH area).
    s.recv_on("ud_send", Some(&mut db), None, 300, 40 + 256, 0)?;
    let dbn = db.qp_num();
    s.post(
        "ud_send",
        &mut da,
        &[Desc {
            imm: 77,
            loff: [SRC, 0, 0],
            len: [200, 0, 0],
            nsge: 1,
            ..d(40, WrOpcode::SendWithImm, sig)
        }],
        Some((&ah, dbn)),
        2,
    )?;
    pass("ud_send");

    // RC on the SRQ, sa -> sb: one receive of 1 SGE, one of 2.
    s.recv_on("srq_1sge", None, Some(&mut srq), 400, 256, 0)?;
    s.post1(
        "srq_1sge",
        &mut sa,
        Desc {
            loff: [SRC, 0, 0],
            len: [100, 0, 0],
            nsge: 1,
            ..d(50, WrOpcode::Send, sig)
        },
        2,
    )?;
    s.recv_on("srq_2sge", None, Some(&mut srq), 401, 64, 192)?;
    s.post1(
        "srq_2sge",
        &mut sa,
        Desc {
            loff: [SRC, 0, 0],
            len: [200, 0, 0],
            nsge: 1,
            ..d(51, WrOpcode::Send, sig)
        },
        2,
    )?;

    // Teardown in wqe_seq.c's order (Drop reports no error).
    drop(ah);
    drop((qa, qb, ua, ub, da, db, sa, sb));
    drop(srq);
    drop(s);
    drop(pd);
    drop(ctx);
    pass("teardown");
    Ok(())
}

fn main() -> ExitCode {
    main_with(run)
}
