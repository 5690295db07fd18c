//! The steps of `tests/mlx5-emu/c/dmabuf.c` through the `verbs` API (so
//! through provider-mlx5): dmabuf registration on the emulator's stand-in
//! dmabuf (a memfd sealed against shrinking) and its refusals, RDMA WRITE,
//! READ and SEND through the dmabuf MR, `Mr::advise` on a device without
//! on-demand paging, and the GID methods. Run by `cargo xtask mlx5` with
//! `MLX5_EMU_CMD_LOG`, which then compares this program's REG_DMABUF_MR
//! ioctls with dmabuf.c's (the registrations are made in the same order
//! with the same arguments; keep them in step).
//!
//! Where our API differs from libibverbs the step asserts our documented
//! behaviour and its line says so: refusals the library makes before the
//! kernel are `Error::InvalidArgument`; a closed descriptor cannot be
//! passed at all (a `BorrowedFd` is open by construction); an empty GID
//! slot or a missing port is `Error::InvalidArgument`.
//!
//! The dmabuf's contents are read and written with `pread`/`pwrite` on the
//! stand-in file (the same pages the device reaches), where dmabuf.c uses
//! its own mapping. Prints `PASS <step>` per step, and on the first failure
//! `FAIL <step>: <why>` and exits 1. Every wait is bounded. Opens the
//! device named by the first argument, else the first mlx5 device.

use std::fs::File;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rverbs::{
    AccessFlags, ConnectOpts, Cq, Error, OdpAdvice, Pd, Qp, QpCap, QpInitAttr, QpType, RecvWr,
    SendFlags, SendWr, Wc, WcStatus,
};
use verbs_tests::step::{expect, fail, main_with, pass, pass_note, At, Fail, R};

/// The stand-in dmabuf's size (two pages).
const DMABUF_SIZE: u64 = 8192;
/// The registration (as dmabuf.c): 0x800 bytes from 0x1100, at IOVA.
const OFFSET: u64 = 0x1100;
const LENGTH: u64 = 0x800;
const IOVA: u64 = 0x700_0100;
const TIMEOUT: Duration = Duration::from_millis(2000);

fn access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

/// The stand-in dmabuf: a memfd of `DMABUF_SIZE` bytes sealed against
/// shrinking.
fn stand_in() -> std::io::Result<File> {
    // SAFETY: a valid C string; flags only.
    let fd = unsafe {
        libc::memfd_create(
            c"dmabuf-stand-in".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: memfd_create just opened this descriptor for us alone.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(DMABUF_SIZE)?;
    // SAFETY: F_ADD_SEALS takes an integer; the fd is open.
    if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// Polls one successful completion `wr_id` from `cq`.
fn poll_ok(step: &str, cq: &mut Cq, wr_id: u64) -> R {
    let mut wc = [Wc::default(); 1];
    let end = Instant::now() + TIMEOUT;
    loop {
        if cq.poll(&mut wc).at(step)? == 1 {
            break;
        }
        if Instant::now() > end {
            return fail(step, "timed out waiting for a completion");
        }
    }
    if wc[0].status() != WcStatus::SUCCESS || wc[0].wr_id() != wr_id {
        return fail(
            step,
            format!(
                "completion {} status {}, expected {wr_id} success",
                wc[0].wr_id(),
                wc[0].status()
            ),
        );
    }
    Ok(())
}

/// A refusal with `errno` from the kernel.
fn kernel_refuses(step: &str, r: rverbs::Result<rverbs::DmabufMr>, errno: rverbs::Errno) -> R {
    match r {
        Ok(_) => fail(step, "registered"),
        Err(e @ Error::Kernel { .. }) if e.errno() == Some(errno) => {
            pass(step);
            Ok(())
        }
        Err(e) => fail(step, format!("{e}, expected {errno} from the kernel")),
    }
}

/// A refusal before the kernel (libibverbs: EINVAL from the kernel).
fn library_refuses(step: &str, r: rverbs::Result<rverbs::DmabufMr>) -> R {
    match r {
        Ok(_) => fail(step, "registered"),
        Err(Error::InvalidArgument(_)) => {
            pass_note(
                step,
                "refused before the kernel: InvalidArgument; libibverbs gets EINVAL",
            );
            Ok(())
        }
        Err(e) => fail(step, format!("{e}, expected InvalidArgument")),
    }
}

fn make_qp(pd: &Pd, cq: &Cq) -> R<Qp> {
    pd.create_qp(&QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        qp_type: QpType::Rc,
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    })
    .at("rdma_write_to_dmabuf")
}

/// Connects `a` to `b` like scenario.h `connect_rc` (RC, all access).
fn connect(a: &mut Qp, b: &Qp) -> R {
    let o = ConnectOpts {
        max_dest_rd_atomic: 4,
        max_rd_atomic: 4,
        min_rnr_timer: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..ConnectOpts::default()
    };
    let acc = access() | AccessFlags::REMOTE_ATOMIC;
    let remote = b.endpoint(&o).at("rdma_write_to_dmabuf")?;
    a.connect(&remote, acc, &o).at("rdma_write_to_dmabuf")
}

fn run() -> R {
    let dev = verbs_tests::mlx5_device(std::env::args().nth(1).as_deref())
        .map_err(|e| Fail("setup".into(), e))?;
    let ctx = dev.open().at("setup")?;
    let pd = ctx.alloc_pd().at("setup")?;
    let file = stand_in().map_err(|e| Fail("setup".into(), e.to_string()))?;
    pass("setup");

    let dmr = pd
        .reg_dmabuf_mr(file.as_fd(), OFFSET, LENGTH, IOVA, access())
        .at("reg_dmabuf_mr")?;
    expect(
        "reg_dmabuf_mr",
        dmr.lkey() != 0 && dmr.rkey() != 0,
        "zero key",
    )?;
    expect(
        "reg_dmabuf_mr",
        dmr.offset() == OFFSET && dmr.len() == LENGTH && dmr.iova() == IOVA,
        "offset/length/iova not as registered",
    )?;
    pass("reg_dmabuf_mr");

    pass_note(
        "refuse_closed_fd",
        "not expressible: a BorrowedFd is open by construction (I/O safety)",
    );
    let mut p = [-1; 2];
    // SAFETY: room for the two descriptors pipe() writes.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return fail("refuse_not_dmabuf", "pipe2 failed");
    }
    // SAFETY: pipe2 just opened both for us alone.
    let (rd, _wr) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
    kernel_refuses(
        "refuse_not_dmabuf",
        pd.reg_dmabuf_mr(rd.as_fd(), 0, 4096, 0, access()),
        rverbs::Errno::EINVAL,
    )?;
    kernel_refuses(
        "refuse_past_end",
        pd.reg_dmabuf_mr(file.as_fd(), 4096, DMABUF_SIZE, 0, access()),
        rverbs::Errno::EINVAL,
    )?;
    library_refuses(
        "refuse_iova_page_offset",
        pd.reg_dmabuf_mr(file.as_fd(), OFFSET, LENGTH, IOVA + 8, access()),
    )?;
    library_refuses(
        "refuse_on_demand",
        pd.reg_dmabuf_mr(
            file.as_fd(),
            OFFSET,
            LENGTH,
            IOVA,
            AccessFlags::LOCAL_WRITE | AccessFlags::ON_DEMAND,
        ),
    )?;
    library_refuses(
        "refuse_zero_length",
        pd.reg_dmabuf_mr(file.as_fd(), OFFSET, 0, IOVA, access()),
    )?;
    library_refuses(
        "refuse_remote_write_without_local",
        pd.reg_dmabuf_mr(
            file.as_fd(),
            OFFSET,
            LENGTH,
            IOVA,
            AccessFlags::REMOTE_WRITE,
        ),
    )?;

    // Data through the dmabuf MR between two connected RC QPs.
    let step = "rdma_write_to_dmabuf";
    let mut mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).at(step)?;
    let mut cqa = ctx.create_cq(16).at(step)?;
    let mut cqb = ctx.create_cq(16).at(step)?;
    let mut qa = make_qp(&pd, &cqa)?;
    let mut qb = make_qp(&pd, &cqb)?;
    connect(&mut qa, &qb)?;
    connect(&mut qb, &qa)?;
    let want: Vec<u8> = (0..256u32).map(|i| (i * 7 + 1) as u8).collect();
    mr.write_at(0, &want).at(step)?;
    let sges = [mr.sge(0..256).at(step)?];
    let wr = dmr
        .remote()
        .slice(0x10, 256)
        .at(step)?
        .rdma_write(1, &sges)
        .at(step)?
        .flags(SendFlags::SIGNALED);
    qa.post_send(&[wr]).at(step)?;
    poll_ok(step, &mut cqa, 1)?;
    let mut got = vec![0u8; 258];
    file.read_exact_at(&mut got, OFFSET + 0x0f)
        .map_err(|e| Fail(step.into(), e.to_string()))?;
    expect(
        step,
        got[1..257] == want[..],
        "the dmabuf does not hold the data",
    )?;
    expect(
        step,
        got[0] == 0 && got[257] == 0,
        "bytes around the target changed",
    )?;
    pass(step);

    let step = "rdma_read_from_dmabuf";
    let want: Vec<u8> = (0..256u32).map(|i| (i ^ 0x5a) as u8).collect();
    file.write_all_at(&want, OFFSET + 0x400)
        .map_err(|e| Fail(step.into(), e.to_string()))?;
    let sges = [mr.sge(0x800..0x900).at(step)?];
    let wr = dmr
        .remote()
        .slice(0x400, 256)
        .at(step)?
        .rdma_read(2, &sges)
        .at(step)?
        .flags(SendFlags::SIGNALED);
    qa.post_send(&[wr]).at(step)?;
    poll_ok(step, &mut cqa, 2)?;
    let mut got = vec![0u8; 256];
    mr.read_at(0x800, &mut got).at(step)?;
    expect(step, got == want, "the MR does not hold the dmabuf's bytes")?;
    pass(step);

    // The dmabuf MR as the local side: a SEND gathered from it.
    let step = "send_from_dmabuf";
    let rsges = [mr.sge(0xc00..0xd00).at(step)?];
    qb.post_recv(&[RecvWr::new(3, &rsges)]).at(step)?;
    let sges = [dmr.sge(0x400, 256).at(step)?];
    qa.post_send(&[SendWr::send(4, &sges).flags(SendFlags::SIGNALED)])
        .at(step)?;
    poll_ok(step, &mut cqa, 4)?;
    poll_ok(step, &mut cqb, 3)?;
    let mut got = vec![0u8; 256];
    mr.read_at(0xc00, &mut got).at(step)?;
    expect(
        step,
        got == want,
        "the receive does not hold the dmabuf's bytes",
    )?;
    pass(step);

    // No on-demand paging on this device: mlx5 has no advice to give.
    let step = "advise_mr_without_odp";
    match mr.advise(.., OdpAdvice::PrefetchWrite, true) {
        Err(e) if e.errno() == Some(rverbs::Errno::EOPNOTSUPP) => pass(step),
        Err(e) => return fail(step, format!("{e}, expected EOPNOTSUPP")),
        Ok(()) => return fail(step, "advice accepted"),
    }

    // The GID methods: the one valid entry, and an empty slot.
    let step = "query_gid_entry";
    let e = ctx.query_gid_entry(1, 0).at(step)?;
    let gid = ctx.query_gid(1, 0).at(step)?;
    expect(
        step,
        e.gid == gid && e.index == 0 && e.port == 1 && e.netdev_ifindex == 0,
        "entry 0 is not GID 0 of port 1",
    )?;
    expect(
        step,
        gid.0[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0],
        "not link-local",
    )?;
    expect(
        step,
        e.gid_type == rverbs::GidType::Ib,
        "the GID type is not InfiniBand",
    )?;
    pass(step);
    let step = "query_gid_empty";
    for (port, index) in [(1, 1), (2, 0)] {
        match ctx.query_gid_entry(port, index) {
            Err(Error::InvalidArgument(_)) => {}
            other => return fail(step, format!("port {port} index {index}: {other:?}")),
        }
    }
    pass_note(
        step,
        "InvalidArgument for the empty slot (ENODATA) and the missing port (EINVAL)",
    );
    let step = "query_gid_table";
    let t = ctx.query_gid_table().at(step)?;
    expect(step, t.len() == 1, "not exactly one valid entry")?;
    expect(
        step,
        t[0].gid == gid && t[0].index == 0 && t[0].port == 1,
        "the entry is not GID 0 of port 1",
    )?;
    pass(step);

    drop(qa);
    drop(qb);
    drop(dmr);
    drop(mr);
    pass_note("dereg_dmabuf_mr", "by Drop");
    drop(cqa);
    drop(cqb);
    drop(pd);
    drop(ctx);
    pass("close");
    Ok(())
}

fn main() -> ExitCode {
    main_with(run)
}
