//! The mlx5 emulator's scenario programs (`tests/mlx5-emu/c/objects.c` and
//! `datapath.c`, which rdma-core's libmlx5 passes) ported to the `verbs`
//! API, so the same steps run through our own provider (provider-mlx5).
//!
//! Run by `cargo xtask mlx5` with the emulator preloaded (`LD_PRELOAD` of
//! `libmlx5_emu.so`, `SYSFS_PATH`/`MLX5_EMU_SYSFS`). Opens the device named
//! by the first argument, else the first device whose driver is mlx5.
//!
//! Prints `PASS <group>/<step>` or `FAIL <group>/<step>: <why>` for every
//! step of both programs (same step names as the C programs; a step that
//! could not run because an earlier one of its scenario failed is a `FAIL`
//! saying so) and exits 1 if any step failed. Every wait is bounded, and
//! the whole run stops (reporting the rest as not run) after [`BUDGET`].
//!
//! Where our API differs from libibverbs the step asserts our documented
//! behaviour instead and its line says so:
//! * objects are destroyed by `Drop`, which reports no error: the destroy
//!   steps drop in the C program's order, and `destroy_comp_channel` and
//!   `close` check that the channel's and then every fd of the device are
//!   closed (the emulator's fds are real memfds and sockets);
//! * a PD or CQ that is still in use cannot be destroyed (its users hold
//!   it): `dealloc_pd_in_use` drops our handle and checks the PD still
//!   works, `destroy_cq_in_use` drops our handle and checks the QPs on it
//!   are intact;
//! * an MR with REMOTE_WRITE but not LOCAL_WRITE is refused before the
//!   kernel with `Error::InvalidArgument` (libibverbs: EINVAL from the kernel);
//! * completion events name the CQ by its `EventId` and need no ack.

use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rverbs::{
    AccessFlags, AhAttr, CompChannel, Context, Cq, Device, Errno, Error, GlobalRoute, Mr, Mtu, Pd,
    Qp, QpAttr, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendFlags, SendWr, Sge, Srq,
    SrqInitAttr, UdSendWr, Wc, WcOpcode, WcStatus,
};

/// How long one completion may take (the C programs' `TIMEOUT_MS`).
const TIMEOUT: Duration = Duration::from_millis(2000);
/// How long "no completion" must hold (the C programs' `expect_quiet`).
const QUIET: Duration = Duration::from_millis(50);
/// The whole run's budget: what is left is reported as not run (the xtask
/// kills the process after 60 s).
const BUDGET: Duration = Duration::from_secs(50);

const UD_QKEY: u32 = 0x1111_1111;

/// A step's failure: the step (C name) and why.
#[derive(Debug)]
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

/// Maps a verbs error to a step failure.
trait Ctx<T> {
    fn at(self, step: &'static str) -> R<T>;
}

impl<T> Ctx<T> for rverbs::Result<T> {
    fn at(self, step: &'static str) -> R<T> {
        self.map_err(|e| Fail {
            step,
            why: e.to_string(),
        })
    }
}

/// Prints the PASS/FAIL lines of one group and remembers what was said.
struct Report {
    group: &'static str,
    names: &'static [&'static str],
    done: Vec<&'static str>,
    failed: usize,
    start: Instant,
}

impl Report {
    fn new(group: &'static str, names: &'static [&'static str], start: Instant) -> Report {
        Report {
            group,
            names,
            done: Vec::new(),
            failed: 0,
            start,
        }
    }

    fn pass(&mut self, step: &'static str) {
        self.pass_note(step, "");
    }

    fn pass_note(&mut self, step: &'static str, note: &str) {
        if note.is_empty() {
            println!("PASS {}/{step}", self.group);
        } else {
            println!("PASS {}/{step} ({note})", self.group);
        }
        self.done.push(step);
    }

    fn fail(&mut self, f: &Fail) {
        println!("FAIL {}/{}: {}", self.group, f.step, f.why);
        self.done.push(f.step);
        self.failed += 1;
    }

    /// Reports a scenario's result; `Err` steps print FAIL.
    fn outcome(&mut self, r: R) {
        if let Err(f) = r {
            self.fail(&f);
        }
    }

    fn over_budget(&self) -> bool {
        self.start.elapsed() > BUDGET
    }

    /// FAILs every step of `names` not yet reported, saying why.
    fn not_run(&mut self, names: &[&'static str], why: &str) {
        for &n in names {
            if !self.done.contains(&n) {
                self.fail(&Fail {
                    step: n,
                    why: format!("not run: {why}"),
                });
            }
        }
    }

    /// Closes the group: steps never reported are FAILs.
    fn finish(mut self) -> usize {
        let names = self.names;
        self.not_run(names, "an earlier step of its scenario failed");
        self.failed
    }
}

/// Open file descriptors of this process (the emulator's device, async
/// and channel fds are real ones).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

// ---------------------------------------------------------------------
// objects.c
// ---------------------------------------------------------------------

const OBJECT_STEPS: &[&str] = &[
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

fn objects(rep: &mut Report, dev: &Result<Device, String>) -> R {
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

    let srq = pd
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

// ---------------------------------------------------------------------
// datapath.c
// ---------------------------------------------------------------------

const DATAPATH_STEPS: &[&str] = &[
    "setup",
    "send_recv",
    "send_imm",
    "send_inline",
    "send_3_sges_to_2",
    "rdma_write",
    "rdma_write_imm",
    "rdma_read",
    "cmp_swap",
    "cmp_swap_no_swap",
    "fetch_add",
    "unsignaled_chain",
    "sq_wrap",
    "srq",
    "srq_reuse",
    "ud",
    "ud_grh",
    "uc",
    "comp_channel",
    "comp_solicited",
    "bad_rkey",
    "bad_rkey_flush",
    "bad_lkey",
    "reset_reuse",
    "recv_too_small",
    "recv_flush",
    "rnr_retry",
    "rnr_retry_exceeded",
    "cq_resize",
    "reset_clean",
    "reset_rq_capacity",
    "srq_destroy_unpolled",
    "unsignaled_queue_full",
    "signal_every",
    "query_caps",
    "poll_blocking",
    "teardown",
];

const DP_BUF: usize = 1 << 20;
const SRC: usize = 0x00000;
const DST: usize = 0x40000;
const AUX: usize = 0x80000;
const ATOM: usize = 0xF0000;

/// datapath.c's `fill`.
fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|i| (seed as usize * 31 + i * 7 + (i >> 8)) as u8)
        .collect()
}

fn poll_one(step: &'static str, cq: &mut Cq) -> R<Wc> {
    let mut wc = [Wc::default(); 1];
    match cq.poll_until(&mut wc, 1, TIMEOUT) {
        Ok(_) => Ok(wc[0]),
        Err(Error::Timeout(_)) => fail(step, "timed out waiting for a completion"),
        Err(e) => fail(step, format!("poll failed: {e}")),
    }
}

fn expect_quiet(step: &'static str, cq: &mut Cq) -> R {
    let mut wc = [Wc::default(); 1];
    let end = Instant::now() + QUIET;
    while Instant::now() < end {
        if cq.poll(&mut wc).at(step)? != 0 {
            return fail(step, format!("unexpected extra completion {:?}", wc[0]));
        }
    }
    Ok(())
}

fn expect_wc(step: &'static str, wc: &Wc, status: WcStatus, wr_id: u64) -> R {
    if wc.status() != status {
        return fail(step, format!("status {}, expected {}", wc.status(), status));
    }
    if wc.wr_id() != wr_id {
        return fail(step, format!("wr_id {}, expected {wr_id}", wc.wr_id()));
    }
    Ok(())
}

fn read(mr: &Mr, off: usize, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    // In bounds: every offset here is inside the 1 MiB buffer.
    let _ = mr.read_at(off, &mut v);
    v
}

fn expect_bytes(step: &'static str, got: &[u8], want: &[u8]) -> R {
    if let Some(i) = (0..want.len()).find(|&i| got.get(i) != Some(&want[i])) {
        return fail(
            step,
            format!(
                "byte {i} is 0x{:02x}, expected 0x{:02x}",
                got.get(i).copied().unwrap_or(0),
                want[i]
            ),
        );
    }
    Ok(())
}

/// The C program's globals, plus its main pair.
struct Dp {
    ctx: Context,
    pd: Pd,
    mr: Mr,
    lid: u16,
    cqa: Cq,
    cqb: Cq,
    qa: Qp,
    qb: Qp,
}

impl Dp {
    fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr() + off as u64,
            length: len,
            lkey: self.mr.lkey(),
        }
    }

    fn put(&mut self, step: &'static str, off: usize, data: &[u8]) -> R {
        self.mr.write_at(off, data).at(step)
    }

    fn get(&self, off: usize, n: usize) -> Vec<u8> {
        read(&self.mr, off, n)
    }

    fn remote(&self, off: usize) -> u64 {
        self.mr.addr() + off as u64
    }

    fn make_qp(&self, step: &'static str, qp_type: QpType, cq: &Cq, srq: Option<&Srq>) -> R<Qp> {
        let attr = QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            qp_type,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: if srq.is_some() { 0 } else { 64 },
                max_send_sge: 4,
                max_recv_sge: if srq.is_some() { 0 } else { 4 },
                max_inline_data: 64,
            },
            sq_sig_all: false,
        };
        match srq {
            Some(s) => self.pd.create_qp_with_srq(&attr, s),
            None => self.pd.create_qp(&attr),
        }
        .at(step)
    }

    /// The main pair's setup and every scenario that follows, in order.
    fn setup(ctx: Context, step: &'static str) -> R<Dp> {
        let lid = ctx.query_port(1).at(step)?.lid;
        let pd = ctx.alloc_pd().at(step)?;
        let mr = pd
            .alloc_mr(
                DP_BUF,
                AccessFlags::LOCAL_WRITE
                    | AccessFlags::REMOTE_WRITE
                    | AccessFlags::REMOTE_READ
                    | AccessFlags::REMOTE_ATOMIC,
            )
            .at(step)?;
        let cqa = ctx.create_cq(256).at(step)?;
        let cqb = ctx.create_cq(256).at(step)?;
        let mk = |cq: &Cq| {
            pd.create_qp(&QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                qp_type: QpType::Rc,
                cap: QpCap {
                    max_send_wr: 64,
                    max_recv_wr: 64,
                    max_send_sge: 4,
                    max_recv_sge: 4,
                    max_inline_data: 64,
                },
                sq_sig_all: false,
            })
            .at(step)
        };
        let mut qa = mk(&cqa)?;
        let mut qb = mk(&cqb)?;
        connect_rc(step, &mut qa, qb.qp_num(), lid, 7)?;
        connect_rc(step, &mut qb, qa.qp_num(), lid, 7)?;
        Ok(Dp {
            ctx,
            pd,
            mr,
            lid,
            cqa,
            cqb,
            qa,
            qb,
        })
    }

    /// After a failed scenario: drops completions it left behind.
    fn drain(&mut self) {
        let mut wc = [Wc::default(); 16];
        for cq in [&mut self.cqa, &mut self.cqb] {
            while cq.poll(&mut wc).unwrap_or(0) > 0 {}
        }
    }

    fn send_recv(&mut self) -> R {
        let s = "send_recv";
        self.put(s, SRC, &pattern(1000, 1))?;
        let r = [self.sge(DST, 4096)];
        self.qb.post_recv(&[RecvWr::new(11, &r)]).at(s)?;
        let sg = [self.sge(SRC, 1000)];
        self.qa
            .post_send(&[SendWr::send(10, &sg).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 10)?;
        expect(
            s,
            wc.opcode() == WcOpcode::SEND,
            "requester opcode is not SEND",
        )?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 11)?;
        expect(
            s,
            wc.opcode() == WcOpcode::RECV,
            "responder opcode is not RECV",
        )?;
        expect(s, wc.byte_len() == 1000, "byte_len is not 1000")?;
        expect(
            s,
            wc.qp_num() == self.qb.qp_num(),
            "qp_num is not the receiver's",
        )?;
        expect(s, wc.imm_data().is_none(), "WITH_IMM set")?;
        expect_bytes(s, &self.get(DST, 1000), &self.get(SRC, 1000))
    }

    fn send_imm(&mut self) -> R {
        let s = "send_imm";
        self.put(s, SRC, &pattern(64, 2))?;
        let r = [self.sge(DST, 4096)];
        self.qb.post_recv(&[RecvWr::new(21, &r)]).at(s)?;
        let sg = [self.sge(SRC, 64)];
        self.qa
            .post_send(&[SendWr::send(20, &sg).with_imm(0x1234_5678).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 20)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 21)?;
        expect(s, wc.opcode() == WcOpcode::RECV, "opcode is not RECV")?;
        expect(s, wc.imm_data().is_some(), "WITH_IMM not set")?;
        expect(s, wc.imm_data() == Some(0x1234_5678), "wrong imm_data")?;
        expect(s, wc.byte_len() == 64, "byte_len is not 64")?;
        expect_bytes(s, &self.get(DST, 64), &self.get(SRC, 64))
    }

    fn send_inline(&mut self) -> R {
        let s = "send_inline";
        let mut inl = pattern(48, 3);
        let r = [self.sge(DST, 4096)];
        self.qb.post_recv(&[RecvWr::new(31, &r)]).at(s)?;
        {
            let bufs = [IoSlice::new(&inl)];
            self.qa
                .post_send(&[SendWr::send_inline(30, &bufs).signaled()])
                .at(s)?;
        }
        // Inline data is copied at post time: the buffer may change now.
        inl.fill(0);
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 30)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 31)?;
        expect(s, wc.byte_len() == 48, "byte_len is not 48")?;
        expect_bytes(s, &self.get(DST, 48), &pattern(48, 3))
    }

    fn send_3_sges_to_2(&mut self) -> R {
        let s = "send_3_sges_to_2";
        self.put(s, SRC, &pattern(600, 4))?;
        self.mr.fill(DST..DST + 8192, 0).at(s)?;
        let r = [self.sge(DST, 250), self.sge(DST + 4096, 400)];
        self.qb.post_recv(&[RecvWr::new(41, &r)]).at(s)?;
        let sg = [
            self.sge(SRC, 100),
            self.sge(SRC + 100, 200),
            self.sge(SRC + 300, 300),
        ];
        self.qa
            .post_send(&[SendWr::send(40, &sg).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 40)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 41)?;
        expect(s, wc.byte_len() == 600, "byte_len is not 600")?;
        expect_bytes(s, &self.get(DST, 250), &self.get(SRC, 250))?;
        expect_bytes(s, &self.get(DST + 4096, 350), &self.get(SRC + 250, 350))?;
        expect(
            s,
            self.get(DST + 4096 + 350, 1)[0] == 0,
            "wrote past the message",
        )
    }

    fn rdma_write(&mut self) -> R {
        let s = "rdma_write";
        self.put(s, SRC, &pattern(4096, 5))?;
        let sg = [self.sge(SRC, 4096)];
        let wr = SendWr::rdma_write(50, &sg, self.remote(DST), self.mr.rkey()).signaled();
        self.qa.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 50)?;
        expect(
            s,
            wc.opcode() == WcOpcode::RDMA_WRITE,
            "opcode is not RDMA_WRITE",
        )?;
        expect_bytes(s, &self.get(DST, 4096), &self.get(SRC, 4096))?;
        expect_quiet(s, &mut self.cqb)
    }

    fn rdma_write_imm(&mut self) -> R {
        let s = "rdma_write_imm";
        self.put(s, SRC, &pattern(512, 6))?;
        let r = [self.sge(AUX, 16)];
        self.qb.post_recv(&[RecvWr::new(61, &r)]).at(s)?;
        let sg = [self.sge(SRC, 512)];
        let wr = SendWr::rdma_write(60, &sg, self.remote(DST), self.mr.rkey())
            .with_imm(0xcafe)
            .signaled();
        self.qa.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 60)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 61)?;
        expect(
            s,
            wc.opcode() == WcOpcode::RECV_RDMA_WITH_IMM,
            "opcode is not RECV_RDMA_WITH_IMM",
        )?;
        expect(s, wc.imm_data() == Some(0xcafe), "wrong imm_data")?;
        expect(s, wc.byte_len() == 512, "byte_len is not 512")?;
        expect_bytes(s, &self.get(DST, 512), &self.get(SRC, 512))
    }

    fn rdma_read(&mut self) -> R {
        let s = "rdma_read";
        self.put(s, DST, &pattern(2048, 7))?;
        self.mr.fill(SRC..SRC + 2048, 0).at(s)?;
        let sg = [self.sge(SRC, 2048)];
        let wr = SendWr::rdma_read(70, &sg, self.remote(DST), self.mr.rkey()).signaled();
        self.qa.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 70)?;
        expect(
            s,
            wc.opcode() == WcOpcode::RDMA_READ,
            "opcode is not RDMA_READ",
        )?;
        expect(s, wc.byte_len() == 2048, "byte_len is not 2048")?;
        expect_bytes(s, &self.get(SRC, 2048), &self.get(DST, 2048))
    }

    fn u64_at(&self, off: usize) -> u64 {
        let b = self.get(off, 8);
        u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]))
    }

    /// cmp_swap, cmp_swap_no_swap and fetch_add.
    fn atomics(&mut self, rep: &mut Report) -> R {
        let s = "cmp_swap";
        self.put(s, ATOM, &42u64.to_ne_bytes())?;
        self.put(s, ATOM + 64, &0u64.to_ne_bytes())?;
        let sg = [self.sge(ATOM + 64, 8)];
        let (target, rkey) = (self.remote(ATOM), self.mr.rkey());
        self.qa
            .post_send(&[SendWr::cmp_swap(80, &sg[0], target, rkey, 42, 99).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 80)?;
        expect(
            s,
            wc.opcode() == WcOpcode::COMP_SWAP,
            "opcode is not COMP_SWAP",
        )?;
        expect(s, self.u64_at(ATOM + 64) == 42, "old value is not 42")?;
        expect(s, self.u64_at(ATOM) == 99, "target was not swapped to 99")?;
        rep.pass(s);

        let s = "cmp_swap_no_swap";
        self.qa
            .post_send(&[SendWr::cmp_swap(81, &sg[0], target, rkey, 1, 7).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 81)?;
        expect(s, self.u64_at(ATOM + 64) == 99, "old value is not 99")?;
        expect(s, self.u64_at(ATOM) == 99, "target changed")?;
        rep.pass(s);

        let s = "fetch_add";
        self.qa
            .post_send(&[SendWr::fetch_add(82, &sg[0], target, rkey, 5).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 82)?;
        expect(
            s,
            wc.opcode() == WcOpcode::FETCH_ADD,
            "opcode is not FETCH_ADD",
        )?;
        expect(s, self.u64_at(ATOM + 64) == 99, "old value is not 99")?;
        expect(s, self.u64_at(ATOM) == 104, "target is not 104")?;
        rep.pass(s);
        Ok(())
    }

    fn unsignaled_chain(&mut self) -> R {
        let s = "unsignaled_chain";
        let bytes: Vec<u8> = (0..32u8).map(|i| 0xa0 + i).collect();
        self.put(s, SRC, &bytes)?;
        let sges: Vec<[Sge; 1]> = (0..32).map(|i| [self.sge(SRC + i, 1)]).collect();
        let rkey = self.mr.rkey();
        let chain: Vec<SendWr<'_>> = (0..32)
            .map(|i| {
                let wr =
                    SendWr::rdma_write(100 + i as u64, &sges[i], self.remote(DST + 8 * i), rkey);
                if i == 31 {
                    wr.signaled()
                } else {
                    wr
                }
            })
            .collect();
        self.qa.post_send(&chain).at(s)?;
        drop(chain);
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 131)?;
        for i in 0..32 {
            expect(
                s,
                self.get(DST + 8 * i, 1)[0] == 0xa0 + i as u8,
                &format!("write {i} did not land"),
            )?;
        }
        expect_quiet(s, &mut self.cqa)
    }

    fn sq_wrap(&mut self) -> R {
        let s = "sq_wrap";
        let rkey = self.mr.rkey();
        for i in 0..1200usize {
            let v: u64 = 0x1000 + i as u64;
            let off = SRC + 8 * (i % 16);
            self.put(s, off, &v.to_ne_bytes())?;
            let wr_id = 1000 + i as u64;
            if i % 3 == 0 {
                let sg = [
                    self.sge(off, 4),
                    self.sge(off + 4, 4),
                    self.sge(off, 0),
                    self.sge(off, 8),
                ];
                let r = [self.sge(AUX, 64)];
                self.qb
                    .post_recv(&[RecvWr::new(5000 + i as u64, &r)])
                    .at(s)?;
                self.qa
                    .post_send(&[SendWr::send(wr_id, &sg).signaled()])
                    .at(s)?;
            } else {
                let sg = [self.sge(off, 8)];
                let dst = self.remote(DST + 8 * (i % 16));
                self.qa
                    .post_send(&[SendWr::rdma_write(wr_id, &sg, dst, rkey).signaled()])
                    .at(s)?;
            }
            let wc = poll_one(s, &mut self.cqa)?;
            expect_wc(s, &wc, WcStatus::SUCCESS, wr_id).map_err(|f| Fail {
                why: format!("iteration {i}: {}", f.why),
                ..f
            })?;
            let want = self.get(off, 8);
            if i % 3 == 0 {
                let wc = poll_one(s, &mut self.cqb)?;
                expect_wc(s, &wc, WcStatus::SUCCESS, 5000 + i as u64)?;
                expect(s, wc.byte_len() == 16, "byte_len is not 16")?;
                expect_bytes(s, &self.get(AUX, 8), &want)?;
                expect_bytes(s, &self.get(AUX + 8, 8), &want)?;
            } else {
                expect_bytes(s, &self.get(DST + 8 * (i % 16), 8), &want)?;
            }
        }
        Ok(())
    }

    /// srq and srq_reuse.
    fn srq(&mut self, rep: &mut Report) -> R {
        let s = "srq";
        let mut srq = self
            .pd
            .create_srq(&SrqInitAttr {
                max_wr: 16,
                max_sge: 2,
                srq_limit: 0,
            })
            .at(s)?;
        let mut cqs = self.ctx.create_cq(64).at(s)?;
        let mut s1 = self.make_qp(s, QpType::Rc, &self.cqa, None)?;
        let mut s2 = self.make_qp(s, QpType::Rc, &self.cqa, None)?;
        let mut r1 = self.make_qp(s, QpType::Rc, &cqs, Some(&srq))?;
        let mut r2 = self.make_qp(s, QpType::Rc, &cqs, Some(&srq))?;
        connect_rc(s, &mut s1, r1.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut r1, s1.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut s2, r2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut r2, s2.qp_num(), self.lid, 7)?;
        for i in 0..4 {
            let r = [self.sge(AUX + 256 * i, 256)];
            srq.post_srq_recv(&[RecvWr::new(200 + i as u64, &r)])
                .at(s)?;
        }
        let (mut seen1, mut seen2) = (0, 0);
        for i in 0..4usize {
            let n = 100 + i;
            self.put(s, SRC + 256 * i, &pattern(n, 10 + i as u32))?;
            let sg = [self.sge(SRC + 256 * i, n as u32)];
            let wr = SendWr::send(210 + i as u64, &sg).signaled();
            let sender = if i % 2 == 1 { &mut s2 } else { &mut s1 };
            sender.post_send(&[wr]).at(s)?;
            let wc = poll_one(s, &mut self.cqa)?;
            expect_wc(s, &wc, WcStatus::SUCCESS, 210 + i as u64)?;
            let wc = poll_one(s, &mut cqs)?;
            expect_wc(s, &wc, WcStatus::SUCCESS, 200 + i as u64)?;
            expect(s, wc.byte_len() == n as u32, "wrong byte_len")?;
            let want = if i % 2 == 1 { &r2 } else { &r1 }.qp_num();
            expect(s, wc.qp_num() == want, "qp_num is not the receiving QP")?;
            seen1 += (wc.qp_num() == r1.qp_num()) as u32;
            seen2 += (wc.qp_num() == r2.qp_num()) as u32;
            expect_bytes(s, &self.get(AUX + 256 * i, n), &self.get(SRC + 256 * i, n))?;
        }
        expect(s, seen1 == 2 && seen2 == 2, "not two receives per QP")?;
        rep.pass(s);

        // Many more receives through the SRQ's free list, two posted
        // ahead, alternating senders.
        let s = "srq_reuse";
        for i in 0..2 {
            let r = [self.sge(AUX + 256 * i, 256)];
            srq.post_srq_recv(&[RecvWr::new(1000 + i as u64, &r)])
                .at(s)?;
        }
        for i in 0..60usize {
            let r = [self.sge(AUX + 256 * ((i + 2) % 4), 256)];
            srq.post_srq_recv(&[RecvWr::new(1000 + i as u64 + 2, &r)])
                .at(s)?;
            self.put(s, SRC, &pattern(50, 100 + i as u32))?;
            let sg = [self.sge(SRC, 50)];
            let wr = SendWr::send(2000 + i as u64, &sg).signaled();
            let sender = if i % 2 == 1 { &mut s2 } else { &mut s1 };
            sender.post_send(&[wr]).at(s)?;
            let wc = poll_one(s, &mut self.cqa)?;
            expect_wc(s, &wc, WcStatus::SUCCESS, 2000 + i as u64)?;
            let wc = poll_one(s, &mut cqs)?;
            expect_wc(s, &wc, WcStatus::SUCCESS, 1000 + i as u64)?;
            expect_bytes(s, &self.get(AUX + 256 * (i % 4), 50), &self.get(SRC, 50))?;
        }
        drop((s1, s2, r1, r2, srq, cqs));
        rep.pass(s);
        Ok(())
    }

    fn connect_ud(step: &'static str, qp: &mut Qp) -> R {
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(UD_QKEY),
            ..Default::default()
        })
        .at(step)?;
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            ..Default::default()
        })
        .at(step)?;
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(0),
            ..Default::default()
        })
        .at(step)
    }

    /// ud and ud_grh (IB link layer: no GRH unless the AH has one; 40
    /// bytes skipped either way).
    fn ud(&mut self, rep: &mut Report) -> R {
        let s = "ud";
        let mut u1 = self.make_qp(s, QpType::Ud, &self.cqa, None)?;
        let mut u2 = self.make_qp(s, QpType::Ud, &self.cqb, None)?;
        Self::connect_ud(s, &mut u1)?;
        Self::connect_ud(s, &mut u2)?;
        let ah = self
            .pd
            .create_ah(&AhAttr {
                dlid: self.lid,
                port_num: 1,
                ..Default::default()
            })
            .at(s)?;
        self.mr.fill(AUX..AUX + 40, 0x5a).at(s)?;
        self.put(s, SRC, &pattern(200, 20))?;
        let r = [self.sge(AUX, 40 + 256)];
        u2.post_recv(&[RecvWr::new(301, &r)]).at(s)?;
        let sg = [self.sge(SRC, 200)];
        let wr = SendWr::send(300, &sg)
            .with_imm(77)
            .signaled()
            .to(&ah, u2.qp_num(), UD_QKEY);
        u1.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 300)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 301)?;
        expect(s, wc.byte_len() == 240, "byte_len is not 40 + 200")?;
        expect(s, wc.src_qp() == u1.qp_num(), "src_qp is not the sender")?;
        expect(s, !wc.has_grh(), "GRH flag set without a GRH")?;
        expect(s, wc.imm_data().is_some(), "WITH_IMM not set")?;
        expect(s, wc.imm_data() == Some(77), "wrong imm_data")?;
        let grh = self.get(AUX, 40);
        expect(
            s,
            grh[0] == 0x5a && grh[39] == 0x5a,
            "the GRH area was written",
        )?;
        expect_bytes(s, &self.get(AUX + 40, 200), &self.get(SRC, 200))?;
        drop(ah);
        rep.pass(s);

        // With a GRH in the address vector the receiver gets it.
        let s = "ud_grh";
        let gid = self.ctx.query_gid(1, 0).at(s)?;
        let ah = self
            .pd
            .create_ah(&AhAttr {
                dlid: self.lid,
                port_num: 1,
                grh: Some(GlobalRoute {
                    dgid: gid,
                    sgid_index: 0,
                    hop_limit: 64,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .at(s)?;
        self.mr.fill(AUX..AUX + 40, 0x5a).at(s)?;
        u2.post_recv(&[RecvWr::new(311, &r)]).at(s)?;
        let wr = SendWr::send(310, &sg)
            .signaled()
            .to(&ah, u2.qp_num(), UD_QKEY);
        u1.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 310)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 311)?;
        expect(s, wc.byte_len() == 240, "byte_len is not 40 + 200")?;
        expect(s, wc.has_grh(), "GRH flag not set")?;
        let grh = self.get(AUX, 40);
        expect(s, grh[0] >> 4 == 6, "GRH IP version is not 6")?;
        expect(s, grh[7] == 64, "GRH hop limit is not 64")?;
        expect_bytes(s, &grh[8..24], &gid.0)?;
        expect_bytes(s, &grh[24..40], &gid.0)?;
        expect_bytes(s, &self.get(AUX + 40, 200), &self.get(SRC, 200))?;
        drop(ah);
        drop((u1, u2));
        rep.pass(s);
        Ok(())
    }

    fn uc(&mut self) -> R {
        let s = "uc";
        let attr = QpInitAttr {
            send_cq: &self.cqa,
            recv_cq: &self.cqb,
            qp_type: QpType::Uc,
            cap: QpCap {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        let mut c1 = self.pd.create_qp(&attr).at(s)?;
        let mut c2 = self.pd.create_qp(&attr).at(s)?;
        connect_rc(s, &mut c1, c2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut c2, c1.qp_num(), self.lid, 7)?;
        self.put(s, SRC, &pattern(300, 40))?;
        let sg = [self.sge(SRC, 300)];
        let wr = SendWr::rdma_write(800, &sg, self.remote(DST), self.mr.rkey()).signaled();
        c1.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 800)?;
        expect_bytes(s, &self.get(DST, 300), &self.get(SRC, 300))?;
        let r = [self.sge(AUX, 512)];
        c2.post_recv(&[RecvWr::new(802, &r)]).at(s)?;
        c1.post_send(&[SendWr::send(801, &sg).signaled()]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 801)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 802)?;
        expect(s, wc.byte_len() == 300, "byte_len is not 300")?;
        expect_bytes(s, &self.get(AUX, 300), &self.get(SRC, 300))
    }

    /// comp_channel and comp_solicited. Our events name the CQ by its
    /// EventId (libibverbs: the CQ pointer and its cq_context) and need no
    /// acknowledgement.
    fn comp_channel(&mut self, rep: &mut Report) -> R {
        let s = "comp_channel";
        let chan = self.ctx.create_comp_channel().at(s)?;
        let mut cqe_ev = self.ctx.create_cq_with(16, Some(&chan), 0).at(s)?;
        let mut e1 = self.make_qp(s, QpType::Rc, &self.cqa, None)?;
        let mut e2 = self.make_qp(s, QpType::Rc, &cqe_ev, None)?;
        connect_rc(s, &mut e1, e2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut e2, e1.qp_num(), self.lid, 7)?;
        cqe_ev.req_notify(false).at(s)?;
        let r = [self.sge(AUX, 64)];
        e2.post_recv(&[RecvWr::new(401, &r)]).at(s)?;
        let sg = [self.sge(SRC, 8)];
        e1.post_send(&[SendWr::send(400, &sg).signaled()]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 400)?;
        match chan.get_event_timeout(TIMEOUT).at(s)? {
            None => fail(s, "no completion event within the timeout")?,
            Some(id) => expect(s, id == cqe_ev.event_id(), "event for the wrong CQ")?,
        }
        let wc = poll_one(s, &mut cqe_ev)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 401)?;
        // Not re-armed: no second event.
        e2.post_recv(&[RecvWr::new(402, &r)]).at(s)?;
        e1.post_send(&[SendWr::send(403, &sg).signaled()]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 403)?;
        let wc = poll_one(s, &mut cqe_ev)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 402)?;
        expect(
            s,
            chan.get_event_timeout(QUIET).at(s)?.is_none(),
            "event without arming",
        )?;
        rep.pass(s);

        // Solicited-only: an unsolicited SEND raises nothing, a solicited
        // one does.
        let s = "comp_solicited";
        cqe_ev.req_notify(true).at(s)?;
        e2.post_recv(&[RecvWr::new(404, &r)]).at(s)?;
        e2.post_recv(&[RecvWr::new(405, &r)]).at(s)?;
        e1.post_send(&[SendWr::send(406, &sg).signaled()]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 406)?;
        let wc = poll_one(s, &mut cqe_ev)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 404)?;
        expect(
            s,
            chan.get_event_timeout(QUIET).at(s)?.is_none(),
            "event for an unsolicited SEND",
        )?;
        let wr = SendWr::send(407, &sg).flags(SendFlags::SIGNALED | SendFlags::SOLICITED);
        e1.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 407)?;
        match chan.get_event_timeout(TIMEOUT).at(s)? {
            None => fail(s, "no event for a solicited SEND")?,
            Some(id) => expect(s, id == cqe_ev.event_id(), "event for the wrong CQ")?,
        }
        let wc = poll_one(s, &mut cqe_ev)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 405)?;
        drop((e1, e2, cqe_ev, chan));
        rep.pass(s);
        Ok(())
    }

    /// bad_rkey, bad_rkey_flush, bad_lkey, reset_reuse, recv_too_small,
    /// recv_flush: one pair, reset and reconnected between cases.
    fn errors(&mut self, rep: &mut Report) -> R {
        let s = "bad_rkey";
        let mut b1 = self.make_qp(s, QpType::Rc, &self.cqa, None)?;
        let mut b2 = self.make_qp(s, QpType::Rc, &self.cqb, None)?;
        connect_rc(s, &mut b1, b2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut b2, b1.qp_num(), self.lid, 7)?;
        let sg = [self.sge(SRC, 8)];
        let (dst, rkey) = (self.remote(DST), self.mr.rkey());
        let chain = [
            SendWr::rdma_write(500, &sg, dst, rkey ^ 0x5500).signaled(),
            SendWr::rdma_write(501, &sg, dst, rkey).signaled(),
        ];
        b1.post_send(&chain).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::REM_ACCESS_ERR, 500)?;
        let wc = poll_one("bad_rkey_flush", &mut self.cqa)?;
        expect_wc("bad_rkey_flush", &wc, WcStatus::WR_FLUSH_ERR, 501)?;
        rep.pass("bad_rkey");
        rep.pass("bad_rkey_flush");

        // A bad lkey on a fresh connection: LOC_PROT_ERR.
        let s = "bad_lkey";
        let reset = QpAttr {
            qp_state: Some(QpState::Reset),
            ..Default::default()
        };
        b1.modify(&reset).at(s)?;
        b2.modify(&reset).at(s)?;
        connect_rc(s, &mut b1, b2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut b2, b1.qp_num(), self.lid, 7)?;
        let mut bad = self.sge(SRC, 8);
        bad.lkey ^= 0x5500;
        let bad = [bad];
        b1.post_send(&[SendWr::rdma_write(503, &bad, dst, rkey).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::LOC_PROT_ERR, 503)?;
        rep.pass(s);

        // Back to RESET and reconnected, the pair works again.
        let s = "reset_reuse";
        b1.modify(&reset).at(s)?;
        b2.modify(&reset).at(s)?;
        connect_rc(s, &mut b1, b2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut b2, b1.qp_num(), self.lid, 7)?;
        self.put(s, SRC, &[0x3c])?;
        b1.post_send(&[SendWr::rdma_write(502, &sg, dst, rkey).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 502)?;
        expect(s, self.get(DST, 1)[0] == 0x3c, "the write did not land")?;
        rep.pass(s);

        // A receive too small: REM_INV_REQ / LOC_LEN, then the responder's
        // other receive is flushed.
        let s = "recv_too_small";
        let r = [self.sge(AUX, 4)];
        b2.post_recv(&[RecvWr::new(511, &r)]).at(s)?;
        b2.post_recv(&[RecvWr::new(512, &r)]).at(s)?;
        let sg64 = [self.sge(SRC, 64)];
        b1.post_send(&[SendWr::send(510, &sg64).signaled()]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::REM_INV_REQ_ERR, 510)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::LOC_LEN_ERR, 511)?;
        rep.pass(s);
        let s = "recv_flush";
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::WR_FLUSH_ERR, 512)?;
        drop((b1, b2));
        rep.pass(s);
        Ok(())
    }

    /// RNR with retries: the send waits for the receive.
    fn rnr_retry(&mut self) -> R {
        let s = "rnr_retry";
        let mut n1 = self.make_qp(s, QpType::Rc, &self.cqa, None)?;
        let mut n2 = self.make_qp(s, QpType::Rc, &self.cqb, None)?;
        connect_rc(s, &mut n1, n2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut n2, n1.qp_num(), self.lid, 7)?;
        self.put(s, SRC, &pattern(32, 30))?;
        let sg = [self.sge(SRC, 32)];
        n1.post_send(&[SendWr::send(700, &sg).signaled()]).at(s)?;
        expect_quiet(s, &mut self.cqa)?;
        let r = [self.sge(AUX, 64)];
        n2.post_recv(&[RecvWr::new(701, &r)]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 700)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 701)?;
        expect_bytes(s, &self.get(AUX, 32), &self.get(SRC, 32))
    }

    /// RNR with rnr_retry 0.
    fn rnr_retry_exceeded(&mut self) -> R {
        let s = "rnr_retry_exceeded";
        let mut n1 = self.make_qp(s, QpType::Rc, &self.cqa, None)?;
        let mut n2 = self.make_qp(s, QpType::Rc, &self.cqb, None)?;
        connect_rc(s, &mut n1, n2.qp_num(), self.lid, 0)?;
        connect_rc(s, &mut n2, n1.qp_num(), self.lid, 0)?;
        let sg = [self.sge(SRC, 8)];
        n1.post_send(&[SendWr::send(600, &sg).signaled()]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::RNR_RETRY_EXC_ERR, 600)
    }
}

/// datapath.c's `cq_resize`: growing a CQ that holds unpolled completions
/// (past its first lap) keeps them with their wr_ids, and later ones land
/// in the new ring after them.
fn cq_resize(d: &mut Dp, _: &mut Report) -> R {
    let s = "cq_resize";
    let mut rcq = d.ctx.create_cq(4).at(s)?;
    expect(s, rcq.cqe() == 7, "a 4-entry CQ does not have 8 entries")?;
    let mut z1 = d.make_qp(s, QpType::Rc, &rcq, None)?;
    let mut z2 = d.make_qp(s, QpType::Rc, &d.cqb, None)?;
    connect_rc(s, &mut z1, z2.qp_num(), d.lid, 7)?;
    connect_rc(s, &mut z2, z1.qp_num(), d.lid, 7)?;
    let sg = [d.sge(SRC, 64)];
    for k in 0..6u64 {
        let wr = SendWr::rdma_write(800 + k, &sg, d.remote(DST), d.mr.rkey()).signaled();
        z1.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut rcq)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 800 + k)?;
    }
    // Three completions left unpolled, the last in the second lap.
    for k in 0..3usize {
        d.put(s, SRC + 4096 * k, &pattern(64, 40 + k as u32))?;
        let sg = [d.sge(SRC + 4096 * k, 64)];
        let wr = SendWr::rdma_write(900 + k as u64, &sg, d.remote(DST + 4096 * k), d.mr.rkey())
            .signaled();
        z1.post_send(&[wr]).at(s)?;
    }
    // The emulated HCA writes a CQE under the lock RESIZE_CQ takes, in
    // the same pass as the data.
    let end = Instant::now() + TIMEOUT;
    while d.get(DST + 8192, 64) != pattern(64, 42) {
        if Instant::now() > end {
            return fail(s, "the writes did not arrive");
        }
    }
    rcq.resize(40).at(s)?;
    expect(s, rcq.cqe() == 63, "resized CQ does not have 64 entries")?;
    for k in 0..3u64 {
        let wc = poll_one(s, &mut rcq)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 900 + k)?;
        expect(
            s,
            wc.opcode() == WcOpcode::RDMA_WRITE,
            "opcode is not RDMA_WRITE",
        )?;
    }
    expect_quiet(s, &mut rcq)?;
    for k in 0..12u64 {
        let wr = SendWr::rdma_write(1000 + k, &sg, d.remote(DST), d.mr.rkey()).signaled();
        z1.post_send(&[wr]).at(s)?;
    }
    for k in 0..12u64 {
        let wc = poll_one(s, &mut rcq)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 1000 + k)?;
    }
    expect_quiet(s, &mut rcq)
}

/// How long the emulated HCA gets to write the flush CQEs of a QP moved to
/// ERR (its thread passes every few hundred microseconds at most).
const FLUSH_WAIT: Duration = Duration::from_millis(200);

/// reset_clean and reset_rq_capacity (no C twin: libmlx5 does this in
/// `__mlx5_cq_clean`): a QP moved to ERR with receives posted gets flush
/// CQEs; moved to RESET before they are polled, they must vanish from its
/// CQ, so that after reconnecting only the new work completes, and the
/// receive ring must take exactly its capacity again.
fn reset_clean(d: &mut Dp, rep: &mut Report) -> R {
    let s = "reset_clean";
    let mut cq1 = d.ctx.create_cq(256).at(s)?;
    let mut cq2 = d.ctx.create_cq(256).at(s)?;
    let mut p1 = d.make_qp(s, QpType::Rc, &cq1, None)?;
    let mut p2 = d.make_qp(s, QpType::Rc, &cq2, None)?;
    connect_rc(s, &mut p1, p2.qp_num(), d.lid, 7)?;
    connect_rc(s, &mut p2, p1.qp_num(), d.lid, 7)?;
    let to = |st| QpAttr {
        qp_state: Some(st),
        ..Default::default()
    };
    // Receives flushed by ERR, their CQEs left in cq2; then RESET and
    // reconnect both ends.
    let flush_and_reset = |s: &'static str, d: &Dp, p1: &mut Qp, p2: &mut Qp, n: u64| -> R {
        for i in 0..n {
            let r = [d.sge(AUX + 64 * i as usize, 64)];
            p2.post_recv(&[RecvWr::new(3000 + i, &r)]).at(s)?;
        }
        p2.modify(&to(QpState::Err)).at(s)?;
        std::thread::sleep(FLUSH_WAIT);
        p1.modify(&to(QpState::Reset)).at(s)?;
        p2.modify(&to(QpState::Reset)).at(s)?;
        connect_rc(s, p1, p2.qp_num(), d.lid, 7)?;
        connect_rc(s, p2, p1.qp_num(), d.lid, 7)
    };
    flush_and_reset(s, d, &mut p1, &mut p2, 3)?;
    d.put(s, SRC, &pattern(100, 50))?;
    d.mr.fill(DST..DST + 4096, 0).at(s)?;
    let r = [d.sge(DST, 4096)];
    p2.post_recv(&[RecvWr::new(3100, &r)]).at(s)?;
    let sg = [d.sge(SRC, 100)];
    p1.post_send(&[SendWr::send(3101, &sg).signaled()]).at(s)?;
    let wc = poll_one(s, &mut cq1)?;
    expect_wc(s, &wc, WcStatus::SUCCESS, 3101)?;
    let wc = poll_one(s, &mut cq2)?;
    expect_wc(s, &wc, WcStatus::SUCCESS, 3100)?;
    expect(s, wc.byte_len() == 100, "byte_len is not 100")?;
    expect(
        s,
        wc.qp_num() == p2.qp_num(),
        "qp_num is not the receiver's",
    )?;
    expect_bytes(s, &d.get(DST, 100), &pattern(100, 50))?;
    expect_quiet(s, &mut cq2)?;
    rep.pass(s);

    let s = "reset_rq_capacity";
    flush_and_reset(s, d, &mut p1, &mut p2, 5)?;
    // Nothing of the old connection may complete (and polling must not
    // retire receives that are not posted).
    expect_quiet(s, &mut cq2)?;
    let cap = p2.cap().max_recv_wr;
    let r = [d.sge(DST, 4096)];
    let mut accepted = 0u32;
    let err = loop {
        match p2.post_recv(&[RecvWr::new(4000 + u64::from(accepted), &r)]) {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        if accepted > cap + 8 {
            return fail(s, format!("accepted {accepted} receives, capacity {cap}"));
        }
    };
    expect(
        s,
        accepted == cap,
        &format!("accepted {accepted} receives, capacity {cap}"),
    )?;
    expect(
        s,
        matches!(
            err,
            Error::Post {
                error: rverbs::PostError::QueueFull,
                ..
            }
        ),
        &format!("the receive past the capacity failed with {err}, not QueueFull"),
    )?;
    // The oldest of them takes the next message.
    d.put(s, SRC, &pattern(40, 51))?;
    let sg = [d.sge(SRC, 40)];
    p1.post_send(&[SendWr::send(4500, &sg).signaled()]).at(s)?;
    let wc = poll_one(s, &mut cq1)?;
    expect_wc(s, &wc, WcStatus::SUCCESS, 4500)?;
    let wc = poll_one(s, &mut cq2)?;
    expect_wc(s, &wc, WcStatus::SUCCESS, 4000)?;
    expect(s, wc.byte_len() == 40, "byte_len is not 40")?;
    expect_bytes(s, &d.get(DST, 40), &pattern(40, 51))?;
    expect_quiet(s, &mut cq2)?;
    rep.pass(s);
    drop((p1, p2));
    Ok(())
}

/// srq_destroy_unpolled (no C twin: libmlx5 frees the SRQ WQEs of the
/// CQEs it cleans when a QP is destroyed): rounds of a QP on an SRQ that
/// receives messages whose CQEs are never polled before it is destroyed.
/// The SRQ must get those WQEs back: after every round it takes as many
/// receives as were consumed, and in the end its full capacity, and data
/// still flows.
fn srq_destroy_unpolled(d: &mut Dp, _: &mut Report) -> R {
    let s = "srq_destroy_unpolled";
    let mut srq =
        d.pd.create_srq(&SrqInitAttr {
            max_wr: 7,
            max_sge: 1,
            srq_limit: 0,
        })
        .at(s)?;
    let cap = srq.max_wr();
    let mut scq = d.ctx.create_cq(64).at(s)?;
    let mut rcq = d.ctx.create_cq(64).at(s)?;
    let r = [d.sge(AUX, 256)];
    let mut next_id = 5000u64;
    for _ in 0..cap {
        srq.post_srq_recv(&[RecvWr::new(next_id, &r)]).at(s)?;
        next_id += 1;
    }
    const PER_ROUND: u64 = 3;
    for round in 0..4 {
        let mut tx = d.make_qp(s, QpType::Rc, &scq, None)?;
        let mut rx = d.make_qp(s, QpType::Rc, &rcq, Some(&srq))?;
        connect_rc(s, &mut tx, rx.qp_num(), d.lid, 7)?;
        connect_rc(s, &mut rx, tx.qp_num(), d.lid, 7)?;
        let sg = [d.sge(SRC, 32)];
        for k in 0..PER_ROUND {
            tx.post_send(&[SendWr::send(6000 + k, &sg).signaled()])
                .at(s)?;
            let wc = poll_one(s, &mut scq)?;
            expect_wc(s, &wc, WcStatus::SUCCESS, 6000 + k)?;
        }
        // The receive CQEs stay in rcq while the QP is destroyed.
        drop((tx, rx));
        expect_quiet(s, &mut rcq)?;
        for _ in 0..PER_ROUND {
            srq.post_srq_recv(&[RecvWr::new(next_id, &r)])
                .map_err(|e| Fail {
                    step: s,
                    why: format!(
                        "round {round}: the SRQ refused a receive ({e}); {} of {cap} outstanding",
                        srq.outstanding()
                    ),
                })?;
            next_id += 1;
        }
    }
    expect(
        s,
        srq.outstanding() == cap,
        &format!("{} of {cap} receives outstanding", srq.outstanding()),
    )?;
    match srq.post_srq_recv(&[RecvWr::new(next_id, &r)]) {
        Err(Error::Post {
            error: rverbs::PostError::QueueFull,
            ..
        }) => {}
        other => return fail(s, format!("a receive past the capacity gave {other:?}")),
    }
    // Data still flows through the SRQ.
    let mut tx = d.make_qp(s, QpType::Rc, &scq, None)?;
    let mut rx = d.make_qp(s, QpType::Rc, &rcq, Some(&srq))?;
    connect_rc(s, &mut tx, rx.qp_num(), d.lid, 7)?;
    connect_rc(s, &mut rx, tx.qp_num(), d.lid, 7)?;
    d.put(s, SRC, &pattern(77, 60))?;
    let sg = [d.sge(SRC, 77)];
    tx.post_send(&[SendWr::send(6100, &sg).signaled()]).at(s)?;
    let wc = poll_one(s, &mut scq)?;
    expect_wc(s, &wc, WcStatus::SUCCESS, 6100)?;
    let wc = poll_one(s, &mut rcq)?;
    expect(
        s,
        wc.status() == WcStatus::SUCCESS && (5000..next_id).contains(&wc.wr_id()),
        &format!("receive completion {wc:?}"),
    )?;
    expect(
        s,
        wc.qp_num() == rx.qp_num(),
        "qp_num is not the receiver's",
    )?;
    expect(s, wc.byte_len() == 77, "byte_len is not 77")?;
    expect_bytes(s, &d.get(AUX, 77), &pattern(77, 60))?;
    drop((tx, rx, srq));
    Ok(())
}

/// A fresh connected RC pair on `cq` (requester) and the main pair's `cqb`.
fn fresh_pair(d: &Dp, s: &'static str, cq: &Cq) -> R<(Qp, Qp)> {
    let mut z1 = d.make_qp(s, QpType::Rc, cq, None)?;
    let mut z2 = d.make_qp(s, QpType::Rc, &d.cqb, None)?;
    connect_rc(s, &mut z1, z2.qp_num(), d.lid, 7)?;
    connect_rc(s, &mut z2, z1.qp_num(), d.lid, 7)?;
    Ok((z1, z2))
}

/// Only unsignaled sends: after `max_send_wr` of them the queue is full for
/// good (a slot is freed only by a polled completion, as with libmlx5),
/// and the error says why.
fn unsignaled_queue_full(d: &mut Dp, _: &mut Report) -> R {
    let s = "unsignaled_queue_full";
    let mut cq = d.ctx.create_cq(16).at(s)?;
    let (mut z1, _z2) = fresh_pair(d, s, &cq)?;
    let max = z1.cap().max_send_wr;
    expect(s, max >= 64, "max_send_wr below the 64 requested")?;
    d.put(s, SRC, &pattern(64, 77))?;
    let sg = [d.sge(SRC, 64)];
    for k in 0..u64::from(max) {
        let wr = SendWr::rdma_write(k, &sg, d.remote(DST + 8192), d.mr.rkey());
        z1.post_send(&[wr]).at(s)?;
    }
    // Every write executed (the data is there) ...
    let end = Instant::now() + TIMEOUT;
    while d.get(DST + 8192, 64) != pattern(64, 77) {
        if Instant::now() > end {
            return fail(s, "the unsignaled writes did not arrive");
        }
    }
    expect_quiet(s, &mut cq)?;
    // ... yet the queue stays full: nothing signaled, nothing to poll.
    let wr = SendWr::rdma_write(999, &sg, d.remote(DST + 8192), d.mr.rkey());
    match z1.post_send(&[wr]) {
        Err(
            e @ Error::Post {
                index: 0,
                error: rverbs::PostError::QueueFull,
            },
        ) => expect(
            s,
            e.to_string().contains("signaled"),
            "QueueFull does not say that unsignaled sends need a signaled one",
        ),
        other => fail(s, format!("post after {max} unsignaled sends: {other:?}")),
    }
}

/// The same stream with `SignalEvery`: 4 x max_send_wr writes, one in
/// every max_send_wr / 2 signaled and polled, never full.
fn signal_every(d: &mut Dp, _: &mut Report) -> R {
    let s = "signal_every";
    let mut cq = d.ctx.create_cq(64).at(s)?;
    let (mut z1, _z2) = fresh_pair(d, s, &cq)?;
    let mut sig = rverbs::SignalEvery::for_qp(&z1);
    let total = 4 * u64::from(z1.cap().max_send_wr);
    let mut wc = [Wc::default(); 8];
    let (mut signaled, mut done) = (0usize, 0usize);
    for k in 0..total {
        d.put(s, SRC, &pattern(64, k as u32))?;
        let sg = [d.sge(SRC, 64)];
        let wr = sig.mark(SendWr::rdma_write(
            k,
            &sg,
            d.remote(DST + 12288),
            d.mr.rkey(),
        ));
        signaled += usize::from(wr.send_flags.contains(SendFlags::SIGNALED));
        // The emulated HCA runs in another thread: wait for room rather
        // than racing it, as an application polls when the queue is full.
        let end = Instant::now() + TIMEOUT;
        loop {
            match z1.post_send(&[wr]) {
                Ok(()) => break,
                Err(Error::Post {
                    error: rverbs::PostError::QueueFull,
                    ..
                }) if Instant::now() < end => {}
                Err(e) => return fail(s, format!("post {k}: {e}")),
            }
            let n = cq.poll(&mut wc).at(s)?;
            for w in &wc[..n] {
                expect_wc(s, w, WcStatus::SUCCESS, w.wr_id())?;
            }
            done += n;
        }
        let n = cq.poll(&mut wc).at(s)?;
        for w in &wc[..n] {
            expect_wc(s, w, WcStatus::SUCCESS, w.wr_id())?;
        }
        done += n;
    }
    while done < signaled {
        done += poll_one(s, &mut cq).map(|_| 1)?;
    }
    expect(
        s,
        signaled as u64 == total / u64::from(sig.every()),
        "not one in every max_send_wr / 2 signaled",
    )?;
    expect_bytes(s, &d.get(DST + 12288, 64), &pattern(64, (total - 1) as u32))
}

/// `Qp::query` reports what `Qp::cap` does (the kernel reports no send
/// capacities on mlx5), and exactly that many sends fit in one chain.
fn query_caps(d: &mut Dp, _: &mut Report) -> R {
    let s = "query_caps";
    let mut cq = d.ctx.create_cq(16).at(s)?;
    let (mut z1, _z2) = fresh_pair(d, s, &cq)?;
    let cap = z1.cap();
    let (_, qcap, _) = z1.query().at(s)?;
    expect(s, qcap == cap, &format!("query {qcap:?} != cap {cap:?}"))?;
    expect(
        s,
        cap.max_send_wr >= 64 && cap.max_send_sge >= 4,
        "caps below the request",
    )?;
    let sg = [d.sge(SRC, 8)];
    let wrs: Vec<SendWr> = (0..=u64::from(cap.max_send_wr))
        .map(|k| SendWr::rdma_write(k, &sg, d.remote(DST), d.mr.rkey()))
        .collect();
    match z1.post_send(&wrs) {
        Err(Error::Post {
            index,
            error: rverbs::PostError::QueueFull,
        }) => expect(
            s,
            index == cap.max_send_wr as usize,
            &format!("QueueFull at {index}, max_send_wr is {}", cap.max_send_wr),
        )?,
        other => fail(s, format!("posting max_send_wr + 1: {other:?}"))?,
    }
    expect_quiet(s, &mut cq)
}

/// `Cq::poll_blocking` through the channel: times out when nothing comes,
/// wakes for a completion.
fn poll_blocking(d: &mut Dp, _: &mut Report) -> R {
    let s = "poll_blocking";
    let chan = d.ctx.create_comp_channel().at(s)?;
    let mut cq = d.ctx.create_cq_with(16, Some(&chan), 0).at(s)?;
    let (mut z1, _z2) = fresh_pair(d, s, &cq)?;
    let mut wc = [Wc::default(); 4];
    match cq.poll_blocking(&mut wc, QUIET) {
        Err(Error::Timeout(_)) => {}
        other => fail(s, format!("an empty CQ: {other:?}"))?,
    }
    let sg = [d.sge(SRC, 8)];
    for k in 0..50u64 {
        let wr = SendWr::rdma_write(1100 + k, &sg, d.remote(DST), d.mr.rkey()).signaled();
        z1.post_send(&[wr]).at(s)?;
        let n = cq.poll_blocking(&mut wc, TIMEOUT).at(s)?;
        expect(s, n == 1, "not one completion")?;
        expect_wc(s, &wc[0], WcStatus::SUCCESS, 1100 + k)?;
    }
    Ok(())
}

/// datapath.c's `connect_rc`: RESET -> INIT -> RTR -> RTS for RC or UC.
fn connect_rc(step: &'static str, qp: &mut Qp, dest: u32, lid: u16, rnr_retry: u8) -> R {
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
        ..Default::default()
    })
    .at(step)?;
    let mut a = QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: Some(dest),
        rq_psn: Some(0),
        ah_attr: Some(AhAttr {
            dlid: lid,
            port_num: 1,
            ..Default::default()
        }),
        ..Default::default()
    };
    if rc {
        a.max_dest_rd_atomic = Some(4);
        a.min_rnr_timer = Some(1);
    }
    qp.modify(&a).at(step)?;
    let mut a = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(0),
        ..Default::default()
    };
    if rc {
        a.timeout = Some(14);
        a.retry_cnt = Some(7);
        a.rnr_retry = Some(rnr_retry);
        a.max_rd_atomic = Some(4);
    }
    qp.modify(&a).at(step)
}

/// A datapath scenario: reports its own extra PASS lines through the
/// `Report`; the returned error is its first failure.
type Scenario = fn(&mut Dp, &mut Report) -> R;

fn datapath(rep: &mut Report, dev: &Result<Device, String>) {
    let fds_before = open_fds();
    let setup = dev
        .as_ref()
        .map_err(|e| Fail {
            step: "setup",
            why: e.clone(),
        })
        .and_then(|d| d.open().at("setup"))
        .and_then(|ctx| Dp::setup(ctx, "setup"));
    let mut dp = match setup {
        Ok(dp) => dp,
        Err(f) => {
            rep.fail(&f);
            return;
        }
    };
    rep.pass("setup");

    let scenarios: &[(&[&'static str], Scenario)] = &[
        (&["send_recv"], |d, _| d.send_recv()),
        (&["send_imm"], |d, _| d.send_imm()),
        (&["send_inline"], |d, _| d.send_inline()),
        (&["send_3_sges_to_2"], |d, _| d.send_3_sges_to_2()),
        (&["rdma_write"], |d, _| d.rdma_write()),
        (&["rdma_write_imm"], |d, _| d.rdma_write_imm()),
        (&["rdma_read"], |d, _| d.rdma_read()),
        (&["cmp_swap", "cmp_swap_no_swap", "fetch_add"], Dp::atomics),
        (&["unsignaled_chain"], |d, _| d.unsignaled_chain()),
        (&["sq_wrap"], |d, _| d.sq_wrap()),
        (&["srq", "srq_reuse"], Dp::srq),
        (&["ud", "ud_grh"], Dp::ud),
        (&["uc"], |d, _| d.uc()),
        (&["comp_channel", "comp_solicited"], Dp::comp_channel),
        (
            &[
                "bad_rkey",
                "bad_rkey_flush",
                "bad_lkey",
                "reset_reuse",
                "recv_too_small",
                "recv_flush",
            ],
            Dp::errors,
        ),
        (&["rnr_retry"], |d, _| d.rnr_retry()),
        (&["rnr_retry_exceeded"], |d, _| d.rnr_retry_exceeded()),
        (&["cq_resize"], cq_resize),
        (&["reset_clean", "reset_rq_capacity"], reset_clean),
        (&["srq_destroy_unpolled"], srq_destroy_unpolled),
        (&["unsignaled_queue_full"], unsignaled_queue_full),
        (&["signal_every"], signal_every),
        (&["query_caps"], query_caps),
        (&["poll_blocking"], poll_blocking),
    ];
    for (names, run) in scenarios {
        if rep.over_budget() {
            rep.not_run(
                names,
                &format!("the {} s budget is spent", BUDGET.as_secs()),
            );
            continue;
        }
        let r = run(&mut dp, rep);
        let single = names.len() == 1;
        let failed = r.is_err();
        rep.outcome(r);
        if failed {
            rep.not_run(names, "an earlier step of its scenario failed");
            dp.drain();
        } else if single {
            rep.pass(names[0]);
        }
    }

    // Teardown: Drop reports no error; every fd of the device must close.
    drop(dp);
    let fds = open_fds();
    if fds == fds_before {
        rep.pass_note("teardown", "every fd of the device is closed");
    } else {
        rep.fail(&Fail {
            step: "teardown",
            why: format!("{fds_before} fds before opening, {fds} after dropping everything"),
        });
    }
}

fn main() -> ExitCode {
    let start = Instant::now();
    let dev = verbs_tests::mlx5_device(std::env::args().nth(1).as_deref());

    let mut rep = Report::new("objects", OBJECT_STEPS, start);
    if let Err(f) = objects(&mut rep, &dev) {
        rep.fail(&f);
    }
    let mut failed = rep.finish();

    let mut rep = Report::new("datapath", DATAPATH_STEPS, start);
    datapath(&mut rep, &dev);
    failed += rep.finish();

    if failed == 0 {
        println!(
            "mlx5_scenarios: all {} steps passed",
            OBJECT_STEPS.len() + DATAPATH_STEPS.len()
        );
        ExitCode::SUCCESS
    } else {
        println!("mlx5_scenarios: {failed} step(s) failed");
        ExitCode::FAILURE
    }
}
