//! The host's RDMA resources as the kernel's nldev resource dumps report
//! them (what `rdma res show qp|cq|mr|pd|cm_id|srq|ctx` reads): decoded
//! from `RDMA_NLDEV_CMD_RES_*_GET` replies into plain structs, with the
//! owner's pid and command name.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use rverbs::Errno;
use rverbs_netlink::{attr, Attr, Attrs, NlSocket, ResKind};
use serde_json::{json, Map, Value};

use super::guard::{self, Untrusted};

/// Who owns a resource: a user process (pid, and its comm if still there)
/// or a kernel module.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owner {
    /// The owning process ([`attr::RES_PID`]), in this PID namespace.
    pub pid: Option<u32>,
    /// `/proc/<pid>/comm` of a user owner (the process's choice), or the
    /// kernel owner's name ([`attr::RES_KERN_NAME`]).
    pub comm: Option<Untrusted>,
    /// Whether the owner is the kernel.
    pub kernel: bool,
}

impl Owner {
    fn from(pid: Option<u32>, kern: Option<String>) -> Owner {
        match (pid, kern) {
            (Some(pid), _) => Owner {
                pid: Some(pid),
                comm: comm_of(pid),
                kernel: false,
            },
            (None, Some(k)) => Owner {
                pid: None,
                comm: Some(Untrusted::new(k)),
                kernel: true,
            },
            (None, None) => Owner::default(),
        }
    }

    /// The owner as the tables show it: the comm, `[name]` for the kernel.
    pub fn comm_text(&self) -> String {
        match (&self.comm, self.kernel) {
            (Some(c), true) => format!("[{c}]"),
            (Some(c), false) => c.to_string(),
            (None, _) => "-".into(),
        }
    }

    fn json(&self, m: &mut Map<String, Value>) {
        m.insert("pid".into(), json!(self.pid));
        m.insert("comm".into(), json!(self.comm));
        m.insert("kernel".into(), json!(self.kernel));
    }
}

/// `/proc/<pid>/comm` without its newline: a name the process chose
/// (any 15 bytes), shown escaped.
pub fn comm_of(pid: u32) -> Option<Untrusted> {
    let (mut b, _) = guard::read_proc(&format!("/proc/{pid}/comm"), 64).ok()?;
    if b.last() == Some(&b'\n') {
        b.pop();
    }
    Some(Untrusted::new(b))
}

/// A queue pair.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QpRes {
    /// Device name.
    pub dev: String,
    /// The port the QP is bound to, once it has one.
    pub port: Option<u32>,
    /// Local QP number.
    pub lqpn: u32,
    /// Remote QP number (connected QPs past INIT).
    pub rqpn: Option<u32>,
    /// `IB_QPT_*`.
    pub qp_type: Option<u8>,
    /// `IB_QPS_*`.
    pub state: Option<u8>,
    /// Next send PSN.
    pub sq_psn: Option<u32>,
    /// Expected receive PSN (connected QPs).
    pub rq_psn: Option<u32>,
    /// Path migration state (RC/UC).
    pub path_mig: Option<u8>,
    /// Protection domain number.
    pub pdn: Option<u32>,
    /// Owner.
    pub owner: Owner,
}

/// A completion queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CqRes {
    /// Device name.
    pub dev: String,
    /// CQ number.
    pub cqn: Option<u32>,
    /// Capacity (`cqe`, what the CQ was granted).
    pub cqe: Option<u32>,
    /// Reference count (the CQ and the QPs using it).
    pub users: Option<u64>,
    /// Kernel CQs: the polling context.
    pub poll_ctx: Option<u8>,
    /// Adaptive interrupt moderation.
    pub dim: Option<u8>,
    /// The user context number.
    pub ctxn: Option<u32>,
    /// Owner.
    pub owner: Owner,
}

/// A memory region.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MrRes {
    /// Device name.
    pub dev: String,
    /// MR number.
    pub mrn: Option<u32>,
    /// Remote key (0 without remote access).
    pub rkey: Option<u32>,
    /// Local key (shown to CAP_NET_ADMIN only).
    pub lkey: Option<u32>,
    /// I/O virtual address (shown to CAP_NET_ADMIN only).
    pub iova: Option<u64>,
    /// Length in bytes.
    pub len: Option<u64>,
    /// Protection domain number.
    pub pdn: Option<u32>,
    /// Owner.
    pub owner: Owner,
}

/// A protection domain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PdRes {
    /// Device name.
    pub dev: String,
    /// PD number.
    pub pdn: Option<u32>,
    /// The device's local DMA lkey (shown to CAP_NET_ADMIN only).
    pub local_dma_lkey: Option<u32>,
    /// The unsafe global rkey, if the PD has one.
    pub unsafe_global_rkey: Option<u32>,
    /// Reference count.
    pub users: Option<u64>,
    /// The user context number.
    pub ctxn: Option<u32>,
    /// Owner.
    pub owner: Owner,
}

/// An RDMA CM id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmIdRes {
    /// Device name.
    pub dev: String,
    /// Port.
    pub port: Option<u32>,
    /// CM id number.
    pub cm_idn: Option<u32>,
    /// The QP number bound to the id.
    pub lqpn: Option<u32>,
    /// Port space (`RDMA_PS_*`).
    pub ps: Option<u32>,
    /// QP type (`IB_QPT_*`).
    pub qp_type: Option<u8>,
    /// CM state (`RDMA_CM_*`).
    pub state: Option<u8>,
    /// Source address.
    pub src: Option<SocketAddr>,
    /// Destination address.
    pub dst: Option<SocketAddr>,
    /// Owner.
    pub owner: Owner,
}

/// A shared receive queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SrqRes {
    /// Device name.
    pub dev: String,
    /// SRQ number.
    pub srqn: Option<u32>,
    /// `IB_SRQT_*`.
    pub srq_type: Option<u8>,
    /// Protection domain number.
    pub pdn: Option<u32>,
    /// Completion queue number (XRC/TM SRQs).
    pub cqn: Option<u32>,
    /// The QPs attached to it, as inclusive ranges of QP numbers.
    pub qpns: Vec<(u32, u32)>,
    /// Owner.
    pub owner: Owner,
}

/// A user context (one open of a uverbs device).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CtxRes {
    /// Device name.
    pub dev: String,
    /// Context number.
    pub ctxn: Option<u32>,
    /// Owner.
    pub owner: Owner,
}

/// Every resource of every device, and what could not be dumped.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Queue pairs.
    pub qps: Vec<QpRes>,
    /// Completion queues.
    pub cqs: Vec<CqRes>,
    /// Memory regions.
    pub mrs: Vec<MrRes>,
    /// Protection domains.
    pub pds: Vec<PdRes>,
    /// CM ids.
    pub cm_ids: Vec<CmIdRes>,
    /// Shared receive queues.
    pub srqs: Vec<SrqRes>,
    /// User contexts.
    pub ctxs: Vec<CtxRes>,
    /// Tables the kernel would not dump, with its errno (for example SRQs
    /// and contexts on kernels older than 5.19 and 5.13).
    pub notes: Vec<String>,
}

/// The fields of one entry, by attribute number (first occurrence wins).
struct Fields<'a>(Vec<Attr<'a>>);

impl<'a> Fields<'a> {
    fn new(entry: Attrs<'a>) -> Result<Self, Errno> {
        let mut v = Vec::new();
        for a in entry {
            v.push(a?);
        }
        Ok(Fields(v))
    }
    fn get(&self, kind: u16) -> Option<&Attr<'a>> {
        self.0.iter().find(|a| a.kind == kind)
    }
    fn u8(&self, kind: u16) -> Option<u8> {
        self.get(kind).and_then(Attr::u8)
    }
    fn u32(&self, kind: u16) -> Option<u32> {
        self.get(kind).and_then(Attr::u32)
    }
    fn u64(&self, kind: u16) -> Option<u64> {
        self.get(kind).and_then(Attr::u64)
    }
    fn string(&self, kind: u16) -> Option<String> {
        self.get(kind).and_then(Attr::str).map(str::to_owned)
    }
    fn owner(&self) -> Owner {
        Owner::from(self.u32(attr::RES_PID), self.string(attr::RES_KERN_NAME))
    }
    fn addr(&self, kind: u16) -> Option<SocketAddr> {
        self.get(kind).and_then(|a| sockaddr(a.payload))
    }
}

/// A `__kernel_sockaddr_storage` holding an IPv4 or IPv6 address.
fn sockaddr(b: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes(b.get(..2)?.try_into().ok()?);
    let port = u16::from_be_bytes(b.get(2..4)?.try_into().ok()?);
    match i32::from(family) {
        libc::AF_INET => {
            let ip: [u8; 4] = b.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port))
        }
        libc::AF_INET6 => {
            let ip: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port))
        }
        _ => None,
    }
}

/// The QP numbers an SRQ entry lists (`RES_QP` of `RES_QP_ENTRY`s, each a
/// `RES_LQPN` or a `MIN_RANGE`/`MAX_RANGE` pair).
fn srq_qpns(f: &Fields<'_>) -> Result<Vec<(u32, u32)>, Errno> {
    let mut out = Vec::new();
    let Some(table) = f.get(attr::RES_QP) else {
        return Ok(out);
    };
    for e in table.nested() {
        let e = e?;
        if e.kind != attr::RES_QP_ENTRY {
            continue;
        }
        let ef = Fields::new(e.nested())?;
        if let Some(n) = ef.u32(attr::RES_LQPN) {
            out.push((n, n));
        } else if let (Some(lo), Some(hi)) = (ef.u32(attr::MIN_RANGE), ef.u32(attr::MAX_RANGE)) {
            out.push((lo, hi));
        }
    }
    Ok(out)
}

impl Snapshot {
    /// Dump every resource table of every RDMA device.
    pub fn take() -> anyhow::Result<Snapshot> {
        let devs = match rverbs_netlink::devices() {
            Ok(d) => d,
            Err(Errno::EPROTONOSUPPORT) => return Ok(Snapshot::default()),
            Err(e) => anyhow::bail!("listing RDMA devices over netlink: {e}"),
        };
        let mut sock = NlSocket::open()?;
        let mut s = Snapshot::default();
        for d in &devs {
            for kind in [
                ResKind::Qp,
                ResKind::Cq,
                ResKind::Mr,
                ResKind::Pd,
                ResKind::CmId,
                ResKind::Srq,
                ResKind::Ctx,
            ] {
                let r = s.dump_one(&mut sock, d.index, &d.name, kind);
                match r {
                    Ok(()) => {}
                    Err(e @ (Errno::EOPNOTSUPP | Errno::EINVAL)) if kind_is_optional(kind) => {
                        s.notes.push(format!(
                            "{}: the kernel does not dump {} ({e})",
                            d.name,
                            kind_name(kind)
                        ));
                    }
                    Err(e) => anyhow::bail!("dumping the {} of {}: {e}", kind_name(kind), d.name),
                }
            }
        }
        Ok(s)
    }

    fn dump_one(
        &mut self,
        sock: &mut NlSocket,
        index: u32,
        dev: &str,
        kind: ResKind,
    ) -> Result<(), Errno> {
        rverbs_netlink::dump_res(sock, index, kind, |entry| self.add_entry(dev, kind, entry))
    }

    /// Adds one entry of a `kind` resource dump of device `dev` (the
    /// kernel's attributes, decoded here); [`Errno::EPROTO`] if they are
    /// malformed or a QP has no number.
    pub fn add_entry(&mut self, dev: &str, kind: ResKind, entry: Attrs<'_>) -> Result<(), Errno> {
        let f = Fields::new(entry)?;
        match kind {
            ResKind::Qp => self.qps.push(QpRes {
                dev: dev.to_string(),
                port: f.u32(attr::PORT_INDEX),
                lqpn: f.u32(attr::RES_LQPN).ok_or(Errno::EPROTO)?,
                rqpn: f.u32(attr::RES_RQPN),
                qp_type: f.u8(attr::RES_TYPE),
                state: f.u8(attr::RES_STATE),
                sq_psn: f.u32(attr::RES_SQ_PSN),
                rq_psn: f.u32(attr::RES_RQ_PSN),
                path_mig: f.u8(attr::RES_PATH_MIG_STATE),
                pdn: f.u32(attr::RES_PDN),
                owner: f.owner(),
            }),
            ResKind::Cq => self.cqs.push(CqRes {
                dev: dev.to_string(),
                cqn: f.u32(attr::RES_CQN),
                cqe: f.u32(attr::RES_CQE),
                users: f.u64(attr::RES_USECNT),
                poll_ctx: f.u8(attr::RES_POLL_CTX),
                dim: f.u8(attr::DEV_DIM),
                ctxn: f.u32(attr::RES_CTXN),
                owner: f.owner(),
            }),
            ResKind::Mr => self.mrs.push(MrRes {
                dev: dev.to_string(),
                mrn: f.u32(attr::RES_MRN),
                rkey: f.u32(attr::RES_RKEY),
                lkey: f.u32(attr::RES_LKEY),
                iova: f.u64(attr::RES_IOVA),
                len: f.u64(attr::RES_MRLEN),
                pdn: f.u32(attr::RES_PDN),
                owner: f.owner(),
            }),
            ResKind::Pd => self.pds.push(PdRes {
                dev: dev.to_string(),
                pdn: f.u32(attr::RES_PDN),
                local_dma_lkey: f.u32(attr::RES_LOCAL_DMA_LKEY),
                unsafe_global_rkey: f.u32(attr::RES_UNSAFE_GLOBAL_RKEY),
                users: f.u64(attr::RES_USECNT),
                ctxn: f.u32(attr::RES_CTXN),
                owner: f.owner(),
            }),
            ResKind::CmId => self.cm_ids.push(CmIdRes {
                dev: dev.to_string(),
                port: f.u32(attr::PORT_INDEX),
                cm_idn: f.u32(attr::RES_CM_IDN),
                lqpn: f.u32(attr::RES_LQPN),
                ps: f.u32(attr::RES_PS),
                qp_type: f.u8(attr::RES_TYPE),
                state: f.u8(attr::RES_STATE),
                src: f.addr(attr::RES_SRC_ADDR),
                dst: f.addr(attr::RES_DST_ADDR),
                owner: f.owner(),
            }),
            ResKind::Srq => self.srqs.push(SrqRes {
                dev: dev.to_string(),
                srqn: f.u32(attr::RES_SRQN),
                srq_type: f.u8(attr::RES_TYPE),
                pdn: f.u32(attr::RES_PDN),
                cqn: f.u32(attr::RES_CQN),
                qpns: srq_qpns(&f)?,
                owner: f.owner(),
            }),
            ResKind::Ctx => self.ctxs.push(CtxRes {
                dev: dev.to_string(),
                ctxn: f.u32(attr::RES_CTXN),
                owner: f.owner(),
            }),
            // A kind this tool does not dump yet: nothing to add.
            _ => {}
        }
        Ok(())
    }
}

fn kind_is_optional(kind: ResKind) -> bool {
    matches!(kind, ResKind::Srq | ResKind::Ctx | ResKind::CmId)
}

fn kind_name(kind: ResKind) -> &'static str {
    match kind {
        ResKind::Qp => "QPs",
        ResKind::CmId => "CM ids",
        ResKind::Cq => "CQs",
        ResKind::Mr => "MRs",
        ResKind::Pd => "PDs",
        ResKind::Ctx => "contexts",
        ResKind::Srq => "SRQs",
        _ => "resources",
    }
}

/// `IB_QPT_*` by name.
pub fn qp_type_name(t: u8) -> String {
    match t {
        0 => "SMI".into(),
        1 => "GSI".into(),
        2 => "RC".into(),
        3 => "UC".into(),
        4 => "UD".into(),
        5 => "RAW_IPV6".into(),
        6 => "RAW_ETHERTYPE".into(),
        8 => "RAW_PACKET".into(),
        9 => "XRC_INI".into(),
        10 => "XRC_TGT".into(),
        0xff => "DRIVER".into(),
        t => format!("type {t}"),
    }
}

/// `IB_QPS_*` by name.
pub fn qp_state_name(s: u8) -> String {
    const NAMES: [&str; 7] = ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"];
    NAMES
        .get(usize::from(s))
        .map_or_else(|| format!("state {s}"), |n| (*n).into())
}

fn path_mig_name(s: u8) -> String {
    const NAMES: [&str; 3] = ["MIGRATED", "REARM", "ARMED"];
    NAMES
        .get(usize::from(s))
        .map_or_else(|| format!("{s}"), |n| (*n).into())
}

fn cm_state_name(s: u8) -> String {
    const NAMES: [&str; 11] = [
        "IDLE",
        "ADDR_QUERY",
        "ADDR_RESOLVED",
        "ROUTE_QUERY",
        "ROUTE_RESOLVED",
        "CONNECT",
        "DISCONNECT",
        "ADDR_BOUND",
        "LISTEN",
        "DEVICE_REMOVAL",
        "DESTROYING",
    ];
    NAMES
        .get(usize::from(s))
        .map_or_else(|| format!("state {s}"), |n| (*n).into())
}

fn ps_name(ps: u32) -> String {
    match ps {
        0x0002 => "IPOIB".into(),
        0x0106 => "TCP".into(),
        0x0111 => "UDP".into(),
        0x013f => "IB".into(),
        p => format!("{p:#x}"),
    }
}

fn srq_type_name(t: u8) -> String {
    match t {
        0 => "BASIC".into(),
        1 => "XRC".into(),
        2 => "TM".into(),
        t => format!("type {t}"),
    }
}

fn poll_ctx_name(p: u8) -> String {
    match p {
        0 => "DIRECT".into(),
        1 => "SOFTIRQ".into(),
        2 => "WORKQUEUE".into(),
        3 => "UNBOUND_WORKQUEUE".into(),
        p => format!("{p}"),
    }
}

/// A QP number as rdma-core's tools print one (`ibv_rc_pingpong`'s
/// `QPN 0x%06x`): `0x` and six hex digits (more for a number past 24
/// bits). Every QP number in `rverbs inspect`'s text, in every mode, is
/// printed through it; JSON keeps QP numbers as numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qpn(pub u32);

impl std::fmt::Display for Qpn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

/// A QP number from decoded JSON (a number), as [`Qpn`] prints it; `-`
/// if it is not one.
pub fn qpn_of(v: &Value) -> String {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .map_or_else(|| "-".into(), |n| Qpn(n).to_string())
}

/// QP number ranges (an SRQ's QPs) as text: `a` or `a-b`, comma-separated.
fn qpn_ranges(r: &[(u32, u32)]) -> String {
    r.iter()
        .map(|&(a, b)| {
            if a == b {
                Qpn(a).to_string()
            } else {
                format!("{}-{}", Qpn(a), Qpn(b))
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `Some(v)` as text, `-` for `None`.
pub fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn opt_hex<T: std::fmt::LowerHex>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:#x}"))
}

/// Queue depths of a QP learned from its owner's rings (see
/// `super::rings`), for the QP table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpDepths {
    /// Send queue capacity and outstanding WQEs.
    pub sq: Option<(u32, u32)>,
    /// Receive queue capacity and posted WQEs.
    pub rq: Option<(u32, u32)>,
}

impl QpRes {
    /// The QP as a JSON object (names for the enums, numbers kept too).
    pub fn json(&self, depths: Option<&QpDepths>) -> Value {
        let mut m = Map::new();
        m.insert("dev".into(), json!(self.dev));
        m.insert("port".into(), json!(self.port));
        m.insert("lqpn".into(), json!(self.lqpn));
        m.insert("rqpn".into(), json!(self.rqpn));
        m.insert("type".into(), json!(self.qp_type.map(qp_type_name)));
        m.insert("state".into(), json!(self.state.map(qp_state_name)));
        m.insert("sq_psn".into(), json!(self.sq_psn));
        m.insert("rq_psn".into(), json!(self.rq_psn));
        m.insert(
            "path_mig_state".into(),
            json!(self.path_mig.map(path_mig_name)),
        );
        m.insert("pdn".into(), json!(self.pdn));
        let d = depths.copied().unwrap_or_default();
        m.insert("sq_depth".into(), json!(d.sq.map(|x| x.0)));
        m.insert("sq_outstanding".into(), json!(d.sq.map(|x| x.1)));
        m.insert("rq_depth".into(), json!(d.rq.map(|x| x.0)));
        m.insert("rq_posted".into(), json!(d.rq.map(|x| x.1)));
        self.owner.json(&mut m);
        Value::Object(m)
    }
}

impl CqRes {
    /// The CQ as a JSON object.
    pub fn json(&self, fill: Option<u32>) -> Value {
        let mut m = Map::new();
        m.insert("dev".into(), json!(self.dev));
        m.insert("cqn".into(), json!(self.cqn));
        m.insert("cqe".into(), json!(self.cqe));
        m.insert("users".into(), json!(self.users));
        m.insert("poll_ctx".into(), json!(self.poll_ctx.map(poll_ctx_name)));
        m.insert(
            "adaptive_moderation".into(),
            json!(self.dim.map(|d| d != 0)),
        );
        m.insert("ctxn".into(), json!(self.ctxn));
        m.insert("unpolled".into(), json!(fill));
        self.owner.json(&mut m);
        Value::Object(m)
    }
}

impl MrRes {
    /// The MR as a JSON object.
    pub fn json(&self) -> Value {
        let mut m = Map::new();
        m.insert("dev".into(), json!(self.dev));
        m.insert("mrn".into(), json!(self.mrn));
        m.insert("rkey".into(), json!(self.rkey));
        m.insert("lkey".into(), json!(self.lkey));
        m.insert("iova".into(), json!(self.iova));
        m.insert("len".into(), json!(self.len));
        m.insert("pdn".into(), json!(self.pdn));
        self.owner.json(&mut m);
        Value::Object(m)
    }
}

impl PdRes {
    /// The PD as a JSON object.
    pub fn json(&self) -> Value {
        let mut m = Map::new();
        m.insert("dev".into(), json!(self.dev));
        m.insert("pdn".into(), json!(self.pdn));
        m.insert("local_dma_lkey".into(), json!(self.local_dma_lkey));
        m.insert("unsafe_global_rkey".into(), json!(self.unsafe_global_rkey));
        m.insert("users".into(), json!(self.users));
        m.insert("ctxn".into(), json!(self.ctxn));
        self.owner.json(&mut m);
        Value::Object(m)
    }
}

impl CmIdRes {
    /// The CM id as a JSON object.
    pub fn json(&self) -> Value {
        let mut m = Map::new();
        m.insert("dev".into(), json!(self.dev));
        m.insert("port".into(), json!(self.port));
        m.insert("cm_idn".into(), json!(self.cm_idn));
        m.insert("lqpn".into(), json!(self.lqpn));
        m.insert("ps".into(), json!(self.ps.map(ps_name)));
        m.insert("type".into(), json!(self.qp_type.map(qp_type_name)));
        m.insert("state".into(), json!(self.state.map(cm_state_name)));
        m.insert("src".into(), json!(self.src.map(|a| a.to_string())));
        m.insert("dst".into(), json!(self.dst.map(|a| a.to_string())));
        self.owner.json(&mut m);
        Value::Object(m)
    }
}

impl SrqRes {
    /// The SRQ as a JSON object.
    pub fn json(&self) -> Value {
        let mut m = Map::new();
        m.insert("dev".into(), json!(self.dev));
        m.insert("srqn".into(), json!(self.srqn));
        m.insert("type".into(), json!(self.srq_type.map(srq_type_name)));
        m.insert("pdn".into(), json!(self.pdn));
        m.insert("cqn".into(), json!(self.cqn));
        m.insert(
            "qpns".into(),
            json!(self
                .qpns
                .iter()
                .map(|&(a, b)| if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                })
                .collect::<Vec<_>>()),
        );
        self.owner.json(&mut m);
        Value::Object(m)
    }

    /// Whether QP `qpn` is attached to this SRQ.
    pub fn has_qp(&self, qpn: u32) -> bool {
        self.qpns.iter().any(|&(a, b)| (a..=b).contains(&qpn))
    }
}

impl CtxRes {
    /// The context as a JSON object.
    pub fn json(&self) -> Value {
        let mut m = Map::new();
        m.insert("dev".into(), json!(self.dev));
        m.insert("ctxn".into(), json!(self.ctxn));
        self.owner.json(&mut m);
        Value::Object(m)
    }
}

/// A text table: a header row and rows, columns padded to their widest
/// cell, two spaces apart.
pub fn table(out: &mut String, title: &str, header: &[&str], rows: &[Vec<String>]) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "{title}:");
    if rows.is_empty() {
        let _ = writeln!(out, "  (none)");
        return;
    }
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < w.len() {
                w[i] = w[i].max(c.len());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::from("  ");
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                let _ = write!(s, "{c:<width$}  ", width = w.get(i).copied().unwrap_or(0));
            }
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(header.to_vec()));
    for r in rows {
        let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
    }
}

/// The snapshot as text tables (`depths`: queue depths by (dev, lqpn);
/// `cq_fill`: unpolled CQEs by (dev, cqn)).
pub fn text(
    s: &Snapshot,
    depths: &dyn Fn(&QpRes) -> Option<QpDepths>,
    cq_fill: &dyn Fn(&CqRes) -> Option<u32>,
) -> String {
    let mut out = String::new();
    let depth =
        |d: Option<(u32, u32)>| d.map_or_else(|| "-".into(), |(cap, n)| format!("{n}/{cap}"));
    let rows: Vec<Vec<String>> = s
        .qps
        .iter()
        .map(|q| {
            let d = depths(q).unwrap_or_default();
            vec![
                format!("{}/{}", q.dev, opt(q.port)),
                Qpn(q.lqpn).to_string(),
                opt(q.rqpn.map(Qpn)),
                q.qp_type.map_or("-".into(), qp_type_name),
                q.state.map_or("-".into(), qp_state_name),
                opt(q.sq_psn),
                opt(q.rq_psn),
                depth(d.sq),
                depth(d.rq),
                opt(q.pdn),
                opt(q.owner.pid),
                q.owner.comm_text(),
            ]
        })
        .collect();
    table(
        &mut out,
        "QPs",
        &[
            "LINK", "LQPN", "RQPN", "TYPE", "STATE", "SQ-PSN", "RQ-PSN", "SQ", "RQ", "PDN", "PID",
            "COMM",
        ],
        &rows,
    );
    let rows: Vec<Vec<String>> = s
        .cqs
        .iter()
        .map(|c| {
            vec![
                c.dev.clone(),
                opt(c.cqn),
                opt(c.cqe),
                opt(cq_fill(c)),
                opt(c.users),
                c.poll_ctx.map_or("-".into(), poll_ctx_name),
                opt(c.ctxn),
                opt(c.owner.pid),
                c.owner.comm_text(),
            ]
        })
        .collect();
    out.push('\n');
    table(
        &mut out,
        "CQs",
        &[
            "DEV", "CQN", "CQE", "UNPOLLED", "USERS", "POLL-CTX", "CTXN", "PID", "COMM",
        ],
        &rows,
    );
    let rows: Vec<Vec<String>> = s
        .srqs
        .iter()
        .map(|r| {
            vec![
                r.dev.clone(),
                opt(r.srqn),
                r.srq_type.map_or("-".into(), srq_type_name),
                opt(r.pdn),
                qpn_ranges(&r.qpns),
                opt(r.owner.pid),
                r.owner.comm_text(),
            ]
        })
        .collect();
    out.push('\n');
    table(
        &mut out,
        "SRQs",
        &["DEV", "SRQN", "TYPE", "PDN", "QPNS", "PID", "COMM"],
        &rows,
    );
    let rows: Vec<Vec<String>> = s
        .mrs
        .iter()
        .map(|r| {
            vec![
                r.dev.clone(),
                opt(r.mrn),
                opt_hex(r.rkey),
                opt_hex(r.lkey),
                opt_hex(r.iova),
                opt(r.len),
                opt(r.pdn),
                opt(r.owner.pid),
                r.owner.comm_text(),
            ]
        })
        .collect();
    out.push('\n');
    table(
        &mut out,
        "MRs",
        &[
            "DEV", "MRN", "RKEY", "LKEY", "IOVA", "LEN", "PDN", "PID", "COMM",
        ],
        &rows,
    );
    let rows: Vec<Vec<String>> = s
        .pds
        .iter()
        .map(|r| {
            vec![
                r.dev.clone(),
                opt(r.pdn),
                opt_hex(r.local_dma_lkey),
                opt(r.users),
                opt(r.ctxn),
                opt(r.owner.pid),
                r.owner.comm_text(),
            ]
        })
        .collect();
    out.push('\n');
    table(
        &mut out,
        "PDs",
        &[
            "DEV",
            "PDN",
            "LOCAL-DMA-LKEY",
            "USERS",
            "CTXN",
            "PID",
            "COMM",
        ],
        &rows,
    );
    let rows: Vec<Vec<String>> = s
        .cm_ids
        .iter()
        .map(|r| {
            vec![
                format!("{}/{}", r.dev, opt(r.port)),
                opt(r.cm_idn),
                r.ps.map_or("-".into(), ps_name),
                r.qp_type.map_or("-".into(), qp_type_name),
                r.state.map_or("-".into(), cm_state_name),
                opt(r.lqpn.map(Qpn)),
                opt(r.src),
                opt(r.dst),
                opt(r.owner.pid),
                r.owner.comm_text(),
            ]
        })
        .collect();
    out.push('\n');
    table(
        &mut out,
        "CM ids",
        &[
            "LINK", "CM-IDN", "PS", "TYPE", "STATE", "LQPN", "SRC", "DST", "PID", "COMM",
        ],
        &rows,
    );
    let rows: Vec<Vec<String>> = s
        .ctxs
        .iter()
        .map(|r| {
            vec![
                r.dev.clone(),
                opt(r.ctxn),
                opt(r.owner.pid),
                r.owner.comm_text(),
            ]
        })
        .collect();
    out.push('\n');
    table(&mut out, "Contexts", &["DEV", "CTXN", "PID", "COMM"], &rows);
    for n in &s.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddrs() {
        let mut v4 = [0u8; 128];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&4791u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(sockaddr(&v4), Some("10.0.0.1:4791".parse().unwrap()));
        let mut v6 = [0u8; 128];
        v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&7u16.to_be_bytes());
        v6[8..24].copy_from_slice(&"fe80::1".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(sockaddr(&v6), Some("[fe80::1]:7".parse().unwrap()));
        assert_eq!(sockaddr(&[0; 128]), None);
        assert_eq!(sockaddr(&v4[..6]), None);
    }

    #[test]
    fn names() {
        assert_eq!(qp_type_name(2), "RC");
        assert_eq!(qp_type_name(7), "type 7");
        assert_eq!(qp_state_name(3), "RTS");
        assert_eq!(qp_state_name(9), "state 9");
        assert_eq!(cm_state_name(8), "LISTEN");
        assert_eq!(ps_name(0x106), "TCP");
    }

    #[test]
    fn qp_numbers_as_rdma_core_prints_them() {
        assert_eq!(Qpn(0x12).to_string(), "0x000012");
        assert_eq!(Qpn(0xff_ffff).to_string(), "0xffffff");
        assert_eq!(Qpn(u32::MAX).to_string(), "0xffffffff");
        assert_eq!(qpn_of(&json!(17)), "0x000011");
        assert_eq!(qpn_of(&json!(null)), "-");
        assert_eq!(
            qpn_ranges(&[(5, 5), (16, 19)]),
            "0x000005,0x000010-0x000013"
        );
        // The host tables: LQPN, RQPN, an SRQ's QPs, a CM id's QP.
        let owner = Owner::default();
        let s = Snapshot {
            qps: vec![QpRes {
                dev: "rxe0".into(),
                lqpn: 18,
                rqpn: Some(17),
                ..Default::default()
            }],
            srqs: vec![SrqRes {
                qpns: vec![(18, 19)],
                owner: owner.clone(),
                ..Default::default()
            }],
            cm_ids: vec![CmIdRes {
                lqpn: Some(20),
                owner,
                ..Default::default()
            }],
            ..Default::default()
        };
        let t = text(&s, &|_| None, &|_| None);
        let row = |title: &str| {
            t.split(&format!("{title}:\n"))
                .nth(1)
                .and_then(|x| x.lines().nth(1))
                .unwrap_or_default()
                .to_string()
        };
        assert!(
            row("QPs").starts_with("  rxe0/-  0x000012  0x000011 "),
            "{t}"
        );
        assert!(row("SRQs").contains(" 0x000012-0x000013 "), "{t}");
        assert!(row("CM ids").contains(" 0x000014 "), "{t}");
    }

    #[test]
    fn tables_align() {
        let mut s = String::new();
        table(
            &mut s,
            "T",
            &["A", "BB", "C"],
            &[vec!["long".into(), "x".into(), "y".into()]],
        );
        assert_eq!(s, "T:\n  A     BB  C\n  long  x   y\n");
        let mut s = String::new();
        table(&mut s, "T", &["A"], &[]);
        assert_eq!(s, "T:\n  (none)\n");
    }
}
