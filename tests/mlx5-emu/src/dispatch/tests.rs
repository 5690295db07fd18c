//! Tests of the command channel: the header rules, the object lifecycle
//! through `write()`, and each command's mlx5 driver-data rules with
//! the driver data libmlx5 sends.

use libc::c_int;
use rverbs_abi::ah::{CreateAh, DestroyAh};
use rverbs_abi::cmd::{nr, CmdHdr, ExCmdHdr, IB_USER_VERBS_CMD_FLAG_EXTENDED};
use rverbs_abi::cq::{CreateCq, ResizeCq};
use rverbs_abi::device::{GetContext, QueryPort};
use rverbs_abi::mlx5;
use rverbs_abi::pd::{AllocPd, DeallocPd};
use rverbs_abi::qp::{attr_mask as am, qp_state, qp_type, CreateQp, ModifyQp};
use rverbs_abi::srq::CreateSrq;
use rverbs_abi::Errno;
use zerocopy::{FromBytes, IntoBytes};

use super::lookup::cq_entries;
use super::rules::ucontext_bfregs;
use super::*;
use crate::emu;
use crate::fdtable::{self, FdKind};
use crate::{cdev, device};

fn cmd(command: u32, in_words: u16, out_words: u16, body: &[u8]) -> Vec<u8> {
    let mut v = CmdHdr {
        command,
        in_words,
        out_words,
    }
    .as_bytes()
    .to_vec();
    v.extend_from_slice(body);
    v
}

#[test]
fn header_rules() {
    let resp = [0u8; 64];
    let rp = (resp.as_ptr() as u64).to_ne_bytes();
    // QUERY_PORT: 24 bytes, 40-byte response.
    let mut body = rp.to_vec();
    body.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    assert!(parse(&cmd(nr::QUERY_PORT, 6, 10, &body)).is_ok());
    // in_words disagreeing with the length.
    assert_eq!(
        parse(&cmd(nr::QUERY_PORT, 5, 10, &body)).err(),
        Some(Errno::EINVAL)
    );
    // Response too short.
    assert_eq!(
        parse(&cmd(nr::QUERY_PORT, 6, 9, &body)).err(),
        Some(Errno::ENOSPC)
    );
    // Command too short.
    assert_eq!(
        parse(&cmd(nr::QUERY_PORT, 4, 10, &body[..8])).err(),
        Some(Errno::ENOSPC)
    );
    // Unknown command, and bits outside the command mask.
    assert_eq!(
        parse(&cmd(200, 6, 10, &body)).err(),
        Some(Errno::EOPNOTSUPP)
    );
    assert_eq!(
        parse(&cmd(0x100 | 2, 6, 10, &body)).err(),
        Some(Errno::EINVAL)
    );
    // Unmapped response pointer.
    let mut bad = 8u64.to_ne_bytes().to_vec();
    bad.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        parse(&cmd(nr::QUERY_PORT, 6, 10, &bad)).err(),
        Some(Errno::EFAULT)
    );
}

#[test]
fn extended_header_rules() {
    let resp = [0u8; 512];
    let ex = |in_words: u16, prov_in: u16, out_words: u16, prov_out: u16, response: u64| {
        let mut v = CmdHdr {
            command: IB_USER_VERBS_CMD_FLAG_EXTENDED | nr::EX_QUERY_DEVICE,
            in_words,
            out_words,
        }
        .as_bytes()
        .to_vec();
        v.extend_from_slice(
            ExCmdHdr {
                response,
                provider_in_words: prov_in,
                provider_out_words: prov_out,
                cmd_hdr_reserved: 0,
            }
            .as_bytes(),
        );
        v.extend_from_slice(&vec![0u8; usize::from(in_words + prov_in) * 8]);
        v
    };
    let r = resp.as_ptr() as u64;
    let good = ex(1, 0, 38, 13, r);
    let ok = parse(&good).expect("valid EX QUERY_DEVICE");
    assert_eq!(ok.out.len, 304);
    assert_eq!(ok.drv_out.len, 104);
    // Core response shorter than up to response_length.
    assert_eq!(parse(&ex(1, 0, 22, 0, r)).err(), Some(Errno::ENOSPC));
    // Response lengths without a response pointer.
    assert_eq!(parse(&ex(1, 0, 38, 0, 0)).err(), Some(Errno::EINVAL));
    // Length disagreeing with the word counts.
    let mut v = ex(1, 0, 38, 0, r);
    v.push(0);
    assert_eq!(parse(&v).err(), Some(Errno::EINVAL));
}

/// A legacy command: header, core struct, driver data.
fn legacy<Q: IntoBytes + zerocopy::Immutable>(
    command: u32,
    req: &Q,
    drv: &[u8],
    out_words: u16,
) -> Vec<u8> {
    let len = size_of::<CmdHdr>() + size_of::<Q>() + drv.len();
    let mut v = cmd(command, (len / 4) as u16, out_words, req.as_bytes());
    v.extend_from_slice(drv);
    v
}

fn run(fd: c_int, bytes: &[u8]) -> Result<usize, Errno> {
    // SAFETY: a live buffer of that length.
    unsafe { write(fd, bytes.as_ptr().cast(), bytes.len()) }.expect("fd is ours")
}

/// Commands through the `write()` entry point on a real emulated fd,
/// without libibverbs: context set-up, PD/AH lifecycle, the kernel's
/// errnos for wrong, stale and busy handles, and UAR mmap bounds.
#[test]
fn object_lifecycle_through_write() {
    let fd = cdev::open(libc::O_CLOEXEC).expect("open the emulated device");
    let mut resp = [0u32; 32];
    let rp = resp.as_mut_ptr() as u64;

    // Nothing but GET_CONTEXT before GET_CONTEXT.
    let alloc = legacy(nr::ALLOC_PD, &AllocPd { response: rp }, &[], 2);
    assert_eq!(run(fd, &alloc), Err(Errno::EINVAL));
    let ureq = mlx5::AllocUcontextReqV2 {
        total_num_bfregs: 16,
        num_low_latency_bfregs: 4,
        max_cqe_version: 1,
        ..Default::default()
    };
    let gc = legacy(
        nr::GET_CONTEXT,
        &GetContext { response: rp },
        ureq.as_bytes(),
        20,
    );
    assert_eq!(run(fd, &gc), Ok(gc.len()));
    let async_fd = resp[0] as c_int;
    assert_eq!(fdtable::kind(async_fd), FdKind::Event);
    let uresp = mlx5::AllocUcontextResp::read_from_bytes(resp[2..20].as_bytes()).unwrap();
    assert_eq!((uresp.tot_bfregs, uresp.cqe_version), (16, 1));
    assert_eq!(uresp.response_length, 72);
    assert_eq!(run(fd, &gc), Err(Errno::EINVAL), "a second GET_CONTEXT");

    // UAR pages 0..8 map; page 8 and other commands do not.
    // SAFETY: fresh mappings of our memfd, unmapped below.
    unsafe {
        let map = |off: libc::off_t| {
            cdev::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                off,
            )
            .expect("fd is ours")
        };
        let p = map(7 * 4096).expect("UAR page 7");
        p.cast::<u64>().write_volatile(1);
        assert_eq!(map(8 * 4096), Err(Errno::EINVAL));
        assert_eq!(map(5 << 20), Err(Errno::EINVAL), "core clock page");
        cdev::munmap(p, 4096);
        libc::munmap(p, 4096);
    }

    assert_eq!(run(fd, &alloc), Ok(alloc.len()));
    let pd = resp[0];
    let ah = |port: u8, global: u8, sgid: u8| CreateAh {
        response: rp,
        pd_handle: pd,
        attr: rverbs_abi::ah::AhAttr {
            dlid: 1,
            port_num: port,
            is_global: global,
            grh: rverbs_abi::ah::GlobalRoute {
                sgid_index: sgid,
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let bad_port = legacy(nr::CREATE_AH, &ah(2, 0, 0), &[], 5);
    assert_eq!(run(fd, &bad_port), Err(Errno::EINVAL));
    let bad_gid = legacy(nr::CREATE_AH, &ah(1, 1, 9), &[], 5);
    assert_eq!(run(fd, &bad_gid), Err(Errno::EINVAL));
    let good = legacy(nr::CREATE_AH, &ah(1, 0, 0), &[], 5);
    assert_eq!(run(fd, &good), Ok(good.len()));
    let ah_handle = resp[0];
    assert_eq!(resp[1], 16, "mlx5 response_length");

    let destroy_ah = |h: u32| legacy(nr::DESTROY_AH, &DestroyAh { ah_handle: h }, &[], 0);
    let dealloc = legacy(nr::DEALLOC_PD, &DeallocPd { pd_handle: pd }, &[], 0);
    assert_eq!(run(fd, &destroy_ah(pd)), Err(Errno::EINVAL), "a PD handle");
    assert_eq!(run(fd, &dealloc), Err(Errno::EBUSY), "PD used by the AH");
    assert_eq!(run(fd, &destroy_ah(ah_handle)), Ok(12));
    assert_eq!(run(fd, &destroy_ah(ah_handle)), Err(Errno::ENOENT), "stale");
    assert_eq!(run(fd, &dealloc), Ok(12));

    // Malformed: unknown command, short response, trailing garbage.
    assert_eq!(
        run(fd, &legacy(99, &DeallocPd::default(), &[], 0)),
        Err(Errno::EOPNOTSUPP)
    );
    let short = legacy(
        nr::QUERY_PORT,
        &QueryPort {
            response: rp,
            port_num: 1,
            ..Default::default()
        },
        &[],
        9,
    );
    assert_eq!(run(fd, &short), Err(Errno::ENOSPC));
    let trailing = legacy(
        nr::DEALLOC_PD,
        &DeallocPd { pd_handle: pd },
        &[1, 0, 0, 0],
        0,
    );
    assert_eq!(run(fd, &trailing), Err(Errno::EOPNOTSUPP));

    cdev::close(async_fd, FdKind::Event);
    crate::real::close(async_fd);
    cdev::close(fd, FdKind::Cmd);
    // Checked before the number is freed: once closed, a test running
    // beside this one may open the device and get the same number.
    assert_eq!(fdtable::kind(fd), FdKind::None);
    crate::real::close(fd);
}

// -----------------------------------------------------------------------
// mlx5 driver-data rules. Each test sends the driver data libmlx5
// (rdma-core 44) sends, as recorded by `cargo xtask mlx5` in
// target/mlx5/logs/cmd_seq.rdma-core.cmd (its user addresses replaced
// by buffers of this process), then malformed variants.

/// libmlx5's GET_CONTEXT driver data: 16 bfregs, 4 low-latency, DEVX,
/// CQE version 1, 4K UARs and dynamic UARs in `lib_caps`.
const LIBMLX5_UCTX: &str = "1000000004000000010000000000000001000000000000000300000000000000";
/// libmlx5's CREATE_CQ driver data (buffer and doorbell at 0 and 8).
const LIBMLX5_CQ: &str = "0080b028f955000000b0b028f955000040000000000000000000000000000000";
/// libmlx5's RESIZE_CQ driver data (buffer at 0).
const LIBMLX5_RESIZE_CQ: &str = "00e0b328f95500004000000000000000";
/// libmlx5's CREATE_SRQ driver data (buffer and doorbell at 0 and 8).
const LIBMLX5_SRQ: &str = "0000b128f955000080b0b028f955000000000000000000000000000000000000";
/// libmlx5's CREATE_QP driver data for an RC QP with 32 receive WQEs
/// of 32 bytes and 128 send basic blocks, scatter-to-CQE asked, user
/// index 0 (buffer and doorbell at 0 and 8).
const LIBMLX5_QP: &str = concat!(
    "00a0b128f9550000c0b0b028f9550000",
    "8000000020000000050000000200000000000000000000000000000000000000",
    "0000000000000000",
);

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn set_u32(v: &mut [u8], at: usize, x: u32) {
    v[at..at + 4].copy_from_slice(&x.to_ne_bytes());
}

fn set_u64(v: &mut [u8], at: usize, x: u64) {
    v[at..at + 8].copy_from_slice(&x.to_ne_bytes());
}

/// A zeroed, page-aligned buffer of `len` bytes that stays mapped for
/// the rest of the process (objects created in a test may outlive it).
fn user_mem(len: usize) -> u64 {
    let v = vec![0u8; len + 4096].leak();
    (v.as_mut_ptr() as u64 + 4095) & !4095
}

/// An opened device with a user context and a response buffer.
struct Ctx {
    fd: c_int,
    rp: u64,
}

impl Ctx {
    fn resp(&self, i: usize) -> u32 {
        // SAFETY: `rp` is a leaked buffer of 64 words.
        unsafe { (self.rp as *const u32).add(i).read() }
    }
    fn run(&self, bytes: &[u8]) -> Result<usize, Errno> {
        run(self.fd, bytes)
    }
    fn cmd<Q: IntoBytes + zerocopy::Immutable>(
        &self,
        command: u32,
        req: &Q,
        drv: &[u8],
        out_words: u16,
    ) -> Result<usize, Errno> {
        self.run(&legacy(command, req, drv, out_words))
    }
    fn alloc_pd(&self) -> u32 {
        let ok = self.cmd(nr::ALLOC_PD, &AllocPd { response: self.rp }, &[], 3);
        assert!(ok.is_ok());
        self.resp(0)
    }
    fn create_cq(&self, cqe: u32, drv: &[u8]) -> Result<u32, Errno> {
        let req = CreateCq {
            response: self.rp,
            cqe,
            comp_channel: -1,
            ..Default::default()
        };
        self.cmd(nr::CREATE_CQ, &req, drv, 4).map(|_| self.resp(0))
    }
    /// libmlx5's CREATE_CQ driver data with fresh ring and doorbell.
    fn cq_drv(entries: usize) -> Vec<u8> {
        let mut d = unhex(LIBMLX5_CQ);
        set_u64(&mut d, 0, user_mem(entries * 64));
        set_u64(&mut d, 8, user_mem(64));
        d
    }
}

/// Opens the device and creates a user context from `drv`.
fn open_ctx(drv: &[u8]) -> (Ctx, Result<usize, Errno>) {
    let fd = cdev::open(libc::O_CLOEXEC).expect("open the emulated device");
    let rp = vec![0u64; 32].leak().as_mut_ptr() as u64;
    let gc = legacy(nr::GET_CONTEXT, &GetContext { response: rp }, drv, 20);
    let r = run(fd, &gc);
    (Ctx { fd, rp }, r)
}

/// A context from libmlx5's own request (CQE version 1).
fn libmlx5_ctx() -> Ctx {
    let (c, r) = open_ctx(&unhex(LIBMLX5_UCTX));
    assert!(r.is_ok(), "libmlx5's GET_CONTEXT: {r:?}");
    c
}

/// mlx5_ib_alloc_ucontext: request sizes, flags, reserved fields and
/// the bfreg counts.
#[test]
fn ucontext_driver_data_rules() {
    let good = unhex(LIBMLX5_UCTX);
    let variant = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut d = good.clone();
        f(&mut d);
        open_ctx(&d).1.map(|_| ())
    };
    assert_eq!(variant(&|_| ()), Ok(()), "libmlx5's request");
    // Between the 8-byte original request and `max_cqe_version`.
    assert_eq!(variant(&|d| d.truncate(12)), Err(Errno::EINVAL));
    // The original request: CQE version 0.
    let (c, r) = open_ctx(&good[..8]);
    assert!(r.is_ok());
    let uresp = mlx5::AllocUcontextResp::read_from_bytes(
        // SAFETY: the leaked response buffer, 72 bytes of driver response.
        unsafe { std::slice::from_raw_parts((c.rp + 8) as *const u8, 72) },
    )
    .unwrap();
    assert_eq!(uresp.cqe_version, 0);
    // Unknown flags, a comp_mask, reserved fields.
    assert_eq!(variant(&|d| d[8] = 2), Err(Errno::EOPNOTSUPP));
    assert_eq!(variant(&|d| d[12] = 1), Err(Errno::EOPNOTSUPP));
    assert_eq!(variant(&|d| d[17] = 1), Err(Errno::EOPNOTSUPP));
    assert_eq!(variant(&|d| d[20] = 1), Err(Errno::EOPNOTSUPP));
    // Bytes past the struct are not read (6.12).
    assert_eq!(variant(&|d| d.extend_from_slice(&[7; 8])), Ok(()));
    // Low-latency bfregs: at most all but one.
    assert_eq!(variant(&|d| set_u32(d, 4, 16)), Err(Errno::EINVAL));
    // No bfregs; too many; too many with too many low-latency ones
    // (that check comes first); a count that wraps when rounded up.
    assert_eq!(variant(&|d| set_u32(d, 0, 0)), Err(Errno::EINVAL));
    assert_eq!(variant(&|d| set_u32(d, 0, 1000)), Err(Errno::ENOMEM));
    assert_eq!(
        variant(&|d| {
            set_u32(d, 0, 1000);
            set_u32(d, 4, 2000);
        }),
        Err(Errno::EINVAL)
    );
    assert_eq!(variant(&|d| set_u32(d, 0, u32::MAX)), Err(Errno::EINVAL));
    assert_eq!(ucontext_bfregs(15, 14), Ok(16));
    assert_eq!(ucontext_bfregs(u32::MAX - 1, 0), Err(Errno::ENOMEM));
}

/// create_cq_user and mlx5_ib_resize_cq: sizes, flags, reserved
/// fields, CQE size, buffer offset and the features not offered.
#[test]
fn cq_driver_data_rules() {
    let c = libmlx5_ctx();
    let variant = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut d = Ctx::cq_drv(128);
        f(&mut d);
        c.create_cq(127, &d).map(|_| ())
    };
    assert_eq!(variant(&|_| ()), Ok(()), "libmlx5's request");
    // Shorter than up to `flags`.
    assert_eq!(variant(&|d| d.truncate(20)), Err(Errno::EINVAL));
    assert_eq!(variant(&|d| d.truncate(24)), Ok(()));
    // Bytes past the struct are not read (6.12).
    assert_eq!(variant(&|d| d.extend_from_slice(&[9; 4])), Ok(()));
    // Unknown flag, CQE size, reserved fields.
    assert_eq!(variant(&|d| d[22] = 1 << 3), Err(Errno::EINVAL));
    assert_eq!(variant(&|d| set_u32(d, 16, 32)), Err(Errno::EINVAL));
    assert_eq!(variant(&|d| d[26] = 1), Err(Errno::EINVAL));
    assert_eq!(variant(&|d| d[28] = 1), Err(Errno::EINVAL));
    // A ring not on a 64-byte boundary; an unmapped one.
    assert_eq!(
        variant(&|d| set_u64(d, 0, user_mem(128 * 64 + 64) + 32)),
        Err(Errno::EINVAL)
    );
    assert_eq!(variant(&|d| set_u64(d, 0, 8)), Err(Errno::EFAULT));
    // Compression (only the value 1 asks), padding, real-time stamps,
    // a dynamic UAR page.
    assert_eq!(variant(&|d| d[20] = 1), Err(Errno::EOPNOTSUPP));
    assert_eq!(variant(&|d| d[20] = 2), Ok(()));
    assert_eq!(
        variant(&|d| {
            set_u32(d, 16, 128);
            d[22] = 1;
        }),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(variant(&|d| d[22] = 4), Err(Errno::EOPNOTSUPP));
    assert_eq!(variant(&|d| d[22] = 2), Err(Errno::EINVAL));

    // RESIZE_CQ from 128 to 256 entries.
    let cq = c.create_cq(127, &Ctx::cq_drv(128)).expect("CQ");
    let resize = |cqe: u32, f: &dyn Fn(&mut Vec<u8>)| {
        let mut d = unhex(LIBMLX5_RESIZE_CQ);
        set_u64(&mut d, 0, user_mem(256 * 64));
        f(&mut d);
        let req = ResizeCq {
            response: c.rp,
            cq_handle: cq,
            cqe,
        };
        c.cmd(nr::RESIZE_CQ, &req, &d, 4).map(|_| ())
    };
    // The same size needs no driver data.
    assert_eq!(resize(127, &|d| d.clear()), Ok(()));
    assert_eq!(resize(255, &|d| d.truncate(8)), Err(Errno::EINVAL));
    assert_eq!(resize(255, &|d| d[10] = 1), Err(Errno::EINVAL));
    assert_eq!(resize(255, &|d| d[12] = 1), Err(Errno::EINVAL));
    assert_eq!(resize(255, &|d| d[8] = 32), Err(Errno::EINVAL));
    assert_eq!(
        resize(255, &|d| set_u64(d, 0, user_mem(256 * 64 + 64) + 8)),
        Err(Errno::EINVAL)
    );
    assert_eq!(resize(255, &|_| ()), Ok(()), "libmlx5's request");
}

/// RESIZE_CQ against the CQEs outstanding (the producer counter minus
/// the doorbell record's consumer index): refused (EINVAL) unless
/// they and the RESIZE CQE fit both rings; the counter advances past
/// the RESIZE CQE.
#[test]
fn cq_resize_checks_outstanding() {
    let c = libmlx5_ctx();
    let mut d = Ctx::cq_drv(128);
    let db = user_mem(64);
    set_u64(&mut d, 8, db);
    let cq = c.create_cq(127, &d).expect("CQ");
    let set = |pi: u32, ci: u32| {
        emu::lock().cqs.get_mut(&cq).expect("the CQ").hw_pi = pi;
        // SAFETY: `db` is a live, aligned 64-byte allocation.
        unsafe { (db as *mut u32).write_volatile(ci.to_be()) };
    };
    let resize = |cqe: u32| {
        let mut d = unhex(LIBMLX5_RESIZE_CQ);
        set_u64(&mut d, 0, user_mem((cqe as usize + 1) * 64));
        let req = ResizeCq {
            response: c.rp,
            cq_handle: cq,
            cqe,
        };
        c.cmd(nr::RESIZE_CQ, &req, &d, 4).map(|_| ())
    };
    // 64 outstanding: not into 64 entries (no counter left for the
    // RESIZE CQE), into 128 (the same size: nothing asked) or 256.
    set(100, 36);
    assert_eq!(resize(63), Err(Errno::EINVAL));
    assert_eq!(emu::lock().cqs[&cq].hw_pi, 100, "refused: nothing written");
    assert_eq!(resize(255), Ok(()));
    assert_eq!(emu::lock().cqs[&cq].hw_pi, 101, "the RESIZE CQE's counter");
    // 63 outstanding (the RESIZE CQE among them) fit 64 entries.
    set(101, 38);
    assert_eq!(resize(63), Ok(()));
    // A full ring has no entry for the RESIZE CQE, even to grow.
    set(102 + 64, 102);
    assert_eq!(resize(127), Err(Errno::EINVAL));
    // Counters compare modulo 2^24.
    set(3, 0xff_fffe);
    assert_eq!(resize(7), Ok(()));
}

/// A CREATE_QP of `qp_type` with libmlx5's caps: RC/UC/UD, 16 send WRs
/// of 3 SGEs and 124 inline bytes, 32 receive WRs of 2 SGEs (none on an
/// SRQ).
fn create_qp(c: &Ctx, pd: u32, cq: u32, srq: Option<u32>, drv: &[u8]) -> Result<(), Errno> {
    let req = CreateQp {
        response: c.rp,
        pd_handle: pd,
        send_cq_handle: cq,
        recv_cq_handle: cq,
        srq_handle: srq.unwrap_or(0),
        max_send_wr: 16,
        max_recv_wr: if srq.is_some() { 0 } else { 32 },
        max_send_sge: 3,
        max_recv_sge: if srq.is_some() { 0 } else { 2 },
        max_inline_data: 124,
        qp_type: qp_type::RC,
        is_srq: u8::from(srq.is_some()),
        ..Default::default()
    };
    c.cmd(nr::CREATE_QP, &req, drv, 18).map(|_| ())
}

/// libmlx5's CREATE_QP driver data with a fresh buffer and doorbell,
/// `rq_bytes` of receive queue before 128 send basic blocks.
fn qp_drv(rq_bytes: usize) -> Vec<u8> {
    let mut d = unhex(LIBMLX5_QP);
    set_u64(&mut d, 0, user_mem(rq_bytes + 128 * 64));
    set_u64(&mut d, 8, user_mem(64));
    d
}

/// mlx5_ib_create_qp: udata sizes, reserved bytes, vendor flags, user
/// indexes (get_qp_user_index), the receive queue against the QP's
/// (set_rq_size), the send queue, the doorbell register and the buffer.
#[test]
fn qp_driver_data_rules() {
    let c = libmlx5_ctx();
    let pd = c.alloc_pd();
    let cq = c.create_cq(127, &Ctx::cq_drv(128)).expect("CQ");
    let variant = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut d = qp_drv(32 * 32);
        f(&mut d);
        create_qp(&c, pd, cq, None, &d)
    };
    assert_eq!(variant(&|_| ()), Ok(()), "libmlx5's request");
    // Shorter than up to `ece_options`; up to it is enough.
    assert_eq!(variant(&|d| d.truncate(44)), Err(Errno::EINVAL));
    assert_eq!(variant(&|d| d.truncate(48)), Ok(()));
    // `reserved` and every byte past the struct must be zero.
    assert_eq!(variant(&|d| d[54] = 1), Err(Errno::EINVAL));
    assert_eq!(
        variant(&|d| d.extend_from_slice(&[0, 0, 0, 1])),
        Err(Errno::EINVAL)
    );
    assert_eq!(variant(&|d| d.extend_from_slice(&[0; 8])), Ok(()));
    // Vendor flags: signatures and both scatter-to-CQE flags are
    // granted; DC, raw-packet and unknown ones are not; a chosen
    // bfreg or UAR page, or both, cannot be served.
    assert_eq!(variant(&|d| set_u32(d, 28, 1 | 2 | 1 << 8)), Ok(()));
    for bad in [1 << 2, 1 << 4, 1 << 5, 1 << 6, 1 << 9, 1 << 11, 1 << 12] {
        assert_eq!(
            variant(&|d| set_u32(d, 28, bad)),
            Err(Errno::EINVAL),
            "{bad:#x}"
        );
    }
    for uar in [1 << 3, 1 << 10, 1 << 3 | 1 << 10] {
        assert_eq!(
            variant(&|d| set_u32(d, 28, uar)),
            Err(Errno::EINVAL),
            "{uar:#x}"
        );
    }
    // CQE version 1: a 24-bit index other than the "none" one.
    assert_eq!(variant(&|d| set_u32(d, 32, 0xff_fffe)), Ok(()));
    assert_eq!(variant(&|d| set_u32(d, 32, 0xff_ffff)), Err(Errno::EINVAL));
    assert_eq!(variant(&|d| set_u32(d, 32, 0x100_0000)), Err(Errno::EINVAL));
    // Receive queue: a shift past 32; with signatures, a WQE smaller
    // than the signature; counts and sizes the device cannot build.
    assert_eq!(variant(&|d| set_u32(d, 24, 33)), Err(Errno::EINVAL));
    assert_eq!(
        variant(&|d| {
            set_u32(d, 20, 0);
            set_u32(d, 24, 3);
            set_u32(d, 28, 1);
        }),
        Err(Errno::EINVAL)
    );
    assert_eq!(variant(&|d| set_u32(d, 20, 48)), Err(Errno::EINVAL));
    assert_eq!(variant(&|d| set_u32(d, 24, 10)), Err(Errno::EINVAL));
    // Send queue: a power of two, at most the device's.
    assert_eq!(variant(&|d| set_u32(d, 16, 96)), Err(Errno::EINVAL));
    assert_eq!(variant(&|d| set_u32(d, 16, 1 << 16)), Err(Errno::EINVAL));
    // The buffer on a 64-byte boundary, mapped; a mapped doorbell.
    assert_eq!(
        variant(&|d| set_u64(d, 0, user_mem(32 * 32 + 128 * 64 + 64) + 16)),
        Err(Errno::EINVAL)
    );
    assert_eq!(variant(&|d| set_u64(d, 0, 16)), Err(Errno::EFAULT));
    assert_eq!(variant(&|d| set_u64(d, 8, 16)), Err(Errno::EFAULT));

    // A QP without a receive queue (on an SRQ, or with no receive WRs)
    // must describe none.
    let mut s = unhex(LIBMLX5_SRQ);
    set_u64(&mut s, 0, user_mem(64 * 64));
    set_u64(&mut s, 8, user_mem(64));
    let srq_req = CreateSrq {
        response: c.rp,
        pd_handle: pd,
        max_wr: 63,
        max_sge: 3,
        ..Default::default()
    };
    assert!(c.cmd(nr::CREATE_SRQ, &srq_req, &s, 6).is_ok());
    let srq = c.resp(0);
    let on_srq = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut d = qp_drv(0);
        set_u32(&mut d, 20, 0);
        set_u32(&mut d, 24, 0);
        f(&mut d);
        create_qp(&c, pd, cq, Some(srq), &d)
    };
    assert_eq!(on_srq(&|_| ()), Ok(()), "libmlx5's request on an SRQ");
    assert_eq!(on_srq(&|d| set_u32(d, 20, 32)), Err(Errno::EINVAL));
    assert_eq!(on_srq(&|d| set_u32(d, 24, 5)), Err(Errno::EINVAL));

    // CQE version 0: the library must send the "none" index.
    let (v0, r) = open_ctx(&unhex(LIBMLX5_UCTX)[..8]);
    assert!(r.is_ok());
    let pd0 = v0.alloc_pd();
    let cq0 = v0.create_cq(127, &Ctx::cq_drv(128)).expect("CQ");
    let v0_qp = |uidx: u32| {
        let mut d = qp_drv(32 * 32);
        set_u32(&mut d, 32, uidx);
        create_qp(&v0, pd0, cq0, None, &d)
    };
    assert_eq!(v0_qp(0), Err(Errno::EINVAL));
    assert_eq!(v0_qp(0xff_ffff), Ok(()));
}

/// mlx5_ib_modify_qp: the driver data is absent or at least up to
/// `ece_options`, zero past the struct, with no `comp_mask` and a zero
/// burst `reserved`.
#[test]
fn modify_qp_driver_data_rules() {
    let c = libmlx5_ctx();
    let pd = c.alloc_pd();
    let cq = c.create_cq(127, &Ctx::cq_drv(128)).expect("CQ");
    create_qp(&c, pd, cq, None, &qp_drv(32 * 32)).expect("QP");
    let qp = c.resp(0);
    // RESET to RESET: accepted and changes nothing, so every variant
    // meets the same QP.
    let modify = |drv: &[u8]| {
        let req = ModifyQp {
            qp_handle: qp,
            attr_mask: am::STATE,
            qp_state: qp_state::RESET,
            ..Default::default()
        };
        c.cmd(nr::MODIFY_QP, &req, drv, 0).map(|_| ())
    };
    let udata = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut d = vec![0u8; 16];
        f(&mut d);
        modify(&d)
    };
    assert_eq!(modify(&[]), Ok(()), "libmlx5's request");
    assert_eq!(modify(&[0; 8]), Err(Errno::EINVAL));
    assert_eq!(udata(&|_| ()), Ok(()));
    // Burst sizes and ECE options are accepted (and not used).
    assert_eq!(udata(&|d| set_u32(d, 4, 4096)), Ok(()));
    assert_eq!(udata(&|d| set_u32(d, 12, 0x1000_0001)), Ok(()));
    assert_eq!(udata(&|d| set_u32(d, 0, 1)), Err(Errno::EOPNOTSUPP));
    assert_eq!(udata(&|d| d[10] = 1), Err(Errno::EOPNOTSUPP));
    assert_eq!(udata(&|d| d.extend_from_slice(&[0; 4])), Ok(()));
    assert_eq!(
        udata(&|d| d.extend_from_slice(&[0, 1, 0, 0])),
        Err(Errno::EOPNOTSUPP)
    );
    // libmlx5's RESET to INIT.
    let init = ModifyQp {
        qp_handle: qp,
        attr_mask: am::STATE | am::PKEY_INDEX | am::PORT | am::ACCESS_FLAGS,
        qp_state: qp_state::INIT,
        port_num: 1,
        qp_access_flags: 0xf,
        ..Default::default()
    };
    assert_eq!(c.cmd(nr::MODIFY_QP, &init, &[], 0).map(|_| ()), Ok(()));
}

/// create_srq_user: reserved fields and trailing bytes; the flags and
/// user index of a basic SRQ are not checked; the buffer offset.
#[test]
fn srq_driver_data_rules() {
    let c = libmlx5_ctx();
    let pd = c.alloc_pd();
    let variant = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut d = unhex(LIBMLX5_SRQ);
        set_u64(&mut d, 0, user_mem(64 * 64));
        set_u64(&mut d, 8, user_mem(64));
        f(&mut d);
        let req = CreateSrq {
            response: c.rp,
            pd_handle: pd,
            max_wr: 63,
            max_sge: 3,
            ..Default::default()
        };
        c.cmd(nr::CREATE_SRQ, &req, &d, 6).map(|_| ())
    };
    assert_eq!(variant(&|_| ()), Ok(()), "libmlx5's request");
    assert_eq!(variant(&|d| d[20] = 1), Err(Errno::EINVAL));
    assert_eq!(variant(&|d| d[28] = 1), Err(Errno::EINVAL));
    assert_eq!(
        variant(&|d| d.extend_from_slice(&[0, 0, 1, 0])),
        Err(Errno::EINVAL)
    );
    assert_eq!(variant(&|d| d.extend_from_slice(&[0; 4])), Ok(()));
    // Fields not sent count as zero (6.12 has no minimum).
    assert_eq!(variant(&|d| d.truncate(16)), Ok(()));
    // Neither the flags nor the user index of a basic SRQ are read.
    assert_eq!(variant(&|d| set_u32(d, 16, 1 << 5)), Ok(()));
    assert_eq!(variant(&|d| set_u32(d, 24, 0x100_0000)), Ok(()));
    assert_eq!(
        variant(&|d| set_u64(d, 0, user_mem(64 * 64 + 64) + 48)),
        Err(Errno::EINVAL)
    );
    assert_eq!(variant(&|d| set_u64(d, 8, 16)), Err(Errno::EFAULT));
}

#[test]
fn cq_sizes() {
    assert_eq!(cq_entries(1), Ok(2));
    assert_eq!(cq_entries(0), Ok(1));
    assert_eq!(cq_entries(127), Ok(128));
    assert_eq!(cq_entries(128), Ok(256));
    assert_eq!(cq_entries(device::MAX_CQE), Ok(1 << device::LOG_MAX_CQ_SZ));
    assert_eq!(cq_entries(1 << device::LOG_MAX_CQ_SZ), Err(Errno::EINVAL));
    assert_eq!(cq_entries(u32::MAX), Err(Errno::EINVAL));
}
