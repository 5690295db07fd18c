//! The fixed control-path sequence of `tests/mlx5-emu/c/cmd_seq.c`, made
//! through the `verbs` API (so through provider-mlx5): the same verbs in
//! the same order with the same arguments. Run by `cargo xtask mlx5` under
//! the mlx5 emulator with `MLX5_EMU_CMD_LOG=<path>`, which records every
//! command sent to the device; the xtask then compares that log with the
//! one of cmd_seq.c field by field (tools/xtask/src/cmd_compare.rs). Any
//! change here must be mirrored in cmd_seq.c, in the same order.
//!
//! QP transitions use [`Qp::modify`] with the attributes cmd_seq.c gives
//! `ibv_modify_qp`, so each verb is one command on both sides. Objects are
//! destroyed by dropping them, in cmd_seq.c's order. Prints `PASS <step>`
//! per step, and on the first failure `FAIL <step>: <why>` and exits 1.
//! Opens the device named by the first argument, else the first mlx5
//! device.

use std::process::ExitCode;

use rverbs::{
    AccessFlags, AhAttr, Cq, GlobalRoute, Mtu, Pd, Qp, QpAttr, QpCap, QpInitAttr, QpState, QpType,
    Srq, SrqInitAttr,
};
use verbs_tests::step::{expect, main_with, pass, At, Fail, R};

fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// cmd_seq.c `make_qp`.
fn make_qp(pd: &Pd, scq: &Cq, rcq: &Cq, qp_type: QpType, srq: Option<&Srq>) -> R<Qp> {
    let attr = QpInitAttr::new(qp_type, scq).recv_cq(rcq).cap(QpCap {
        max_send_wr: 16,
        max_recv_wr: if srq.is_some() { 0 } else { 32 },
        max_send_sge: 3,
        max_recv_sge: if srq.is_some() { 0 } else { 2 },
        max_inline_data: 64,
    });
    match srq {
        Some(s) => pd.create_qp_with_srq(&attr, s),
        None => pd.create_qp(&attr),
    }
    .at("qps")
}

/// cmd_seq.c `connect_qp`: RESET -> INIT -> RTR -> RTS towards `dest`.
fn connect_qp(qp: &mut Qp, dest: u32, lid: u16) -> R {
    let rc = qp.qp_type() == QpType::Rc;
    let mut access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    if rc {
        access |= AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    }
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: Some(access),
        ..QpAttr::default()
    })
    .at("connect")?;
    let mut a = QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: Some(dest),
        rq_psn: Some(0x123),
        ah_attr: Some(AhAttr {
            dlid: lid,
            sl: 0,
            port_num: 1,
            ..AhAttr::default()
        }),
        ..QpAttr::default()
    };
    if rc {
        a.max_dest_rd_atomic = Some(4);
        a.min_rnr_timer = Some(12);
    }
    qp.modify(&a).at("connect")?;
    let mut a = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(0x456),
        ..QpAttr::default()
    };
    if rc {
        a.timeout = Some(14);
        a.retry_cnt = Some(7);
        a.rnr_retry = Some(7);
        a.max_rd_atomic = Some(4);
    }
    qp.modify(&a).at("connect")
}

/// cmd_seq.c `ready_ud`.
fn ready_ud(qp: &mut Qp) -> R {
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qkey: Some(0x1111_1111),
        ..QpAttr::default()
    })
    .at("ud")?;
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rtr),
        ..QpAttr::default()
    })
    .at("ud")?;
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(0x789),
        ..QpAttr::default()
    })
    .at("ud")
}

fn run() -> R {
    let dev = verbs_tests::mlx5_device(std::env::args().nth(1).as_deref())
        .map_err(|e| Fail("open".into(), e))?;
    let ctx = dev.open().at("open")?;
    pass("open");

    ctx.query_device().at("query")?;
    let port = ctx.query_port(1).at("query")?;
    let gid = ctx.query_gid(1, 0).at("query")?;
    pass("query");

    let pd = ctx.alloc_pd().at("pd")?;
    pass("pd");

    let mrs = [
        pd.alloc_mr(1 << 16, AccessFlags::LOCAL_WRITE),
        pd.alloc_mr(1 << 20, all_access()),
        pd.alloc_mr(1 << 12, AccessFlags::REMOTE_READ),
    ]
    .into_iter()
    .collect::<rverbs::Result<Vec<_>>>()
    .at("mrs")?;
    pass("mrs");

    let ch = ctx.create_comp_channel().at("cqs")?;
    let cq = ctx.create_cq(64).at("cqs")?;
    let mut cq2 = ctx.create_cq_with(100, Some(&ch), 0).at("cqs")?;
    pass("cqs");

    let srq = pd
        .create_srq(&SrqInitAttr {
            max_wr: 16,
            max_sge: 2,
            srq_limit: 0,
        })
        .at("srq")?;
    srq.modify_limit(4).at("srq")?;
    let sattr = srq.query().at("srq")?;
    expect("srq", sattr.srq_limit == 4, "srq_limit is not 4")?;
    pass("srq");

    // RC pair, UC pair, UD pair, RC pair on the SRQ.
    let mut qps = vec![
        make_qp(&pd, &cq, &cq2, QpType::Rc, None)?,
        make_qp(&pd, &cq, &cq2, QpType::Rc, None)?,
        make_qp(&pd, &cq, &cq, QpType::Uc, None)?,
        make_qp(&pd, &cq, &cq, QpType::Uc, None)?,
        make_qp(&pd, &cq, &cq, QpType::Ud, None)?,
        make_qp(&pd, &cq, &cq, QpType::Ud, None)?,
        make_qp(&pd, &cq, &cq, QpType::Rc, Some(&srq))?,
        make_qp(&pd, &cq, &cq, QpType::Rc, Some(&srq))?,
    ];
    pass("qps");

    for pair in qps.chunks_mut(2) {
        let [a, b] = pair else {
            return Err(Fail("connect".into(), "odd number of QPs".into()));
        };
        if a.qp_type() == QpType::Ud {
            ready_ud(a)?;
            ready_ud(b)?;
        } else {
            let (na, nb) = (a.qp_num(), b.qp_num());
            connect_qp(a, nb, port.lid)?;
            connect_qp(b, na, port.lid)?;
        }
    }
    pass("connect");

    let (qattr, _, _) = qps[0].query().at("query_qp")?;
    expect(
        "query_qp",
        qattr.qp_state == Some(QpState::Rts),
        "QP 0 is not in RTS",
    )?;
    pass("query_qp");

    let mut aa = AhAttr {
        dlid: port.lid,
        sl: 1,
        port_num: 1,
        ..AhAttr::default()
    };
    let ah0 = pd.create_ah(&aa).at("ahs")?;
    aa.grh = Some(GlobalRoute {
        dgid: gid,
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    });
    let ah1 = pd.create_ah(&aa).at("ahs")?;
    pass("ahs");

    cq2.resize(256).at("resize")?;
    expect("resize", cq2.cqe() >= 256, "the CQ did not grow")?;
    pass("resize");

    drop(ah0);
    drop(ah1);
    for qp in qps {
        drop(qp);
    }
    drop(srq);
    drop(cq2);
    drop(cq);
    drop(ch);
    for mr in mrs {
        drop(mr);
    }
    drop(pd);
    drop(ctx);
    pass("destroy");
    Ok(())
}

fn main() -> ExitCode {
    main_with(run)
}
