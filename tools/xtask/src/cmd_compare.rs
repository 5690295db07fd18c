//! The control-path comparator of `cargo xtask mlx5`: parses two logs the
//! mlx5 emulator wrote with `MLX5_EMU_CMD_LOG` (format: tests/mlx5-emu/src/
//! record.rs) for the same fixed sequence of verbs, one run by rdma-core's
//! libibverbs + libmlx5 (`tests/mlx5-emu/c/cmd_seq.c`), one by our library
//! (`tests/src/bin/mlx5_cmd_seq.rs`), and compares every command field by
//! field: the uverbs header (and extended header), the core fields and the
//! mlx5 driver data, each named after the kernel's uapi structs
//! (`rdma/ib_user_verbs.h`, `rdma/mlx5-abi.h`), after the normalisations
//! listed in [`RULES`]. Bytes past the known fields are compared as
//! numbered 8-byte words.
//!
//! The two command sequences are aligned by command name (longest common
//! subsequence), so a command only one side sends is reported as such and
//! the rest still lines up.

use anyhow::{bail, Context, Result};

use super::wqe_compare::hex_bytes;

/// The normalisation rules: every way two logs may legitimately differ,
/// with why. Printed by `cargo xtask mlx5` into the report.
pub const RULES: &[(&str, &str)] = &[
    (
        "response",
        "the response pointer names a buffer on each library's stack: compared \
         is only whether there is one (the response sizes are compared in the \
         headers)",
    ),
    (
        "addresses",
        "user-space addresses (queue and doorbell-record buffers, an MR's start \
         and IOVA) belong to two different processes: compared are whether the \
         address is null and its offset in the 4 KiB page, which the kernel's \
         pinning and the device's alignment rules see",
    ),
    (
        "devx",
        "GET_CONTEXT flags bit 0 (MLX5_IB_ALLOC_UCTX_DEVX): libmlx5 always asks \
         for a DEVX-capable user context first (for mlx5dv_devx_* objects) and \
         retries without it if refused; we create no DEVX object",
    ),
    (
        "dyn-uar",
        "GET_CONTEXT lib_caps bit 1 (MLX5_LIB_CAP_DYN_UAR): libmlx5 can take \
         its UARs from the ioctl-only UAR object when the kernel allocates none \
         statically; we use the static UARs of the context, which every mlx5 \
         kernel allocates when this bit is clear",
    ),
    (
        "scatter-cqe",
        "CREATE_QP flags bit 1 (MLX5_QP_FLAG_SCATTER_CQE): libmlx5 asks by \
         default for small received payloads to be written into the CQE (a \
         data-path option, MLX5_SCATTER_TO_CQE); we keep every payload in the \
         receive buffer, which needs no flag",
    ),
    (
        "encodings",
        "QUERY_PORT, GET_CONTEXT, the CQ, QP and SRQ creations and the \
         destroys as ioctl methods (libibverbs, where the kernel has them) or \
         as write() commands (ours, which every kernel has): the same verbs; \
         compared are the outcome and the fields both encodings carry (the \
         port number, the queue sizes and types, the driver data)",
    ),
    (
        "ioctl-fallback",
        "an ioctl method only libibverbs sends, answered EPROTONOSUPPORT or \
         EOPNOTSUPP: the kernel (or the emulator) lacks it, and libibverbs \
         falls back to the write() command, which is compared",
    ),
    (
        "driver-methods",
        "a method of the driver's own namespace (object 0x1000 and up: mlx5's \
         DEVX) only libmlx5 sends: it reads device capabilities through DEVX \
         where the kernel offers it; we read what the core commands answer",
    ),
    (
        "invoke-write-probe",
        "a first QUERY_DEVICE only libibverbs sends, refused with ENOSPC: its \
         probe whether write commands may travel in the ioctl INVOKE_WRITE \
         method (they then do; the emulator records them as the write() \
         commands they carry); we send write() commands directly",
    ),
    (
        "ah-gid-check",
        "a QUERY_GID_ENTRY only we send, when an address handle has a GRH: we \
         check its sgid_index names a GID of the port (a clear error instead of \
         an address vector the HCA would reject later); read-only",
    ),
    (
        "init-queries",
        "an EX_QUERY_DEVICE or QUERY_PORT only libmlx5 sends, right after \
         GET_CONTEXT: libmlx5 queries the device and every port when the \
         context is opened (mlx5_init_context); we ask when a verb needs it and \
         keep what cannot change; read-only queries",
    ),
    (
        "ud-mtu",
        "a QUERY_PORT only we send, just before a MODIFY_QP that sets the port: \
         when a UD QP is bound to a port we learn its active MTU, against which \
         post_send checks each datagram (libmlx5 leaves an oversized datagram \
         to the HCA); a read-only query",
    ),
    (
        "async-event",
        "an ASYNC_EVENT_ALLOC only libibverbs sends, after GET_CONTEXT as an \
         ioctl method: that method makes no async event file, so libibverbs \
         asks for one; the GET_CONTEXT write() command we send makes it",
    ),
    (
        "gid-table-len",
        "a QUERY_PORT only we send, just before the QUERY_GID_ENTRY of \
         ibv_query_gid: we read the GID table's length first, to tell an index \
         past the table (EINVAL) from an empty slot (the zero GID); read-only",
    ),
    (
        "qpn",
        "QP numbers are the kernel's, new in every process: a MODIFY_QP's \
         dest_qp_num is compared as its offset from the lowest dest_qp_num of \
         its own sequence (both sequences connect the same QPs, created in the \
         same order)",
    ),
    (
        "srq-mmap-info",
        "MODIFY_SRQ driver data on rxe: the address where the kernel writes a \
         resized ring's mmap information; it reads it only for IB_SRQ_MAX_WR. \
         librxe passes it on every MODIFY_SRQ, we on a resize only: not \
         compared",
    ),
    (
        "user-handle",
        "`user_handle` is an opaque cookie the kernel only echoes back in \
         events; libibverbs puts its object's address there, we an index",
    ),
];

/// How a field is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Value for value.
    Val,
    /// A user-space address (rule `addresses`).
    Addr,
    /// A response pointer (rule `response`).
    Resp,
    /// A value compared without the bits of `mask` (rule `rule`).
    Masked(u64, &'static str),
    /// Not compared (rule `user-handle`).
    UserHandle,
    /// Not compared: the kernel does not read it here (the rule named).
    Unread(&'static str),
}

/// A named field of a command struct.
#[derive(Debug, Clone, Copy)]
struct F {
    name: &'static str,
    size: usize,
    kind: Kind,
}

const fn v(name: &'static str, size: usize) -> F {
    F {
        name,
        size,
        kind: Kind::Val,
    }
}

const fn a(name: &'static str) -> F {
    F {
        name,
        size: 8,
        kind: Kind::Addr,
    }
}

const fn resp() -> F {
    F {
        name: "response",
        size: 8,
        kind: Kind::Resp,
    }
}

const fn masked(name: &'static str, size: usize, mask: u64, rule: &'static str) -> F {
    F {
        name,
        size,
        kind: Kind::Masked(mask, rule),
    }
}

const fn uh() -> F {
    F {
        name: "user_handle",
        size: 8,
        kind: Kind::UserHandle,
    }
}

/// A command's layout: name, core fields, mlx5 driver-data fields, and
/// whether driver data may follow (legacy commands without it have none).
#[derive(Debug, Clone, Copy)]
struct Shape {
    name: &'static str,
    core: &'static [F],
    drv: &'static [F],
}

// Core command structs (`ib_user_verbs.h`), after the header.
const GET_CONTEXT: &[F] = &[resp()];
const QUERY_DEVICE: &[F] = &[resp()];
const QUERY_PORT: &[F] = &[resp(), v("port_num", 1), v("reserved", 7)];
const ALLOC_PD: &[F] = &[resp()];
const DEALLOC_PD: &[F] = &[v("pd_handle", 4)];
const REG_MR: &[F] = &[
    resp(),
    a("start"),
    v("length", 8),
    a("hca_va"),
    v("pd_handle", 4),
    v("access_flags", 4),
];
const DEREG_MR: &[F] = &[v("mr_handle", 4)];
const CREATE_COMP_CHANNEL: &[F] = &[resp()];
const CREATE_CQ: &[F] = &[
    resp(),
    uh(),
    v("cqe", 4),
    v("comp_vector", 4),
    v("comp_channel", 4),
    v("reserved", 4),
];
const RESIZE_CQ: &[F] = &[resp(), v("cq_handle", 4), v("cqe", 4)];
const DESTROY_CQ: &[F] = &[resp(), v("cq_handle", 4), v("reserved", 4)];
const CREATE_QP: &[F] = &[
    resp(),
    uh(),
    v("pd_handle", 4),
    v("send_cq_handle", 4),
    v("recv_cq_handle", 4),
    v("srq_handle", 4),
    v("max_send_wr", 4),
    v("max_recv_wr", 4),
    v("max_send_sge", 4),
    v("max_recv_sge", 4),
    v("max_inline_data", 4),
    v("sq_sig_all", 1),
    v("qp_type", 1),
    v("is_srq", 1),
    v("reserved", 1),
];
const QUERY_QP: &[F] = &[resp(), v("qp_handle", 4), v("attr_mask", 4)];
const MODIFY_QP: &[F] = &[
    v("dest.dgid", 16),
    v("dest.flow_label", 4),
    v("dest.dlid", 2),
    v("dest.reserved", 2),
    v("dest.sgid_index", 1),
    v("dest.hop_limit", 1),
    v("dest.traffic_class", 1),
    v("dest.sl", 1),
    v("dest.src_path_bits", 1),
    v("dest.static_rate", 1),
    v("dest.is_global", 1),
    v("dest.port_num", 1),
    v("alt_dest.dgid", 16),
    v("alt_dest.flow_label", 4),
    v("alt_dest.dlid", 2),
    v("alt_dest.reserved", 2),
    v("alt_dest.sgid_index", 1),
    v("alt_dest.hop_limit", 1),
    v("alt_dest.traffic_class", 1),
    v("alt_dest.sl", 1),
    v("alt_dest.src_path_bits", 1),
    v("alt_dest.static_rate", 1),
    v("alt_dest.is_global", 1),
    v("alt_dest.port_num", 1),
    v("qp_handle", 4),
    v("attr_mask", 4),
    v("qkey", 4),
    v("rq_psn", 4),
    v("sq_psn", 4),
    v("dest_qp_num", 4),
    v("qp_access_flags", 4),
    v("pkey_index", 2),
    v("alt_pkey_index", 2),
    v("qp_state", 1),
    v("cur_qp_state", 1),
    v("path_mtu", 1),
    v("path_mig_state", 1),
    v("en_sqd_async_notify", 1),
    v("max_rd_atomic", 1),
    v("max_dest_rd_atomic", 1),
    v("min_rnr_timer", 1),
    v("port_num", 1),
    v("timeout", 1),
    v("retry_cnt", 1),
    v("rnr_retry", 1),
    v("alt_port_num", 1),
    v("alt_timeout", 1),
    v("reserved", 2),
];
const DESTROY_QP: &[F] = &[resp(), v("qp_handle", 4), v("reserved", 4)];
const CREATE_SRQ: &[F] = &[
    resp(),
    uh(),
    v("pd_handle", 4),
    v("max_wr", 4),
    v("max_sge", 4),
    v("srq_limit", 4),
];
const MODIFY_SRQ: &[F] = &[
    v("srq_handle", 4),
    v("attr_mask", 4),
    v("max_wr", 4),
    v("srq_limit", 4),
];
const QUERY_SRQ: &[F] = &[resp(), v("srq_handle", 4), v("reserved", 4)];
const DESTROY_SRQ: &[F] = &[resp(), v("srq_handle", 4), v("reserved", 4)];
const CREATE_AH: &[F] = &[
    resp(),
    uh(),
    v("pd_handle", 4),
    v("reserved", 4),
    v("attr.grh.dgid", 16),
    v("attr.grh.flow_label", 4),
    v("attr.grh.sgid_index", 1),
    v("attr.grh.hop_limit", 1),
    v("attr.grh.traffic_class", 1),
    v("attr.grh.reserved", 1),
    v("attr.dlid", 2),
    v("attr.sl", 1),
    v("attr.src_path_bits", 1),
    v("attr.static_rate", 1),
    v("attr.is_global", 1),
    v("attr.port_num", 1),
    v("attr.reserved", 1),
];
const DESTROY_AH: &[F] = &[v("ah_handle", 4)];
// Extended commands (after both headers).
const EX_QUERY_DEVICE: &[F] = &[v("comp_mask", 4), v("reserved", 4)];
const EX_CREATE_CQ: &[F] = &[
    uh(),
    v("cqe", 4),
    v("comp_vector", 4),
    v("comp_channel", 4),
    v("comp_mask", 4),
    v("flags", 4),
    v("reserved", 4),
];

// mlx5 driver data (`mlx5-abi.h`).
const MLX5_ALLOC_UCONTEXT: &[F] = &[
    v("total_num_bfregs", 4),
    v("num_low_latency_bfregs", 4),
    masked("flags", 4, 1 << 0, "devx"),
    v("comp_mask", 4),
    v("max_cqe_version", 1),
    v("reserved0", 1),
    v("reserved1", 2),
    v("reserved2", 4),
    masked("lib_caps", 8, 1 << 1, "dyn-uar"),
];
const MLX5_CREATE_CQ: &[F] = &[
    a("buf_addr"),
    a("db_addr"),
    v("cqe_size", 4),
    v("cqe_comp_en", 1),
    v("cqe_comp_res_format", 1),
    v("flags", 2),
    v("uar_page_index", 2),
    v("reserved0", 2),
    v("reserved1", 4),
];
const MLX5_RESIZE_CQ: &[F] = &[
    a("buf_addr"),
    v("cqe_size", 2),
    v("reserved0", 2),
    v("reserved1", 4),
];
const MLX5_CREATE_QP: &[F] = &[
    a("buf_addr"),
    a("db_addr"),
    v("sq_wqe_count", 4),
    v("rq_wqe_count", 4),
    v("rq_wqe_shift", 4),
    masked("flags", 4, 1 << 1, "scatter-cqe"),
    v("uidx", 4),
    v("bfreg_index", 4),
    a("sq_buf_addr"),
    v("ece_options", 4),
    v("dci_streams.log_num_concurent", 1),
    v("dci_streams.log_num_errored", 1),
    v("reserved", 2),
];
const MLX5_MODIFY_QP: &[F] = &[
    v("comp_mask", 4),
    v("burst_info.max_burst_sz", 4),
    v("burst_info.typical_pkt_sz", 2),
    v("burst_info.reserved", 2),
    v("ece_options", 4),
];
const MLX5_CREATE_SRQ: &[F] = &[
    a("buf_addr"),
    a("db_addr"),
    v("flags", 4),
    v("reserved0", 4),
    v("uidx", 4),
    v("reserved1", 4),
];

/// `IB_USER_VERBS_CMD_FLAG_EXTENDED`.
const FLAG_EXTENDED: u32 = 0x8000_0000;

/// The layout of command `number` (legacy or extended).
fn shape(extended: bool, number: u32) -> Option<Shape> {
    let s = |name, core, drv| Some(Shape { name, core, drv });
    if extended {
        return match number {
            1 => s("EX_QUERY_DEVICE", EX_QUERY_DEVICE, &[]),
            18 => s("EX_CREATE_CQ", EX_CREATE_CQ, MLX5_CREATE_CQ),
            _ => None,
        };
    }
    match number {
        0 => s("GET_CONTEXT", GET_CONTEXT, MLX5_ALLOC_UCONTEXT),
        1 => s("QUERY_DEVICE", QUERY_DEVICE, &[]),
        2 => s("QUERY_PORT", QUERY_PORT, &[]),
        3 => s("ALLOC_PD", ALLOC_PD, &[]),
        4 => s("DEALLOC_PD", DEALLOC_PD, &[]),
        5 => s("CREATE_AH", CREATE_AH, &[]),
        8 => s("DESTROY_AH", DESTROY_AH, &[]),
        9 => s("REG_MR", REG_MR, &[]),
        13 => s("DEREG_MR", DEREG_MR, &[]),
        17 => s("CREATE_COMP_CHANNEL", CREATE_COMP_CHANNEL, &[]),
        18 => s("CREATE_CQ", CREATE_CQ, MLX5_CREATE_CQ),
        19 => s("RESIZE_CQ", RESIZE_CQ, MLX5_RESIZE_CQ),
        20 => s("DESTROY_CQ", DESTROY_CQ, &[]),
        24 => s("CREATE_QP", CREATE_QP, MLX5_CREATE_QP),
        25 => s("QUERY_QP", QUERY_QP, &[]),
        26 => s("MODIFY_QP", MODIFY_QP, MLX5_MODIFY_QP),
        27 => s("DESTROY_QP", DESTROY_QP, &[]),
        32 => s("CREATE_SRQ", CREATE_SRQ, MLX5_CREATE_SRQ),
        33 => s("MODIFY_SRQ", MODIFY_SRQ, &[]),
        34 => s("QUERY_SRQ", QUERY_SRQ, &[]),
        35 => s("DESTROY_SRQ", DESTROY_SRQ, &[]),
        _ => None,
    }
}

/// One decoded field: its qualified name, value as compared, and value
/// as shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// `hdr.*`, `ex.*`, `core.*` or `drv.*`.
    pub name: String,
    /// What is compared (after normalisation); `None`: not compared.
    pub key: Option<String>,
    /// The raw value, for the report.
    pub raw: String,
}

/// One recorded command, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The command's name (`CREATE_QP`, `ioctl 7/1`, ...).
    pub name: String,
    /// `ok` or the errno's name.
    pub result: String,
    /// Its fields, in order.
    pub fields: Vec<Value>,
    /// Sent as an ioctl method (not a `write()` command).
    pub ioctl: bool,
}

/// A field's raw value: a little-endian integer for 1, 2, 4 and 8 bytes,
/// the bytes in hex otherwise.
fn show(b: &[u8]) -> String {
    match b.len() {
        1 | 2 | 4 | 8 => {
            let mut x = [0u8; 8];
            x[..b.len()].copy_from_slice(b);
            format!("{:#x}", u64::from_le_bytes(x))
        }
        _ => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}

fn value(name: String, b: &[u8], kind: Kind) -> Value {
    let raw = show(b);
    let mut x = [0u8; 8];
    let n = b.len().min(8);
    x[..n].copy_from_slice(&b[..n]);
    let int = u64::from_le_bytes(x);
    let key = match kind {
        Kind::Val => Some(raw.clone()),
        Kind::UserHandle | Kind::Unread(_) => None,
        Kind::Resp => Some(if int == 0 { "null" } else { "a buffer" }.into()),
        Kind::Addr => Some(if int == 0 {
            "null".into()
        } else {
            format!("page offset {:#x}", int & 0xfff)
        }),
        Kind::Masked(mask, rule) => Some(format!(
            "{:#x} (without {mask:#x}, rule {rule})",
            int & !mask
        )),
    };
    Value { name, key, raw }
}

/// Decodes `bytes` as `fields` named `<prefix>.<field>`; bytes past them
/// become `<prefix>+<offset>` words of up to 8 bytes; a field the bytes
/// end inside is shown with what there is.
fn decode(out: &mut Vec<Value>, prefix: &str, bytes: &[u8], fields: &[F]) {
    let mut off = 0;
    for f in fields {
        if off >= bytes.len() {
            return;
        }
        let end = (off + f.size).min(bytes.len());
        out.push(value(
            format!("{prefix}.{}", f.name),
            &bytes[off..end],
            f.kind,
        ));
        off = end;
    }
    while off < bytes.len() {
        let end = (off + 8).min(bytes.len());
        out.push(value(
            format!("{prefix}+{off:#x}"),
            &bytes[off..end],
            Kind::Val,
        ));
        off = end;
    }
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    b.get(off..off + 2)
        .map_or(0, |x| u16::from_le_bytes([x[0], x[1]]))
}

/// Whose driver data a log carries: mlx5's is decoded field by field
/// (`rdma/mlx5-abi.h`), any other driver's as numbered 8-byte words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// `mlx5_ib`: the driver-data tables of this module.
    Mlx5,
    /// `rdma_rxe`: driver data as words but for MODIFY_SRQ's.
    Rxe,
    /// Another driver (EFA, ...): driver data as words.
    Other,
}

/// rxe's MODIFY_SRQ driver data (`struct rxe_modify_srq_cmd`).
const RXE_MODIFY_SRQ: &[F] = &[F {
    name: "mmap_info_addr",
    size: 8,
    kind: Kind::Unread("srq-mmap-info"),
}];

/// Decodes one `write` record's bytes.
fn decode_write(b: &[u8], result: &str, driver: Driver) -> Result<Command> {
    if b.len() < 8 {
        bail!("a write command of {} bytes", b.len());
    }
    let command = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let extended = command & FLAG_EXTENDED != 0;
    let number = command & 0xff;
    let mut fields = Vec::new();
    decode(
        &mut fields,
        "hdr",
        &b[..8],
        &[v("command", 4), v("in_words", 2), v("out_words", 2)],
    );
    let shape = shape(extended, number);
    let name = shape.map_or_else(|| format!("command {command:#x}"), |s| s.name.to_string());
    let (core, drv) = if extended {
        let ex_end = 24.min(b.len());
        decode(
            &mut fields,
            "ex",
            &b[8..ex_end],
            &[
                resp(),
                v("provider_in_words", 2),
                v("provider_out_words", 2),
                v("cmd_hdr_reserved", 4),
            ],
        );
        let rest = &b[ex_end..];
        let in_core = usize::from(u16_at(b, 4)) * 8;
        rest.split_at(in_core.min(rest.len()))
    } else {
        let body = &b[8..];
        // The core struct, then driver data (words past the table when the
        // command has no driver-data layout here).
        let core_len = shape.map_or(body.len(), |s| {
            s.core.iter().map(|f| f.size).sum::<usize>().min(body.len())
        });
        body.split_at(core_len)
    };
    let (cf, df) = shape.map_or((&[][..], &[][..]), |s| (s.core, s.drv));
    let df = match (driver, extended, number) {
        (Driver::Mlx5, ..) => df,
        (Driver::Rxe, false, 33) => RXE_MODIFY_SRQ,
        _ => &[],
    };
    decode(&mut fields, "core", core, cf);
    decode(&mut fields, "drv", drv, df);
    Ok(Command {
        name,
        result: result.to_string(),
        fields,
        ioctl: false,
    })
}

/// The name of ioctl method `method` of object `object` (hex, as
/// recorded), the write command's name where it is the same query.
fn ioctl_name(object: &str, method: &str) -> String {
    match (object, method) {
        ("0", "2") => "QUERY_PORT".into(),
        ("0", "5") => "QUERY_GID_TABLE".into(),
        ("0", "6") => "QUERY_GID_ENTRY".into(),
        ("7", "2") => "ADVISE_MR".into(),
        ("10", "0") => "ASYNC_EVENT_ALLOC".into(),
        _ => format!("ioctl object {object} method {method}"),
    }
}

/// The ioctl methods that do what a `write()` command does (libibverbs
/// calls them first where the kernel has them; rule `encodings`): object,
/// method (hex, as recorded), the write command (its name and number), and
/// the attributes that carry one of its core fields, with that field's
/// name and size.
type AsWrite = (
    &'static str,
    &'static str,
    &'static str,
    u32,
    &'static [(&'static str, &'static [(&'static str, usize)])],
);
const IOCTL_AS_WRITE: &[AsWrite] = &[
    ("0", "3", "GET_CONTEXT", 0, &[]),
    ("1", "0", "DEALLOC_PD", 4, &[]),
    ("6", "0", "DESTROY_AH", 8, &[]),
    ("7", "1", "DEREG_MR", 13, &[]),
    (
        "3",
        "0",
        "CREATE_CQ",
        18,
        &[("1", &[("cqe", 4)]), ("4", &[("comp_vector", 4)])],
    ),
    ("3", "1", "DESTROY_CQ", 20, &[]),
    (
        "4",
        "0",
        "CREATE_QP",
        24,
        &[
            (
                "8",
                &[
                    ("max_send_wr", 4),
                    ("max_recv_wr", 4),
                    ("max_send_sge", 4),
                    ("max_recv_sge", 4),
                    ("max_inline_data", 4),
                ],
            ),
            ("9", &[("qp_type", 1)]),
        ],
    ),
    ("4", "1", "DESTROY_QP", 27, &[]),
    (
        "5",
        "0",
        "CREATE_SRQ",
        32,
        &[
            ("5", &[("max_wr", 4)]),
            ("6", &[("max_sge", 4)]),
            ("7", &[("srq_limit", 4)]),
        ],
    ),
    ("5", "1", "DESTROY_SRQ", 35, &[]),
];

/// Whether a failed call says the kernel has no such method (libibverbs
/// then falls back to the `write()` command).
fn no_method(result: &str) -> bool {
    matches!(result, "EPROTONOSUPPORT" | "EOPNOTSUPP")
}

/// Decodes one `ioctl` record: `<object> <method> <id>:<flags>:<data>...`.
/// A method that does what a write command does ([`IOCTL_AS_WRITE`]) takes
/// its name, and the attributes that carry its core fields and driver data
/// are named as in that command (`core.*`, `drv.*`), so that the two
/// encodings compare on what both carry; a call the kernel answered "no
/// such method" keeps the method's own name.
fn decode_ioctl(rest: &[&str], result: &str, driver: Driver) -> Result<Command> {
    let [object, method, attrs @ ..] = rest else {
        bail!("an ioctl record without object and method");
    };
    let as_write = IOCTL_AS_WRITE
        .iter()
        .find(|w| (w.0, w.1) == (*object, *method))
        .filter(|_| !no_method(result));
    let mut fields = Vec::new();
    for attr in attrs {
        let mut p = attr.splitn(3, ':');
        let (Some(id), Some(flags), Some(data)) = (p.next(), p.next(), p.next()) else {
            bail!("bad attribute {attr:?}");
        };
        fields.push(value(
            format!("attr{id}.flags"),
            flags.as_bytes(),
            Kind::Val,
        ));
        if let Some(n) = data.strip_prefix("out") {
            fields.push(Value {
                name: format!("attr{id}.out_len"),
                key: Some(n.to_string()),
                raw: n.to_string(),
            });
            continue;
        }
        let b = hex_bytes(data).with_context(|| format!("attribute {attr:?}"))?;
        if (*object, *method, id) == ("0", "2", "0") {
            // QUERY_PORT's port number, named as in the write command.
            fields.push(value(
                "core.port_num".into(),
                b.get(..1).unwrap_or(&[]),
                Kind::Val,
            ));
        }
        if let Some(&(_, _, _, number, core)) = as_write {
            if id == "1000" {
                // UVERBS_ATTR_UHW_IN: the driver data, decoded as the
                // write command's.
                let drv = match (driver, shape(false, number)) {
                    (Driver::Mlx5, Some(s)) => s.drv,
                    _ => &[],
                };
                decode(&mut fields, "drv", &b, drv);
                continue;
            }
            if let Some((_, parts)) = core.iter().find(|(a, _)| *a == id) {
                let mut off = 0;
                for (name, size) in *parts {
                    let end = (off + size).min(b.len());
                    fields.push(value(
                        format!("core.{name}"),
                        &b[off.min(end)..end],
                        Kind::Val,
                    ));
                    off = end;
                }
                continue;
            }
        }
        fields.push(value(format!("attr{id}"), &b, Kind::Val));
    }
    Ok(Command {
        name: as_write.map_or_else(|| ioctl_name(object, method), |w| w.2.to_string()),
        result: result.to_string(),
        fields,
        ioctl: true,
    })
}

/// Parses a command log of the mlx5 driver.
pub fn parse(text: &str) -> Result<Vec<Command>> {
    parse_for(text, Driver::Mlx5)
}

/// Parses a command log whose driver data is `driver`'s.
pub fn parse_for(text: &str, driver: Driver) -> Result<Vec<Command>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let c = match words.as_slice() {
            [] => continue,
            ["write", result, bytes] => decode_write(&hex_bytes(bytes)?, result, driver),
            ["ioctl", result, rest @ ..] => decode_ioctl(rest, result, driver),
            _ => Err(anyhow::anyhow!("unknown record")),
        }
        .with_context(|| format!("line {}", i + 1))?;
        out.push(c);
    }
    Ok(out)
}

/// The outcome of a comparison.
#[derive(Debug, Default)]
pub struct Report {
    /// Commands paired and compared.
    pub compared: usize,
    /// Paired commands identical after normalisation.
    pub identical: usize,
    /// Paired commands with a differing field or outcome.
    pub differing: usize,
    /// Commands only one side sent (and no rule allows).
    pub unpaired: usize,
    /// Commands only one side sent that a rule allows.
    pub allowed: usize,
    /// One line per difference.
    pub lines: Vec<String>,
}

impl Report {
    /// Whether the two sequences are identical after normalisation.
    pub fn ok(&self) -> bool {
        self.differing == 0 && self.unpaired == 0 && self.compared > 0
    }
}

/// `IB_QP_PORT` in MODIFY_QP's attribute mask.
const IB_QP_PORT: u64 = 1 << 4;

/// The rule that allows command `k` of our sequence to have no partner, if
/// one does (rules `ah-gid-check`, `ud-mtu`).
fn allowed_ours_only(ours: &[Command], k: usize) -> Option<&'static str> {
    if ours[k].name == "QUERY_GID_ENTRY" && ours[k].result == "ok" {
        return Some("ah-gid-check");
    }
    let next = ours.get(k + 1)?;
    if ours[k].name == "QUERY_PORT" && next.name == "QUERY_GID_ENTRY" {
        return Some("gid-table-len");
    }
    let sets_port = next.fields.iter().any(|f| {
        f.name == "core.attr_mask"
            && u64::from_str_radix(f.raw.trim_start_matches("0x"), 16)
                .is_ok_and(|m| m & IB_QP_PORT != 0)
    });
    (ours[k].name == "QUERY_PORT" && next.name == "MODIFY_QP" && sets_port).then_some("ud-mtu")
}

/// Whether `c` is an ioctl of the driver's own namespace (rule
/// `driver-methods`) or a method the kernel lacks (rule `ioctl-fallback`).
fn probe_rule(c: &Command) -> Option<&'static str> {
    if !c.ioctl {
        return None;
    }
    let driver_object = c
        .name
        .strip_prefix("ioctl object ")
        .and_then(|r| r.split(' ').next())
        .and_then(|o| u32::from_str_radix(o, 16).ok())
        .is_some_and(|o| o >= 0x1000);
    if driver_object {
        Some("driver-methods")
    } else if no_method(&c.result) {
        Some("ioctl-fallback")
    } else {
        None
    }
}

/// The rule that allows command `k` of rdma-core's sequence to have no
/// partner, if one does (rules `invoke-write-probe`, `init-queries`,
/// `ioctl-fallback`, `driver-methods`).
fn allowed_theirs_only(theirs: &[Command], k: usize) -> Option<&'static str> {
    if let Some(rule) = probe_rule(&theirs[k]) {
        return Some(rule);
    }
    if theirs[k].name == "ASYNC_EVENT_ALLOC"
        && k > 0
        && theirs[k - 1].name == "GET_CONTEXT"
        && theirs[k - 1].ioctl
    {
        return Some("async-event");
    }
    let probe = |c: &Command| c.name == "QUERY_DEVICE" && c.result == "ENOSPC";
    if k == 0 && theirs.first().is_some_and(probe) {
        return Some("invoke-write-probe");
    }
    // The context's commands start after the probes, if there are any.
    let start = theirs
        .iter()
        .position(|c| !probe(c) && probe_rule(c).is_none())?;
    let init_query = |c: &Command| {
        matches!(
            c.name.as_str(),
            "EX_QUERY_DEVICE" | "QUERY_PORT" | "ASYNC_EVENT_ALLOC"
        ) || probe_rule(c).is_some()
    };
    let after_open = theirs[start].name == "GET_CONTEXT"
        && k > start
        && theirs[start + 1..=k].iter().all(init_query);
    after_open.then_some("init-queries")
}

/// The pairs of a longest common subsequence of the two name sequences.
fn align(t: &[Command], o: &[Command]) -> Vec<(usize, usize)> {
    let (n, m) = (t.len(), o.len());
    let mut l = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            l[i][j] = if t[i].name == o[j].name {
                l[i + 1][j + 1] + 1
            } else {
                l[i + 1][j].max(l[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut pairs) = (0, 0, Vec::new());
    while i < n && j < m {
        if t[i].name == o[j].name {
            pairs.push((i, j));
            i += 1;
            j += 1;
        } else if l[i + 1][j] >= l[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    pairs
}

/// Rule `qpn`: every MODIFY_QP's `core.dest_qp_num` as its offset from the
/// lowest one of the sequence.
fn relative_qpns(seq: &[Command]) -> Vec<Command> {
    let qpn = |f: &Value| {
        (f.name == "core.dest_qp_num")
            .then(|| u64::from_str_radix(f.raw.trim_start_matches("0x"), 16).ok())
            .flatten()
    };
    let lowest = seq
        .iter()
        .filter(|c| c.name == "MODIFY_QP")
        .flat_map(|c| c.fields.iter().filter_map(qpn))
        .filter(|&q| q != 0)
        .min();
    let mut out = seq.to_vec();
    let Some(lowest) = lowest else { return out };
    for c in out.iter_mut().filter(|c| c.name == "MODIFY_QP") {
        for f in &mut c.fields {
            if let Some(q) = qpn(f).filter(|&q| q != 0) {
                f.key = Some(format!("lowest + {} (rule qpn)", q - lowest));
            }
        }
    }
    out
}

/// Compares `ours` against the reference `theirs` (rdma-core's).
pub fn compare(theirs: &[Command], ours: &[Command]) -> Report {
    let (theirs, ours) = (&relative_qpns(theirs)[..], &relative_qpns(ours)[..]);
    let mut r = Report::default();
    let pairs = align(theirs, ours);
    let (mut ti, mut oi) = (0, 0);
    let unpaired = |r: &mut Report, who: &str, k: usize, c: &Command| {
        let rule = if who == "ours" {
            allowed_ours_only(ours, k)
        } else {
            allowed_theirs_only(theirs, k)
        };
        match rule {
            Some(rule) => {
                r.allowed += 1;
                r.lines.push(format!(
                    "{who} #{k} {} ({}): only {who} sends it, allowed by rule {rule}",
                    c.name, c.result
                ));
            }
            None => {
                r.unpaired += 1;
                r.lines.push(format!(
                    "{who} #{k} {} ({}): only {who} sends it",
                    c.name, c.result
                ));
            }
        }
    };
    for (t, o) in pairs {
        while ti < t {
            unpaired(&mut r, "rdma-core", ti, &theirs[ti]);
            ti += 1;
        }
        while oi < o {
            unpaired(&mut r, "ours", oi, &ours[oi]);
            oi += 1;
        }
        let (a, b) = (&theirs[t], &ours[o]);
        let mut diffs = Vec::new();
        if a.result != b.result {
            diffs.push(format!(
                "outcome: rdma-core {}, ours {}",
                a.result, b.result
            ));
        }
        // The same query in two encodings (rule encodings): the fields
        // both have.
        let both_only = a.ioctl != b.ioctl;
        for fa in &a.fields {
            match b.fields.iter().find(|f| f.name == fa.name) {
                None if both_only => {}
                None => diffs.push(format!("{}: rdma-core {}, ours absent", fa.name, fa.raw)),
                Some(fb) if fa.key != fb.key => diffs.push(format!(
                    "{}: rdma-core {}, ours {}",
                    fa.name,
                    fa.key.as_deref().unwrap_or(&fa.raw),
                    fb.key.as_deref().unwrap_or(&fb.raw)
                )),
                Some(_) => {}
            }
        }
        for fb in &b.fields {
            if !both_only && !a.fields.iter().any(|f| f.name == fb.name) {
                diffs.push(format!("{}: rdma-core absent, ours {}", fb.name, fb.raw));
            }
        }
        r.compared += 1;
        if diffs.is_empty() {
            r.identical += 1;
        } else {
            r.differing += 1;
            for d in diffs {
                r.lines
                    .push(format!("rdma-core #{t} / ours #{o} {}: {d}", a.name));
            }
        }
        ti = t + 1;
        oi = o + 1;
    }
    while ti < theirs.len() {
        unpaired(&mut r, "rdma-core", ti, &theirs[ti]);
        ti += 1;
    }
    while oi < ours.len() {
        unpaired(&mut r, "ours", oi, &ours[oi]);
        oi += 1;
    }
    r
}

/// The report as text: the two sequences side by side, then every
/// difference.
pub fn render(theirs: &[Command], ours: &[Command], r: &Report) -> String {
    let mut s = String::from("normalisation rules (what may legitimately differ):\n");
    for (n, why) in RULES {
        s += &format!("  {n}: {why}\n");
    }
    s += &format!(
        "\ncommands: rdma-core {}, ours {}; paired {} ({} identical after normalisation, {} \
         differing), {} sent by one side only, {} more allowed by a rule\n",
        theirs.len(),
        ours.len(),
        r.compared,
        r.identical,
        r.differing,
        r.unpaired,
        r.allowed
    );
    for l in &r.lines {
        s += l;
        s.push('\n');
    }
    for (who, seq) in [("rdma-core", theirs), ("ours", ours)] {
        s += &format!("\n{who}'s sequence:\n");
        for (i, c) in seq.iter().enumerate() {
            s += &format!("  #{i} {} {}\n", c.name, c.result);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_abi::mlx5;
    use std::mem::size_of;

    fn size(f: &[F]) -> usize {
        f.iter().map(|f| f.size).sum()
    }

    #[test]
    fn tables_match_the_abi_structs() {
        use rverbs_abi::{ah, cq, device, mr, qp, srq};
        // Core structs: our ABI types are checked against the uapi headers
        // (uverbs-abi's layout test); the tables must agree with them.
        assert_eq!(size(QUERY_PORT), size_of::<device::QueryPort>());
        assert_eq!(size(REG_MR), size_of::<mr::RegMr>());
        assert_eq!(size(CREATE_CQ), size_of::<cq::CreateCq>());
        assert_eq!(size(EX_CREATE_CQ), size_of::<cq::ExCreateCq>());
        assert_eq!(size(RESIZE_CQ), size_of::<cq::ResizeCq>());
        assert_eq!(size(DESTROY_CQ), size_of::<cq::DestroyCq>());
        assert_eq!(size(CREATE_QP), size_of::<qp::CreateQp>());
        assert_eq!(size(MODIFY_QP), size_of::<qp::ModifyQp>());
        assert_eq!(size(QUERY_QP), size_of::<qp::QueryQp>());
        assert_eq!(size(DESTROY_QP), size_of::<qp::DestroyQp>());
        assert_eq!(size(CREATE_SRQ), size_of::<srq::CreateSrq>());
        assert_eq!(size(MODIFY_SRQ), size_of::<srq::ModifySrq>());
        assert_eq!(size(DESTROY_SRQ), size_of::<srq::DestroySrq>());
        assert_eq!(size(CREATE_AH), size_of::<ah::CreateAh>());
        assert_eq!(size(EX_QUERY_DEVICE), size_of::<device::ExQueryDevice>());
        assert_eq!(
            size(MLX5_ALLOC_UCONTEXT),
            size_of::<mlx5::AllocUcontextReqV2>()
        );
        assert_eq!(size(MLX5_CREATE_CQ), size_of::<mlx5::CreateCq>());
        assert_eq!(size(MLX5_RESIZE_CQ), size_of::<mlx5::ResizeCq>());
        assert_eq!(size(MLX5_CREATE_QP), size_of::<mlx5::CreateQp>());
        assert_eq!(size(MLX5_CREATE_SRQ), size_of::<mlx5::CreateSrq>());
    }

    #[test]
    fn decodes_and_normalises() {
        // DESTROY_CQ: response 0x7ffd1000, handle 3; and the same with
        // another response address in the same page offset.
        let rec = |resp: u64, h: u32| {
            let mut b = vec![20, 0, 0, 0, 6, 0, 2, 0];
            b.extend_from_slice(&resp.to_le_bytes());
            b.extend_from_slice(&h.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            format!(
                "write ok {}\n",
                b.iter().map(|x| format!("{x:02x}")).collect::<String>()
            )
        };
        let t = parse(&rec(0x7ffd_1010, 3)).unwrap();
        assert_eq!(t[0].name, "DESTROY_CQ");
        assert!(t[0]
            .fields
            .iter()
            .any(|f| f.name == "core.cq_handle" && f.raw == "0x3"));
        let same = parse(&rec(0x5555_0010, 3)).unwrap();
        assert!(compare(&t, &same).ok());
        let other_handle = parse(&rec(0x5555_0010, 4)).unwrap();
        let r = compare(&t, &other_handle);
        assert!(!r.ok());
        assert!(r.lines[0].contains("core.cq_handle"), "{:?}", r.lines);
        // The response pointer: only whether there is one (rule response).
        let other_offset = parse(&rec(0x5555_0018, 3)).unwrap();
        assert!(compare(&t, &other_offset).ok());
        let null = parse(&rec(0, 3)).unwrap();
        assert!(!compare(&t, &null).ok());
        // A buffer address: its page offset (rule addresses).
        let resize = |buf: u64| {
            let mut b = vec![19, 0, 0, 0, 10, 0, 2, 0];
            b.extend_from_slice(&0x7ffd_0000u64.to_le_bytes());
            b.extend_from_slice(&3u32.to_le_bytes());
            b.extend_from_slice(&256u32.to_le_bytes());
            b.extend_from_slice(&buf.to_le_bytes());
            b.extend_from_slice(&[64, 0, 0, 0, 0, 0, 0, 0]);
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            parse(&format!("write ok {hex}\n")).unwrap()
        };
        assert!(compare(&resize(0x1000), &resize(0x7000)).ok());
        let r = compare(&resize(0x1000), &resize(0x7040));
        assert!(
            r.lines.iter().any(|l| l.contains("drv.buf_addr")),
            "{:?}",
            r.lines
        );
        // A command only one side sends is reported, the rest still pairs.
        let two = parse(&(rec(0x10, 3) + "write ok 040000000300000007000000")).unwrap();
        let r = compare(&t, &two);
        assert_eq!((r.compared, r.identical, r.unpaired), (1, 1, 1));
        // QUERY_PORT as an ioctl pairs with the write command of the same
        // port (rule encodings), not with another port.
        let write_port = |p: u8| {
            let mut b = vec![2, 0, 0, 0, 6, 0, 10, 0];
            b.extend_from_slice(&0x7ffd_0000u64.to_le_bytes());
            b.extend_from_slice(&[p, 0, 0, 0, 0, 0, 0, 0]);
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            parse(&format!("write ok {hex}\n")).unwrap()
        };
        let ioctl_port = parse("ioctl ok 0 2 0:1:0100000000000000 1:1:out30\n").unwrap();
        assert_eq!(ioctl_port[0].name, "QUERY_PORT");
        assert!(compare(&ioctl_port, &write_port(1)).ok());
        assert!(!compare(&ioctl_port, &write_port(2)).ok());
        // libibverbs' INVOKE_WRITE probe, first, is allowed alone.
        let probe = parse("write ENOSPC 0100000002000000\n").unwrap();
        let r = compare(&[probe, t.clone()].concat(), &t);
        assert!(r.ok() && r.allowed == 1, "{:?}", r.lines);
        assert!(parse("write ok 0102").is_err());
        assert!(parse("bogus").is_err());
    }
}
