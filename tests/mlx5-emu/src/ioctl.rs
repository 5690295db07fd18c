//! The `RDMA_VERBS_IOCTL` method channel of the emulated device, decoded as
//! the kernel's `uverbs_ioctl.c` does, with the methods rdma-core and our
//! library use:
//!
//! - DEVICE `INVOKE_WRITE`: a `write()` command carried by attributes; it
//!   runs through the same handlers as `write()` (`dispatch::execute`)
//!   and is recorded as the `write` record that `write()` would have made
//!   for the same command. Once this answers, libibverbs sends every
//!   write-style command this way (`has_ioctl_write`), as on a real kernel.
//! - DEVICE `QUERY_PORT`, `QUERY_GID_TABLE`, `QUERY_GID_ENTRY`.
//! - MR `REG_DMABUF_MR` (memory: [`crate::dmabuf`]) and `ADVISE_MR` (the
//!   emulated device has no on-demand paging, so mlx5 has no advice:
//!   `EOPNOTSUPP`, after the attributes checked out).
//!
//! Every other object or method is `EPROTONOSUPPORT`, what a kernel
//! without it answers, so libibverbs falls back to the `write()` form
//! command by command (`execute_ioctl_fallback`).
//!
//! The kernel's rules, in its order: a request other than
//! `RDMA_VERBS_IOCTL` is `ENOTTY`; an unreadable header `EFAULT`; a length
//! over a page or not matching `num_attrs` `EINVAL`; non-zero reserved
//! header fields `EPROTONOSUPPORT`; a `driver_id` other than mlx5's
//! `EINVAL`; an unknown object/method `EPROTONOSUPPORT`. Then each
//! attribute in the caller's order: unknown and mandatory
//! `EPROTONOSUPPORT` (unknown and optional: ignored); twice `EINVAL`;
//! an input longer than its type with non-zero bytes past it `EOPNOTSUPP`
//! (where the type allows trailing bytes), otherwise a length outside the
//! type's `EINVAL`; non-zero `attr_data` `EINVAL`; an object handle with a
//! length, or naming nothing (`ENOENT`) or another kind of object
//! (`EINVAL`); object handles before a context exists `EINVAL`; pointers
//! to unmapped memory `EFAULT`. A mandatory attribute missing is `EINVAL`.
//! Then the method. Outputs it wrote get `UVERBS_ATTR_F_VALID_OUTPUT` in
//! the caller's array, a created object its handle in the attribute's
//! `data`.
//!
//! Every call that reaches a known method is recorded
//! ([`record::ioctl_command`]: the attributes in the caller's order, the
//! flags as given, inputs as bytes, outputs as lengths); `INVOKE_WRITE` as
//! its `write` record instead (see above).

use libc::{c_int, c_ulong, c_void};
use rverbs_abi::cmd::{CmdHdr, ExCmdHdr, IB_USER_VERBS_CMD_FLAG_EXTENDED};
use rverbs_abi::device::{
    GidEntry, IB_UVERBS_GID_TYPE_IB, IB_UVERBS_GID_TYPE_ROCE_V1, IB_UVERBS_GID_TYPE_ROCE_V2,
};
use rverbs_abi::ioctl::{
    advise_mr_attr as am, device_method as dm, invoke_write_attr as iw, mr_method, object,
    query_gid_entry_attr as ge, query_gid_table_attr as gt, query_port_attr as qp,
    reg_dmabuf_mr_attr as rd, Attr, IoctlHdr, QUERY_PORT_RESP_EX_LEN, RDMA_VERBS_IOCTL,
    UVERBS_ATTR_F_MANDATORY, UVERBS_ATTR_F_VALID_OUTPUT, UVERBS_ATTR_UHW_IN, UVERBS_ATTR_UHW_OUT,
};
use rverbs_abi::mr::AccessFlags;
use rverbs_abi::Errno;
use zerocopy::IntoBytes;

use crate::emu::{self, Emu, Mr, ObjKind};
use crate::mem::{self, UserBuf};
use crate::record::{self, AttrData};
use crate::{cdev, device, dispatch, dmabuf, log};

/// The kernel's `PAGE_SIZE`: the longest ioctl header plus attributes.
const PAGE: usize = 4096;
/// `RDMA_DRIVER_MLX5`: the `driver_id` every call must carry.
pub const RDMA_DRIVER_MLX5: u32 = 1;
const HDR: usize = size_of::<IoctlHdr>();
const ATTR: usize = size_of::<Attr>();

/// What an attribute is, as the kernel's method declarations say.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// An object handle of kind `of`; `new`: the method creates it.
    Idr { of: ObjKind, new: bool },
    /// Input bytes: at least `min`, at most `len` unless `zero_trailing`
    /// (then longer is fine when the bytes past `len` are zero).
    In {
        min: u16,
        len: u16,
        zero_trailing: bool,
    },
    /// An output buffer, with the same length rules.
    Out {
        min: u16,
        len: u16,
        zero_trailing: bool,
    },
}

/// `UVERBS_ATTR_CONST_IN`: a u64.
const CONST_IN: Kind = Kind::In {
    min: 8,
    len: 8,
    zero_trailing: false,
};
/// `UVERBS_ATTR_FLAGS_IN`: a u32 or u64.
const FLAGS_IN: Kind = Kind::In {
    min: 4,
    len: 8,
    zero_trailing: false,
};
/// `UVERBS_ATTR_TYPE(u64)` input.
const U64_IN: Kind = Kind::In {
    min: 8,
    len: 8,
    zero_trailing: false,
};
/// `UVERBS_ATTR_TYPE(u32)` input.
const U32_IN: Kind = Kind::In {
    min: 4,
    len: 4,
    zero_trailing: false,
};
/// `UVERBS_ATTR_TYPE(u32)` output.
const U32_OUT: Kind = Kind::Out {
    min: 4,
    len: 4,
    zero_trailing: false,
};
/// `UVERBS_ATTR_TYPE(u64)` output.
const U64_OUT: Kind = Kind::Out {
    min: 8,
    len: 8,
    zero_trailing: false,
};

/// One attribute of a method's declaration.
#[derive(Debug, Clone, Copy)]
struct Spec {
    id: u16,
    kind: Kind,
    mandatory: bool,
}

const fn spec(id: u16, kind: Kind, mandatory: bool) -> Spec {
    Spec {
        id,
        kind,
        mandatory,
    }
}

/// `UVERBS_ATTR_UHW()`: optional driver input and output of any length.
const UHW: [Spec; 2] = [
    spec(
        UVERBS_ATTR_UHW_IN,
        Kind::In {
            min: 0,
            len: u16::MAX,
            zero_trailing: false,
        },
        false,
    ),
    spec(
        UVERBS_ATTR_UHW_OUT,
        Kind::Out {
            min: 0,
            len: u16::MAX,
            zero_trailing: false,
        },
        false,
    ),
];

type Handler = fn(&mut Emu, &mut Bundle) -> Result<(), Errno>;

/// A method: its name, attributes and handler.
struct Method {
    name: &'static str,
    attrs: &'static [Spec],
    run: Handler,
}

const INVOKE_WRITE: &[Spec] = &[
    spec(
        iw::CORE_IN,
        Kind::In {
            min: 4,
            len: u16::MAX,
            zero_trailing: false,
        },
        false,
    ),
    spec(
        iw::CORE_OUT,
        Kind::Out {
            min: 0,
            len: u16::MAX,
            zero_trailing: false,
        },
        false,
    ),
    spec(iw::WRITE_CMD, CONST_IN, true),
    UHW[0],
    UHW[1],
];

const QUERY_PORT: &[Spec] = &[
    spec(qp::PORT_NUM, CONST_IN, true),
    spec(
        qp::RESP,
        Kind::Out {
            min: QUERY_PORT_RESP_EX_LEN as u16,
            len: QUERY_PORT_RESP_EX_LEN as u16,
            zero_trailing: true,
        },
        true,
    ),
];

const QUERY_GID_TABLE: &[Spec] = &[
    spec(gt::ENTRY_SIZE, CONST_IN, true),
    spec(gt::FLAGS, FLAGS_IN, false),
    spec(
        gt::RESP_ENTRIES,
        Kind::Out {
            min: 0,
            len: u16::MAX,
            zero_trailing: false,
        },
        true,
    ),
    spec(gt::RESP_NUM_ENTRIES, U64_OUT, true),
];

const GID_ENTRY_LEN: u16 = size_of::<GidEntry>() as u16;

const QUERY_GID_ENTRY: &[Spec] = &[
    spec(ge::PORT, CONST_IN, true),
    spec(ge::GID_INDEX, CONST_IN, true),
    spec(ge::FLAGS, FLAGS_IN, true),
    spec(
        ge::RESP_ENTRY,
        Kind::Out {
            min: GID_ENTRY_LEN,
            len: GID_ENTRY_LEN,
            zero_trailing: true,
        },
        true,
    ),
];

const ADVISE_MR: &[Spec] = &[
    spec(
        am::PD_HANDLE,
        Kind::Idr {
            of: ObjKind::Pd,
            new: false,
        },
        true,
    ),
    spec(am::ADVICE, CONST_IN, true),
    spec(am::FLAGS, FLAGS_IN, true),
    spec(
        am::SGE_LIST,
        Kind::In {
            min: 16,
            len: u16::MAX,
            zero_trailing: false,
        },
        true,
    ),
];

const REG_DMABUF_MR: &[Spec] = &[
    spec(
        rd::HANDLE,
        Kind::Idr {
            of: ObjKind::Mr,
            new: true,
        },
        true,
    ),
    spec(
        rd::PD_HANDLE,
        Kind::Idr {
            of: ObjKind::Pd,
            new: false,
        },
        true,
    ),
    spec(rd::OFFSET, U64_IN, true),
    spec(rd::LENGTH, U64_IN, true),
    spec(rd::IOVA, U64_IN, true),
    spec(rd::FD, U32_IN, true),
    spec(rd::ACCESS_FLAGS, FLAGS_IN, false),
    spec(rd::RESP_LKEY, U32_OUT, true),
    spec(rd::RESP_RKEY, U32_OUT, true),
];

/// The method table: what the emulated mlx5 answers.
fn method(object_id: u16, method_id: u16) -> Option<Method> {
    let m = |name, attrs, run| Some(Method { name, attrs, run });
    match (object_id, method_id) {
        (object::DEVICE, dm::INVOKE_WRITE) => m("INVOKE_WRITE", INVOKE_WRITE, invoke_write),
        (object::DEVICE, dm::QUERY_PORT) => m("QUERY_PORT", QUERY_PORT, query_port),
        (object::DEVICE, dm::QUERY_GID_TABLE) => {
            m("QUERY_GID_TABLE", QUERY_GID_TABLE, query_gid_table)
        }
        (object::DEVICE, dm::QUERY_GID_ENTRY) => {
            m("QUERY_GID_ENTRY", QUERY_GID_ENTRY, query_gid_entry)
        }
        (object::MR, mr_method::ADVISE_MR) => m("ADVISE_MR", ADVISE_MR, advise_mr),
        (object::MR, mr_method::REG_DMABUF_MR) => m("REG_DMABUF_MR", REG_DMABUF_MR, reg_dmabuf_mr),
        _ => None,
    }
}

/// One attribute as given, and what processing it found.
#[derive(Debug)]
struct Given {
    /// Index in the caller's array.
    idx: usize,
    /// The attribute as the caller wrote it.
    attr: Attr,
    /// Its declaration (`None`: unknown and optional, ignored).
    spec: Option<Spec>,
    /// Input bytes (inline or copied from the pointer); the handle's 8
    /// bytes for an object attribute.
    bytes: Vec<u8>,
}

/// A call being executed: its context and attributes.
struct Bundle {
    ctx: u64,
    fd: c_int,
    /// User address of the caller's attribute array.
    user_attrs: u64,
    given: Vec<Given>,
    /// Indices (in the caller's array) of outputs written.
    written: Vec<usize>,
    /// A created object: its attribute's index and handle.
    created: Option<(usize, u32)>,
    /// What the log line says.
    detail: String,
}

impl Bundle {
    fn get(&self, id: u16) -> Option<&Given> {
        self.given
            .iter()
            .find(|g| g.attr.attr_id == id && g.spec.is_some())
    }

    /// Input bytes of `id`.
    fn input(&self, id: u16) -> Option<&[u8]> {
        self.get(id).map(|g| g.bytes.as_slice())
    }

    /// A `UVERBS_ATTR_CONST_IN` value of at most `max` (`_uverbs_get_const`:
    /// negative as an s64, or above `max`, is `EINVAL`; absent `ENOENT`).
    fn const_in(&self, id: u16, max: u64) -> Result<u64, Errno> {
        let v = self.u64_in(id).ok_or(Errno::ENOENT)?;
        if (v as i64) < 0 || v > max {
            return Err(Errno::EINVAL);
        }
        Ok(v)
    }

    /// An exactly-8-byte input.
    fn u64_in(&self, id: u16) -> Option<u64> {
        let b = self.input(id)?;
        Some(u64::from_ne_bytes(b.try_into().ok()?))
    }

    /// An exactly-4-byte input.
    fn u32_in(&self, id: u16) -> Option<u32> {
        let b = self.input(id)?;
        Some(u32::from_ne_bytes(b.try_into().ok()?))
    }

    /// `uverbs_get_flags32`: absent is 0; 4 or 8 bytes; bits outside
    /// `allowed` (or above 32) are `EINVAL`.
    fn flags32(&self, id: u16, allowed: u32) -> Result<u32, Errno> {
        let Some(b) = self.input(id) else {
            return Ok(0);
        };
        let v = match b.len() {
            8 => u64::from_ne_bytes(b.try_into().map_err(|_| Errno::EINVAL)?),
            4 => u64::from(u32::from_ne_bytes(b.try_into().map_err(|_| Errno::EINVAL)?)),
            _ => return Err(Errno::EINVAL),
        };
        let v = u32::try_from(v).map_err(|_| Errno::EINVAL)?;
        if v & !allowed != 0 {
            return Err(Errno::EINVAL);
        }
        Ok(v)
    }

    /// The handle of object attribute `id`.
    fn handle(&self, id: u16) -> Option<u32> {
        self.u64_in(id).and_then(|v| u32::try_from(v).ok())
    }

    /// Output buffer `id` (validated when the attribute was processed).
    fn out(&self, id: u16) -> Option<(usize, UserBuf)> {
        let g = self.get(id)?;
        matches!(g.spec?.kind, Kind::Out { .. }).then_some((
            g.idx,
            UserBuf {
                addr: g.attr.data,
                len: usize::from(g.attr.len),
            },
        ))
    }

    /// `uverbs_copy_to`: `min(len, bytes)` of `bytes` into output `id`;
    /// with `zero`, the rest of the buffer cleared
    /// (`uverbs_copy_to_struct_or_zero`). `ENOENT` if absent.
    fn put(&mut self, id: u16, bytes: &[u8], zero: bool) -> Result<(), Errno> {
        let (idx, buf) = self.out(id).ok_or(Errno::ENOENT)?;
        buf.put_bytes(bytes, zero);
        self.written.push(idx);
        Ok(())
    }

    /// Notes a log detail (only when logging).
    fn note(&mut self, args: std::fmt::Arguments<'_>) {
        if log::enabled() {
            use std::fmt::Write as _;
            if !self.detail.is_empty() {
                self.detail.push(' ');
            }
            let _ = self.detail.write_fmt(args);
        }
    }

    /// Writes back what the kernel writes into the caller's array: the
    /// created object's handle, and the valid-output flag of every output
    /// written.
    fn write_back(&self) {
        let at = |idx: usize, field: usize| self.user_attrs + (idx * ATTR + field) as u64;
        if let Some((idx, h)) = self.created {
            // SAFETY: the whole array was checked to be mapped before it
            // was read; `data` is at offset 8 of an attribute.
            unsafe { (at(idx, 8) as *mut u64).write_unaligned(u64::from(h)) };
        }
        for &idx in &self.written {
            let Some(g) = self.given.iter().find(|g| g.idx == idx) else {
                continue;
            };
            // SAFETY: as above; `flags` is at offset 4.
            unsafe {
                (at(idx, 4) as *mut u16).write_unaligned(g.attr.flags | UVERBS_ATTR_F_VALID_OUTPUT)
            };
        }
    }

    /// The bytes `write()` would have carried for this INVOKE_WRITE, if
    /// its attributes say enough (see [`record`]).
    fn write_bytes(&self) -> Option<Vec<u8>> {
        let command = u32::try_from(self.u64_in(iw::WRITE_CMD)?).ok()?;
        let core = self.input(iw::CORE_IN).unwrap_or(&[]);
        let drv = self.input(UVERBS_ATTR_UHW_IN).unwrap_or(&[]);
        let out = self.out(iw::CORE_OUT).map(|(_, b)| b).unwrap_or_default();
        let drv_out = self
            .out(UVERBS_ATTR_UHW_OUT)
            .map(|(_, b)| b)
            .unwrap_or_default();
        let mut v = Vec::new();
        if command & IB_USER_VERBS_CMD_FLAG_EXTENDED != 0 {
            let words = |n: usize| u16::try_from(n / 8).ok().filter(|_| n % 8 == 0);
            v.extend_from_slice(
                CmdHdr {
                    command,
                    in_words: words(core.len())?,
                    out_words: words(out.len)?,
                }
                .as_bytes(),
            );
            v.extend_from_slice(
                ExCmdHdr {
                    response: if out.len > 0 { out.addr } else { 0 },
                    provider_in_words: words(drv.len())?,
                    provider_out_words: words(drv_out.len)?,
                    cmd_hdr_reserved: 0,
                }
                .as_bytes(),
            );
        } else {
            let words = |n: usize| u16::try_from(n / 4).ok().filter(|_| n % 4 == 0);
            let total_in = size_of::<CmdHdr>() + core.len() + drv.len();
            v.extend_from_slice(
                CmdHdr {
                    command,
                    in_words: words(total_in)?,
                    out_words: words(out.len + drv_out.len)?,
                }
                .as_bytes(),
            );
        }
        v.extend_from_slice(core);
        v.extend_from_slice(drv);
        Some(v)
    }
}

/// Whether context `ctx` has its user context (GET_CONTEXT done); the
/// kernel's `ib_uverbs_get_ucontext` is `EINVAL` otherwise.
fn ucontext(emu: &Emu, ctx: u64) -> Result<(), Errno> {
    match emu.context(ctx).and_then(|c| c.ucontext()) {
        Some(_) => Ok(()),
        None => Err(Errno::EINVAL),
    }
}

/// Whether bytes `from..` of the input attribute are all zero
/// (`uverbs_is_attr_cleared`).
fn cleared(bytes: &[u8], from: usize) -> bool {
    bytes.get(from..).is_none_or(mem::all_zero)
}

/// Processes one attribute against its declaration (`uverbs_process_attr`):
/// reads inputs, checks outputs are mapped, looks handles up.
fn process(emu: &Emu, ctx: u64, s: &Spec, a: &Attr) -> Result<Vec<u8>, Errno> {
    let len = usize::from(a.len);
    match s.kind {
        Kind::In {
            min,
            len: max,
            zero_trailing,
        } => {
            let bytes = if len <= 8 {
                a.data.to_ne_bytes()[..len].to_vec()
            } else {
                mem::check(a.data, len)?;
                // SAFETY: the range was just checked to be mapped user
                // memory, which the caller handed to this ioctl.
                unsafe { std::slice::from_raw_parts(a.data as *const u8, len) }.to_vec()
            };
            if a.len > max && zero_trailing && !cleared(&bytes, usize::from(max)) {
                return Err(Errno::EOPNOTSUPP);
            }
            if a.len < min || (!zero_trailing && a.len > max) || a.attr_data != 0 {
                return Err(Errno::EINVAL);
            }
            Ok(bytes)
        }
        Kind::Out {
            min,
            len: max,
            zero_trailing,
        } => {
            if a.len < min || (!zero_trailing && a.len > max) || a.attr_data != 0 {
                return Err(Errno::EINVAL);
            }
            if len > 0 {
                mem::check(a.data, len)?;
            }
            Ok(Vec::new())
        }
        Kind::Idr { of, new } => {
            if a.attr_data != 0 || a.len != 0 {
                return Err(Errno::EINVAL);
            }
            ucontext(emu, ctx)?;
            if !new {
                let h = u32::try_from(a.data).map_err(|_| Errno::ENOENT)?;
                match emu.kind_of(ctx, h) {
                    Some(k) if k == of => {}
                    Some(_) => return Err(Errno::EINVAL),
                    None => return Err(Errno::ENOENT),
                }
            }
            Ok(a.data.to_ne_bytes().to_vec())
        }
    }
}

/// Executes one `ioctl()` on command fd `fd`. `None`: the fd is not (or no
/// longer) ours, pass the call through. Otherwise the return value or
/// errno.
///
/// # Safety
/// `arg` must be the argument the application passed to `ioctl()` (it is
/// range-checked before being read or written).
pub unsafe fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> Option<Result<c_int, Errno>> {
    let mut emu = emu::lock();
    let ctx = cdev::context_of(&mut emu, fd)?;
    if request != RDMA_VERBS_IOCTL {
        log::line(format_args!("ioctl fd {fd} request {request:#x} -> ENOTTY"));
        return Some(Err(Errno::ENOTTY));
    }
    let hdr_addr = arg as u64;
    if mem::check(hdr_addr, HDR).is_err() {
        return Some(Err(Errno::EFAULT));
    }
    // SAFETY: the header's range was just checked to be mapped.
    let hdr: IoctlHdr = unsafe { (arg as *const IoctlHdr).read_unaligned() };
    let n = usize::from(hdr.num_attrs);
    let length = usize::from(hdr.length);
    if length > PAGE || length != HDR + n * ATTR {
        return Some(Err(Errno::EINVAL));
    }
    if hdr.reserved1 != 0 || hdr.reserved2 != 0 {
        return Some(Err(Errno::EPROTONOSUPPORT));
    }
    if hdr.driver_id != RDMA_DRIVER_MLX5 {
        return Some(Err(Errno::EINVAL));
    }
    let (obj, meth) = (hdr.object_id, hdr.method_id);
    let Some(m) = method(obj, meth) else {
        log::line(format_args!(
            "ioctl object {obj:#x} method {meth:#x} -> EPROTONOSUPPORT"
        ));
        return Some(Err(Errno::EPROTONOSUPPORT));
    };
    let user_attrs = hdr_addr + HDR as u64;
    if mem::check(user_attrs, n * ATTR).is_err() {
        return Some(Err(Errno::EFAULT));
    }
    let raw: Vec<Attr> = (0..n)
        .map(|i| {
            // SAFETY: attribute `i` lies in the array checked just above.
            unsafe { ((user_attrs + (i * ATTR) as u64) as *const Attr).read_unaligned() }
        })
        .collect();
    let mut b = Bundle {
        ctx,
        fd,
        user_attrs,
        given: Vec::with_capacity(n),
        written: Vec::new(),
        created: None,
        detail: String::new(),
    };
    let result = run(&mut emu, &m, &raw, &mut b);
    if result.is_ok() {
        b.write_back();
    }
    drop(emu);
    record_call(obj, meth, &raw, &b, result);
    if log::enabled() {
        let sep = if b.detail.is_empty() { "" } else { " " };
        log::line(format_args!(
            "ioctl {}{sep}{} -> {}",
            m.name,
            b.detail,
            match result {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("{e:?}"),
            }
        ));
    }
    Some(result.map(|()| 0))
}

/// Processes the attributes (`ib_uverbs_run_method`) and runs the method.
fn run(emu: &mut Emu, m: &Method, raw: &[Attr], b: &mut Bundle) -> Result<(), Errno> {
    for (idx, a) in raw.iter().enumerate() {
        let Some(s) = m.attrs.iter().find(|s| s.id == a.attr_id) else {
            if a.flags & UVERBS_ATTR_F_MANDATORY != 0 {
                return Err(Errno::EPROTONOSUPPORT);
            }
            b.given.push(Given {
                idx,
                attr: *a,
                spec: None,
                bytes: Vec::new(),
            });
            continue;
        };
        if b.get(a.attr_id).is_some() {
            return Err(Errno::EINVAL);
        }
        let bytes = process(emu, b.ctx, s, a)?;
        b.given.push(Given {
            idx,
            attr: *a,
            spec: Some(*s),
            bytes,
        });
    }
    if m.attrs.iter().any(|s| s.mandatory && b.get(s.id).is_none()) {
        return Err(Errno::EINVAL);
    }
    (m.run)(emu, b)
}

/// Records the call: an INVOKE_WRITE as the `write` it carries where its
/// attributes say what that was, anything else as an `ioctl` record.
fn record_call(obj: u16, meth: u16, raw: &[Attr], b: &Bundle, result: Result<(), Errno>) {
    if (obj, meth) == (object::DEVICE, dm::INVOKE_WRITE) {
        if let Some(bytes) = b.write_bytes() {
            record::write_command(&bytes, result);
            return;
        }
    }
    let inline: Vec<[u8; 8]> = raw.iter().map(|a| a.data.to_ne_bytes()).collect();
    let attrs: Vec<(u16, u16, AttrData<'_>)> = raw
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let given = b.given.iter().find(|g| g.idx == i);
            let data = match given.and_then(|g| g.spec.map(|s| (g, s))) {
                Some((_, s)) if matches!(s.kind, Kind::Out { .. }) => {
                    AttrData::Out(usize::from(a.len))
                }
                Some((g, _)) => AttrData::In(&g.bytes),
                // Not processed (unknown, or after the failing one): the
                // inline value as given.
                None => AttrData::In(&inline[i]),
            };
            (a.attr_id, a.flags, data)
        })
        .collect();
    record::ioctl_command(obj, meth, &attrs, result);
}

// ---------------------------------------------------------------------------
// DEVICE methods.

/// `UVERBS_METHOD_INVOKE_WRITE`: the kernel's `uapi_get_method`, the
/// `ENOSPC` size checks, then the `write()` handler.
fn invoke_write(emu: &mut Emu, b: &mut Bundle) -> Result<(), Errno> {
    let command = b.const_in(iw::WRITE_CMD, u64::from(u32::MAX))? as u32;
    let (req, resp) = dispatch::command_sizes(command)?;
    let core = b.input(iw::CORE_IN).unwrap_or(&[]).to_vec();
    let drv = b.input(UVERBS_ATTR_UHW_IN).unwrap_or(&[]).to_vec();
    let out = b.out(iw::CORE_OUT);
    let drv_out = b.out(UVERBS_ATTR_UHW_OUT);
    let out_len = out.map_or(0, |(_, o)| o.len);
    if core.len() < req || out_len < resp {
        return Err(Errno::ENOSPC);
    }
    b.note(format_args!("command {command:#x}"));
    dispatch::execute(
        emu,
        b.ctx,
        b.fd,
        command,
        dispatch::Parts {
            core: &core,
            drv: &drv,
            out: out.map(|(_, o)| o).unwrap_or_default(),
            drv_out: drv_out.map(|(_, o)| o).unwrap_or_default(),
        },
    )?;
    // The handlers wrote both responses (uverbs_response, and the UHW
    // output the kernel flags after any method with driver data).
    b.written.extend(out.map(|(i, _)| i));
    b.written.extend(drv_out.map(|(i, _)| i));
    Ok(())
}

/// `UVERBS_METHOD_QUERY_PORT`: the legacy answer and `port_cap_flags2` (0).
fn query_port(emu: &mut Emu, b: &mut Bundle) -> Result<(), Errno> {
    ucontext(emu, b.ctx)?;
    let port = b.const_in(qp::PORT_NUM, u64::from(u8::MAX))? as u8;
    b.note(format_args!("port {port}"));
    if !device::port_valid(port) {
        return Err(Errno::EINVAL);
    }
    let mut resp = [0u8; QUERY_PORT_RESP_EX_LEN];
    let legacy = device::query_port();
    resp[..size_of_val(&legacy)].copy_from_slice(legacy.as_bytes());
    b.put(qp::RESP, &resp, true)
}

/// The valid entries of every port's GID table, in (port, index) order
/// (the sysfs `gids/<i>` files hold the same; all-zero is an empty slot).
fn gid_entries() -> Vec<GidEntry> {
    let mut v = Vec::new();
    for port in 1..=u32::from(device::NUM_PORTS) {
        for index in 0..device::gid_tbl_len() {
            if let Some(e) = gid_entry(port, index) {
                v.push(e);
            }
        }
    }
    v
}

/// The entry at `index` of `port` if valid, as the port's link layer has
/// it (device.rs): on InfiniBand type IB and no netdev; on RoCE the entry's
/// RoCE type and the netdev the sysfs tree names.
fn gid_entry(port: u32, index: u32) -> Option<GidEntry> {
    if port != 1 {
        return None;
    }
    let e = device::gid_entry(index)?;
    let half = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or_default());
    let (gid_type, netdev) = match e.kind {
        device::GidKind::Ib => (IB_UVERBS_GID_TYPE_IB, None),
        device::GidKind::RoceV1 => (IB_UVERBS_GID_TYPE_ROCE_V1, Some(device::PORT_NETDEV)),
        device::GidKind::RoceV2 => (IB_UVERBS_GID_TYPE_ROCE_V2, Some(device::PORT_NETDEV)),
    };
    let netdev_ifindex = netdev
        .and_then(|n| std::ffi::CString::new(n).ok())
        // SAFETY: `c` is a NUL-terminated string that outlives the call.
        .map_or(0, |c| unsafe { libc::if_nametoindex(c.as_ptr()) });
    Some(GidEntry {
        gid: [half(&e.gid[..8]), half(&e.gid[8..])],
        gid_index: index,
        port_num: port,
        gid_type,
        netdev_ifindex,
    })
}

/// `UVERBS_METHOD_QUERY_GID_TABLE`: every valid entry, each
/// `entry_size` bytes (cut or zero-padded); `EINVAL` if they do not fit.
fn query_gid_table(emu: &mut Emu, b: &mut Bundle) -> Result<(), Errno> {
    b.flags32(gt::FLAGS, 0)?;
    let entry_size = b.const_in(gt::ENTRY_SIZE, u64::MAX)?;
    if entry_size == 0 {
        return Err(Errno::EINVAL);
    }
    let (_, buf) = b.out(gt::RESP_ENTRIES).ok_or(Errno::ENOENT)?;
    let len = buf.len as u64;
    if len % entry_size != 0 || len / entry_size == 0 {
        return Err(Errno::EINVAL);
    }
    let max = len / entry_size;
    ucontext(emu, b.ctx)?;
    let entries = gid_entries();
    b.note(format_args!(
        "entry_size {entry_size} room {max} -> {}",
        entries.len()
    ));
    if entries.len() as u64 > max {
        return Err(Errno::EINVAL);
    }
    // `entry_size` divides a length below 64 KiB, so it fits a usize.
    let size = entry_size as usize;
    let mut bytes = vec![0u8; entries.len() * size];
    for (e, dst) in entries.iter().zip(bytes.chunks_exact_mut(size)) {
        let src = e.as_bytes();
        let n = src.len().min(size);
        dst[..n].copy_from_slice(&src[..n]);
    }
    b.put(gt::RESP_ENTRIES, &bytes, false)?;
    b.put(
        gt::RESP_NUM_ENTRIES,
        &(entries.len() as u64).to_ne_bytes(),
        false,
    )
}

/// `UVERBS_METHOD_QUERY_GID_ENTRY`: one entry; `EINVAL` for a port the
/// device lacks or an index past the table, `ENODATA` for an empty slot.
fn query_gid_entry(emu: &mut Emu, b: &mut Bundle) -> Result<(), Errno> {
    b.flags32(ge::FLAGS, 0)?;
    let port = b.const_in(ge::PORT, u64::from(u32::MAX))? as u32;
    let index = b.const_in(ge::GID_INDEX, u64::from(u32::MAX))? as u32;
    ucontext(emu, b.ctx)?;
    b.note(format_args!("port {port} index {index}"));
    if port == 0 || port > u32::from(device::NUM_PORTS) || index >= device::gid_tbl_len() {
        return Err(Errno::EINVAL);
    }
    let e = gid_entry(port, index).ok_or(Errno::ENODATA)?;
    b.put(ge::RESP_ENTRY, e.as_bytes(), true)
}

// ---------------------------------------------------------------------------
// MR methods.

/// `UVERBS_METHOD_ADVISE_MR`: the mlx5 driver offers advice only where the
/// device has on-demand paging, which the emulated one has not, so the
/// method finds no `advise_mr` and answers `EOPNOTSUPP`.
fn advise_mr(_emu: &mut Emu, b: &mut Bundle) -> Result<(), Errno> {
    b.note(format_args!(
        "pd {}",
        b.handle(am::PD_HANDLE).unwrap_or_default()
    ));
    Err(Errno::EOPNOTSUPP)
}

/// Access flags REG_DMABUF_MR accepts.
const DMABUF_ACCESS: u32 = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC)
    .union(AccessFlags::RELAXED_ORDERING)
    .bits();

/// `UVERBS_METHOD_REG_DMABUF_MR` as the uverbs core and mlx5 check it:
/// the page offsets of `offset` and `iova` agree, the access flags are
/// among [`DMABUF_ACCESS`] (remote write or atomic with local write), the
/// fd is a dmabuf (`EBADF`, `EINVAL`), and the range is not empty and lies
/// inside it (`EINVAL`).
fn reg_dmabuf_mr(emu: &mut Emu, b: &mut Bundle) -> Result<(), Errno> {
    let pd = b.handle(rd::PD_HANDLE).ok_or(Errno::EINVAL)?;
    let offset = b.u64_in(rd::OFFSET).ok_or(Errno::EINVAL)?;
    let length = b.u64_in(rd::LENGTH).ok_or(Errno::EINVAL)?;
    let iova = b.u64_in(rd::IOVA).ok_or(Errno::EINVAL)?;
    let fd = b.u32_in(rd::FD).ok_or(Errno::EINVAL)?;
    b.note(format_args!(
        "pd {pd} fd {fd} offset {offset:#x} len {length:#x} iova {iova:#x}"
    ));
    if offset % PAGE as u64 != iova % PAGE as u64 {
        return Err(Errno::EINVAL);
    }
    let access = b.flags32(rd::ACCESS_FLAGS, DMABUF_ACCESS)?;
    let needs_local_write = (AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC).bits();
    if access & needs_local_write != 0 && access & AccessFlags::LOCAL_WRITE.bits() == 0 {
        return Err(Errno::EINVAL);
    }
    // dma_buf_get: a u32 that is no fd number is not open.
    let fd = c_int::try_from(fd).map_err(|_| Errno::EBADF)?;
    let size = dmabuf::size(fd)?;
    let end = offset.checked_add(length).ok_or(Errno::EINVAL)?;
    if length == 0 || end > size {
        return Err(Errno::EINVAL);
    }
    let (backing, start) = dmabuf::map(fd, offset, length)?;
    let handle = emu.handle();
    let key = emu.new_mkey();
    emu.mrs.insert(
        handle,
        Mr {
            ctx: b.ctx,
            pd,
            start,
            length,
            hca_va: iova,
            access,
            lkey: key,
            rkey: key,
            backing: Some(backing),
        },
    );
    if let Some(p) = emu.pds.get_mut(&pd) {
        p.users = p.users.saturating_add(1);
    }
    let idx = b.get(rd::HANDLE).map_or(0, |g| g.idx);
    b.created = Some((idx, handle));
    b.put(rd::RESP_LKEY, &key.to_ne_bytes(), false)?;
    b.put(rd::RESP_RKEY, &key.to_ne_bytes(), false)?;
    b.note(format_args!("-> mr {handle} key {key:#x}"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads a plain-data value from the start of `bytes`.
    fn read<T: zerocopy::FromBytes + IntoBytes>(bytes: &[u8]) -> T {
        mem::read_padded(bytes)
    }

    fn attr(attr_id: u16, len: u16, data: u64) -> Attr {
        Attr {
            attr_id,
            len,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data,
        }
    }

    /// Sends `attrs` as method `obj`/`meth` on `fd`.
    fn call(fd: c_int, obj: u16, meth: u16, attrs: &mut [Attr]) -> Result<c_int, Errno> {
        call_hdr(fd, obj, meth, attrs, |_| {})
    }

    fn call_hdr(
        fd: c_int,
        obj: u16,
        meth: u16,
        attrs: &mut [Attr],
        edit: impl FnOnce(&mut IoctlHdr),
    ) -> Result<c_int, Errno> {
        let mut hdr = IoctlHdr {
            length: (HDR + attrs.len() * ATTR) as u16,
            object_id: obj,
            method_id: meth,
            num_attrs: attrs.len() as u16,
            driver_id: RDMA_DRIVER_MLX5,
            ..Default::default()
        };
        edit(&mut hdr);
        let mut buf = hdr.as_bytes().to_vec();
        buf.extend_from_slice(attrs.as_bytes());
        // SAFETY: a live buffer holding the header and attributes.
        let r =
            unsafe { ioctl(fd, RDMA_VERBS_IOCTL, buf.as_mut_ptr().cast()) }.expect("fd is ours");
        for (i, a) in attrs.iter_mut().enumerate() {
            *a = read(&buf[HDR + i * ATTR..]);
        }
        r
    }

    /// The header and attribute rules, and INVOKE_WRITE's size checks,
    /// on a fresh device fd (no context yet).
    #[test]
    fn header_and_attribute_rules() {
        let fd = cdev::open(libc::O_CLOEXEC).expect("open the emulated device");
        let qd = u64::from(rverbs_abi::cmd::nr::QUERY_DEVICE);
        // libibverbs' probe: QUERY_DEVICE without a core input is ENOSPC.
        let mut probe = [attr(iw::WRITE_CMD, 8, qd)];
        assert_eq!(
            call(fd, object::DEVICE, dm::INVOKE_WRITE, &mut probe),
            Err(Errno::ENOSPC)
        );
        // Another request number is no uverbs ioctl.
        // SAFETY: the argument is never read for a foreign request.
        let other = unsafe { ioctl(fd, 0x5401, std::ptr::null_mut()) };
        assert_eq!(other, Some(Err(Errno::ENOTTY)));
        // Header: wrong length, reserved fields, driver id.
        let mut a = [attr(iw::WRITE_CMD, 8, qd)];
        let r = call_hdr(fd, 0, 0, &mut a, |h| h.length += 1);
        assert_eq!(r, Err(Errno::EINVAL));
        let r = call_hdr(fd, 0, 0, &mut a, |h| h.reserved2 = 1);
        assert_eq!(r, Err(Errno::EPROTONOSUPPORT));
        let r = call_hdr(fd, 0, 0, &mut a, |h| h.driver_id = 4);
        assert_eq!(r, Err(Errno::EINVAL));
        // Unknown method; unknown mandatory attribute; unknown optional one.
        assert_eq!(call(fd, 0, 77, &mut a), Err(Errno::EPROTONOSUPPORT));
        let mut unknown = [attr(iw::WRITE_CMD, 8, qd), attr(9, 8, 0)];
        assert_eq!(call(fd, 0, 0, &mut unknown), Err(Errno::EPROTONOSUPPORT));
        unknown[1].flags = 0;
        assert_eq!(call(fd, 0, 0, &mut unknown), Err(Errno::ENOSPC));
        // Twice the same; a const of 4 bytes; attr_data set; none at all.
        let mut twice = [attr(iw::WRITE_CMD, 8, qd), attr(iw::WRITE_CMD, 8, qd)];
        assert_eq!(call(fd, 0, 0, &mut twice), Err(Errno::EINVAL));
        let mut short = [attr(iw::WRITE_CMD, 4, qd)];
        assert_eq!(call(fd, 0, 0, &mut short), Err(Errno::EINVAL));
        let mut reserved = [attr(iw::WRITE_CMD, 8, qd)];
        reserved[0].attr_data = 1;
        assert_eq!(call(fd, 0, 0, &mut reserved), Err(Errno::EINVAL));
        assert_eq!(call(fd, 0, 0, &mut []), Err(Errno::EINVAL));
        // Unknown write command; bits outside the mask.
        let mut bad = [attr(iw::WRITE_CMD, 8, 200)];
        assert_eq!(call(fd, 0, 0, &mut bad), Err(Errno::EOPNOTSUPP));
        bad[0].data = 0x100 | 3;
        assert_eq!(call(fd, 0, 0, &mut bad), Err(Errno::EINVAL));
        // Object methods before a context: EINVAL.
        let mut port = [0u8; QUERY_PORT_RESP_EX_LEN];
        let mut qpa = [
            attr(qp::PORT_NUM, 8, 1),
            attr(qp::RESP, port.len() as u16, port.as_mut_ptr() as u64),
        ];
        assert_eq!(
            call(fd, object::DEVICE, dm::QUERY_PORT, &mut qpa),
            Err(Errno::EINVAL)
        );
        cdev::close(fd, crate::fdtable::FdKind::Cmd);
        crate::real::close(fd);
    }

    #[test]
    fn gid_table_of_the_ib_port() {
        let t = gid_entries();
        assert_eq!(t.len(), 1, "only the link-local GID is valid");
        assert_eq!((t[0].gid_index, t[0].port_num, t[0].gid_type), (0, 1, 0));
        assert_eq!(t[0].gid.as_bytes(), device::gid(0).unwrap().as_slice());
        assert!(gid_entry(1, 1).is_none(), "an empty slot");
    }
}
