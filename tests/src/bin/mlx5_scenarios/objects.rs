//! objects.c ported: device discovery and queries, then every object
//! (PD, MR, completion channel, CQ, SRQ, RC/UC/UD QPs, AH) created,
//! driven through its states, queried and destroyed, one step each, in
//! [`objects`]; [`obj_create_qp`] and [`obj_connect`] are the C program's
//! helpers.

use std::os::fd::{AsFd, AsRawFd};

use rverbs::{
    AccessFlags, AhAttr, CompChannel, Cq, Device, Errno, Error, Feature, Mtu, Pd, Qp, QpAttr,
    QpCap, QpCreateFlags, QpInitAttr, QpState, QpType, Srq, SrqInitAttr,
};

use crate::report::{expect, fail, Ctx, Fail, Report, R};
use crate::{open_fds, UD_QKEY};

pub(crate) const OBJECT_STEPS: &[&str] = &[
    "devices",
    "open",
    "query_device",
    "query_port",
    "query_gid",
    "alloc_pd",
    "reg_mr",
    "reg_mr_remote_write_without_local_write",
    "create_comp_channel",
    "create_cq_with_channel",
    "create_cq",
    "req_notify_cq",
    "create_srq",
    "create_qp_rc",
    "create_qp_uc",
    "create_qp_ud",
    "illegal_reset_to_rts_query",
    "illegal_reset_to_rts",
    "qp_ece",
    "rc_to_init",
    "rc_to_rtr",
    "rc_to_rts",
    "uc_to_init",
    "uc_to_rtr",
    "uc_to_rts",
    "ud_to_init",
    "ud_to_rtr",
    "ud_to_rts",
    "query_qp_rc",
    "query_qp_ud",
    "resize_cq",
    "modify_srq",
    "query_srq",
    "unsupported_refused",
    "create_ah",
    "destroy_ah",
    "dealloc_pd_in_use",
    "destroy_cq_in_use",
    "destroy_qp_ud",
    "destroy_qp_uc",
    "destroy_qp_rc",
    "destroy_srq",
    "destroy_cq",
    "destroy_cq_with_channel",
    "destroy_comp_channel",
    "dereg_mr",
    "dealloc_pd",
    "close",
    "all",
];

const OBJ_BUF: usize = 65536;
const RC_RQ_PSN: u32 = 0x123;
const RC_SQ_PSN: u32 = 0x456;
const SRQ_LIMIT: u32 = 4;

fn obj_create_qp(
    step: &'static str,
    pd: &Pd,
    qp_type: QpType,
    scq: &Cq,
    rcq: &Cq,
    srq: Option<&Srq>,
) -> R<Qp> {
    let attr = QpInitAttr {
        send_cq: scq,
        recv_cq: rcq,
        qp_type,
        cap: QpCap {
            max_send_wr: 16,
            max_recv_wr: if srq.is_some() { 0 } else { 16 },
            max_send_sge: 1,
            max_recv_sge: if srq.is_some() { 0 } else { 1 },
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    match srq {
        Some(s) => pd.create_qp_with_srq(&attr, s),
        None => pd.create_qp(&attr),
    }
    .at(step)
}

/// objects.c's `connect_qp`: RESET -> INIT -> RTR -> RTS, one step each.
#[allow(clippy::too_many_arguments)]
fn obj_connect(
    rep: &mut Report,
    steps: [&'static str; 3],
    qp: &mut Qp,
    rc: bool,
    dest_qpn: u32,
    dlid: u16,
    rq_psn: u32,
    sq_psn: u32,
    access: AccessFlags,
) -> R {
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: Some(access),
        ..Default::default()
    })
    .at(steps[0])?;
    rep.pass(steps[0]);
    let mut a = QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: Some(dest_qpn),
        rq_psn: Some(rq_psn),
        ah_attr: Some(AhAttr {
            dlid,
            port_num: 1,
            ..Default::default()
        }),
        ..Default::default()
    };
    if rc {
        a.max_dest_rd_atomic = Some(4);
        a.min_rnr_timer = Some(12);
    }
    qp.modify(&a).at(steps[1])?;
    rep.pass(steps[1]);
    let mut a = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(sq_psn),
        ..Default::default()
    };
    if rc {
        a.timeout = Some(14);
        a.retry_cnt = Some(7);
        a.rnr_retry = Some(7);
        a.max_rd_atomic = Some(4);
    }
    qp.modify(&a).at(steps[2])?;
    rep.pass(steps[2]);
    Ok(())
}

pub(crate) fn objects(rep: &mut Report, dev: &Result<Device, String>) -> R {
    let rc_access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let uc_access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;

    // Discovery and device queries.
    let dev = dev.as_ref().map_err(|e| Fail {
        step: "devices",
        why: e.clone(),
    })?;
    rep.pass_note("devices", &format!("{} ({})", dev.name(), dev.driver()));
    let fds_before = open_fds();

    let ctx = dev.open().at("open")?;
    rep.pass("open");

    let dattr = ctx.query_device().at("query_device")?;
    expect(
        "query_device",
        dattr.vendor_id == 0x02c9,
        "vendor_id is not 0x02c9",
    )?;
    expect(
        "query_device",
        dattr.vendor_part_id == 4119,
        "vendor_part_id is not 4119",
    )?;
    expect(
        "query_device",
        dattr.phys_port_cnt == 1,
        "phys_port_cnt is not 1",
    )?;
    expect(
        "query_device",
        dattr.node_guid() == dev.node_guid(),
        &format!(
            "node GUID differs between QUERY_DEVICE ({}) and sysfs ({})",
            dattr.node_guid(),
            dev.node_guid()
        ),
    )?;
    rep.pass("query_device");

    let pattr = ctx.query_port(1).at("query_port")?;
    expect(
        "query_port",
        pattr.state() == rverbs::PortState::Active,
        "port 1 is not active",
    )?;
    expect(
        "query_port",
        pattr.link_layer() == rverbs::LinkLayer::InfiniBand,
        "link layer is not InfiniBand",
    )?;
    expect("query_port", pattr.lid != 0, "port 1 has no LID")?;
    let lid = pattr.lid;
    rep.pass("query_port");

    let gid = ctx.query_gid(1, 0).at("query_gid")?;
    expect(
        "query_gid",
        gid.subnet_prefix() == 0xfe80_0000_0000_0000,
        &format!("GID 0 ({gid}) is not link-local"),
    )?;
    expect(
        "query_gid",
        gid.0[8..] == dattr.node_guid().0,
        "GID 0 interface ID is not the node GUID",
    )?;
    rep.pass("query_gid");

    // PD and MR.
    let pd = ctx.alloc_pd().at("alloc_pd")?;
    rep.pass("alloc_pd");

    let mr = pd.alloc_mr(OBJ_BUF, rc_access).at("reg_mr")?;
    expect(
        "reg_mr",
        mr.lkey() != 0x100 && mr.rkey() != 0x100,
        "lkey or rkey is 0x100 (libmlx5's end-of-list key)",
    )?;
    rep.pass("reg_mr");

    // libibverbs gets EINVAL from the kernel; we refuse before the kernel.
    match pd.alloc_mr(OBJ_BUF, AccessFlags::REMOTE_WRITE) {
        Ok(_) => fail(
            "reg_mr_remote_write_without_local_write",
            "unexpectedly succeeded",
        )?,
        Err(Error::InvalidArgument(_)) => {}
        Err(e) => fail(
            "reg_mr_remote_write_without_local_write",
            format!("expected Error::InvalidArgument (EINVAL in libibverbs), got {e}"),
        )?,
    }
    rep.pass_note(
        "reg_mr_remote_write_without_local_write",
        "refused with InvalidArgument before the kernel; libibverbs gets EINVAL",
    );

    // Completion channel, CQs, SRQ.
    let fds_without_chan = open_fds();
    let chan: CompChannel = ctx.create_comp_channel().at("create_comp_channel")?;
    expect(
        "create_comp_channel",
        chan.as_fd().as_raw_fd() >= 0,
        "no channel fd",
    )?;
    rep.pass("create_comp_channel");

    let cq_a = ctx
        .create_cq_with(16, Some(&chan), 0)
        .at("create_cq_with_channel")?;
    expect(
        "create_cq_with_channel",
        cq_a.cqe() >= 16,
        "fewer CQEs than asked for",
    )?;
    rep.pass("create_cq_with_channel");
    let mut cq_b = ctx.create_cq(16).at("create_cq")?;
    expect("create_cq", cq_b.cqe() >= 16, "fewer CQEs than asked for")?;
    rep.pass("create_cq");
    // Arming writes the UAR page mapped at context creation.
    cq_a.req_notify(false).at("req_notify_cq")?;
    rep.pass("req_notify_cq");

    let mut srq = pd
        .create_srq(&SrqInitAttr {
            max_wr: 16,
            max_sge: 1,
            srq_limit: 0,
        })
        .at("create_srq")?;
    rep.pass("create_srq");

    // QPs.
    let mut rc = obj_create_qp("create_qp_rc", &pd, QpType::Rc, &cq_a, &cq_b, None)?;
    rep.pass("create_qp_rc");
    let mut uc = obj_create_qp("create_qp_uc", &pd, QpType::Uc, &cq_a, &cq_b, Some(&srq))?;
    rep.pass("create_qp_uc");
    let mut ud = obj_create_qp("create_qp_ud", &pd, QpType::Ud, &cq_b, &cq_b, None)?;
    let (r, u, d) = (rc.qp_num(), uc.qp_num(), ud.qp_num());
    // objects.c checks this under the name "create_qp" without a PASS line
    // of its own; here it belongs to the last creation.
    expect(
        "create_qp_ud",
        r != 0 && u != 0 && d != 0 && r != u && u != d && r != d,
        &format!("QP numbers are zero or not distinct ({r:#x}, {u:#x}, {d:#x})"),
    )?;
    rep.pass("create_qp_ud");

    // RESET -> RTS is illegal.
    let bad = rc.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(RC_SQ_PSN),
        timeout: Some(14),
        retry_cnt: Some(7),
        rnr_retry: Some(7),
        max_rd_atomic: Some(4),
        ..Default::default()
    });
    match bad {
        Err(Error::Kernel {
            errno: Errno::EINVAL,
            ..
        }) => {}
        Err(e) => fail("illegal_reset_to_rts", format!("{e}, expected EINVAL"))?,
        Ok(()) => fail("illegal_reset_to_rts", "unexpectedly succeeded")?,
    }
    let (qa, _, _) = rc.query().at("illegal_reset_to_rts_query")?;
    expect(
        "illegal_reset_to_rts_query",
        qa.qp_state == Some(QpState::Reset),
        &format!(
            "QP left RESET after a rejected transition: {:?}",
            qa.qp_state
        ),
    )?;
    rep.pass("illegal_reset_to_rts_query");
    rep.pass("illegal_reset_to_rts");

    // ECE: NVIDIA's id and what CREATE_QP granted (nothing here); setting
    // options needs the device's ECE, which the emulator lacks.
    let s = "qp_ece";
    let ece = rc.query_ece().at(s)?;
    expect(
        s,
        ece == rverbs::Ece {
            vendor_id: 0x15b3,
            options: 0,
            comp_mask: 0,
        },
        &format!("unexpected ECE of a new QP: {ece:?}"),
    )?;
    for (vendor_id, refused) in [
        (0x15b3, "unsupported"),
        (0x8086, "invalid"),
        (0, "unsupported"),
    ] {
        let got = rc.set_ece(rverbs::Ece { vendor_id, ..ece });
        let ok = match got {
            Err(Error::Unsupported { .. }) => refused == "unsupported",
            Err(Error::InvalidArgument(_)) => refused == "invalid",
            _ => false,
        };
        expect(
            s,
            ok,
            &format!("set_ece of vendor {vendor_id:#x}: {got:?}, expected {refused}"),
        )?;
    }
    rep.pass(s);

    // RC and UC against each other; UD alone.
    obj_connect(
        rep,
        ["rc_to_init", "rc_to_rtr", "rc_to_rts"],
        &mut rc,
        true,
        u,
        lid,
        RC_RQ_PSN,
        RC_SQ_PSN,
        rc_access,
    )?;
    obj_connect(
        rep,
        ["uc_to_init", "uc_to_rtr", "uc_to_rts"],
        &mut uc,
        false,
        r,
        lid,
        RC_SQ_PSN,
        RC_RQ_PSN,
        uc_access,
    )?;

    ud.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qkey: Some(UD_QKEY),
        ..Default::default()
    })
    .at("ud_to_init")?;
    rep.pass("ud_to_init");
    ud.modify(&QpAttr {
        qp_state: Some(QpState::Rtr),
        ..Default::default()
    })
    .at("ud_to_rtr")?;
    rep.pass("ud_to_rtr");
    ud.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(0),
        ..Default::default()
    })
    .at("ud_to_rts")?;
    rep.pass("ud_to_rts");

    // Attributes read back.
    let (qa, _, _) = rc.query().at("query_qp_rc")?;
    let s = "query_qp_rc";
    expect(
        s,
        qa.qp_state == Some(QpState::Rts),
        &format!("state is {:?}, not RTS", qa.qp_state),
    )?;
    expect(s, qa.dest_qp_num == Some(u), "dest_qp_num differs")?;
    expect(s, qa.sq_psn == Some(RC_SQ_PSN), "sq_psn differs")?;
    expect(s, qa.rq_psn == Some(RC_RQ_PSN), "rq_psn differs")?;
    expect(
        s,
        qa.qp_access_flags == Some(rc_access),
        &format!("qp_access_flags differ: {:?}", qa.qp_access_flags),
    )?;
    expect(s, qa.ah_attr.map(|a| a.dlid) == Some(lid), "dlid differs")?;
    expect(s, qa.path_mtu == Some(Mtu::Mtu1024), "path_mtu differs")?;
    expect(s, qa.timeout == Some(14), "timeout differs")?;
    rep.pass(s);

    let (qa, _, _) = ud.query().at("query_qp_ud")?;
    expect(
        "query_qp_ud",
        qa.qp_state == Some(QpState::Rts),
        "state is not RTS",
    )?;
    expect("query_qp_ud", qa.qkey == Some(UD_QKEY), "qkey differs")?;
    rep.pass("query_qp_ud");

    // CQ resize, SRQ limit.
    cq_b.resize(64).at("resize_cq")?;
    expect("resize_cq", cq_b.cqe() >= 64, "fewer CQEs than asked for")?;
    rep.pass("resize_cq");

    srq.modify_limit(SRQ_LIMIT).at("modify_srq")?;
    rep.pass("modify_srq");
    let sa = srq.query().at("query_srq")?;
    expect(
        "query_srq",
        sa.srq_limit == SRQ_LIMIT,
        &format!("srq_limit is {}, not {SRQ_LIMIT}", sa.srq_limit),
    )?;
    expect(
        "query_srq",
        sa.max_wr >= 16,
        "max_wr below what was asked for",
    )?;
    rep.pass("query_srq");

    // Ours only: what the mlx5 provider does not implement is refused as
    // such, before the kernel is asked (the SRQ keeps its size).
    let s = "unsupported_refused";
    let unsupported = |r: rverbs::Result<()>, feature: Feature| matches!(r, Err(Error::Unsupported { provider: "mlx5", feature: f }) if f == feature);
    expect(
        s,
        unsupported(srq.resize(64), Feature::SrqResize),
        "SRQ resize not refused as unsupported",
    )?;
    let attr = QpInitAttr::new(QpType::Rc, &cq_a).cap(QpCap::default());
    let flags = QpCreateFlags::BLOCK_MULTICAST_LOOPBACK;
    expect(
        s,
        unsupported(
            pd.create_qp_ex(&attr, flags, None).map(drop),
            Feature::QpCreateFlags,
        ),
        "QP creation flags not refused as unsupported",
    )?;
    expect(
        s,
        unsupported(
            pd.alloc_mw(rverbs::MwType::Type2).map(drop),
            Feature::MemoryWindows,
        ),
        "memory windows not refused as unsupported",
    )?;
    expect(s, srq.max_wr() >= 16, "the refused resize changed the SRQ")?;
    rep.pass(s);

    // Address handle.
    let ah_attr = AhAttr {
        dlid: lid,
        port_num: 1,
        ..Default::default()
    };
    let ah = pd.create_ah(&ah_attr).at("create_ah")?;
    rep.pass("create_ah");
    drop(ah);
    rep.pass_note("destroy_ah", "dropped");

    // Objects in use cannot go: our API cannot even ask. Dropping our
    // handles leaves the kernel objects to their users.
    drop(pd);
    let ah = rc
        .pd()
        .create_ah(&ah_attr)
        .at("dealloc_pd_in_use")
        .map_err(|f| Fail {
            why: format!("the PD did not survive dropping our handle: {}", f.why),
            ..f
        })?;
    drop(ah);
    rep.pass_note(
        "dealloc_pd_in_use",
        "not expressible: QPs and MRs hold their PD; after dropping our handle it still creates an AH",
    );
    drop(cq_a);
    let (qa, _, _) = rc.query().at("destroy_cq_in_use")?;
    expect(
        "destroy_cq_in_use",
        qa.qp_state == Some(QpState::Rts),
        "the RC QP on the dropped CQ is no longer in RTS",
    )?;
    rep.pass_note(
        "destroy_cq_in_use",
        "not expressible: QPs hold their CQs; after dropping our handle the QPs on it are intact",
    );

    // Teardown, children first. Drop reports no error (see the top).
    drop(ud);
    rep.pass_note("destroy_qp_ud", "dropped");
    drop(uc);
    rep.pass_note("destroy_qp_uc", "dropped");
    drop(rc);
    rep.pass_note("destroy_qp_rc", "dropped; its CQ and PD go with it");
    drop(srq);
    rep.pass_note("destroy_srq", "dropped");
    drop(cq_b);
    rep.pass_note("destroy_cq", "dropped");
    rep.pass_note(
        "destroy_cq_with_channel",
        "its kernel object went with the last QP on it",
    );
    drop(chan);
    let fds = open_fds();
    expect(
        "destroy_comp_channel",
        fds == fds_without_chan,
        &format!(
            "{fds_without_chan} fds before creating the channel, {fds} after dropping it and its CQ"
        ),
    )?;
    rep.pass_note("destroy_comp_channel", "its fd is closed");
    drop(mr);
    rep.pass_note("dereg_mr", "dropped; the PD goes with it");
    rep.pass_note("dealloc_pd", "went with its last user");
    drop(ctx);
    let fds = open_fds();
    expect(
        "close",
        fds == fds_before,
        &format!("{fds_before} fds before opening, {fds} after closing"),
    )?;
    rep.pass_note("close", "every fd of the device is closed");
    rep.pass("all");
    Ok(())
}
