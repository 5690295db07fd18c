//! An open device: the uverbs command fd and its user context, device and
//! port queries, the GID table, and the factories for PDs, CQs and
//! completion channels.
//!
//! The user context is the provider's: its [`Provider::open`] sends
//! GET_CONTEXT (rxe with no driver data; mlx5 with its own, then it maps
//! the UAR pages every mlx5 object uses); the
//! library adopts the async event fd of the answer.
//!
//! [`Provider::open`]: rverbs_provider::Provider::open

use std::ffi::CString;
use std::fmt;
use std::fs;
use std::ops::Deref;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use rverbs_abi::cmd::exec;
use rverbs_abi::device::{
    ExQueryDeviceResp, GidEntry as RawGidEntry, QueryDevice, QueryDeviceResp, QueryPort,
    QueryPortResp,
};
use rverbs_abi::Errno;
use zerocopy::{FromBytes, FromZeros};

use crate::device::{Device, Guid};
use crate::error::{Error, InvalidKind, Result};
use crate::gid::{Gid, GidEntry, GidType};
use crate::EfaAttr;

pub(crate) struct ContextInner {
    /// The provider's context (mlx5: UAR pages, doorbell records and
    /// the QP table); it holds the command fd too.
    provider: crate::provider::Ctx,
    fd: Arc<OwnedFd>,
    async_fd: OwnedFd,
    device: Device,
    num_comp_vectors: u32,
    /// What the device and kernel offer beyond the basics, asked once on
    /// first need ([`Context::caps`]).
    caps: std::sync::OnceLock<Caps>,
    /// Each port's link layer (index: port - 1), learnt from the first
    /// QUERY_PORT of that port: it is fixed for the life of the device.
    link_layers: [std::sync::OnceLock<LinkLayer>; CACHED_PORTS],
}

/// Ports whose link layer [`Context`] keeps (mlx5 functions have one port,
/// rxe devices one; a port past this is asked every time).
const CACHED_PORTS: usize = 4;

/// The capabilities the library itself acts on: the device's extended
/// capability flags and its on-demand paging support.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Caps {
    /// `device_cap_flags_ex` (0 where the kernel has no extended query).
    pub cap_flags_ex: u64,
    /// `odp_caps.general_caps`.
    pub odp_general: u64,
    /// Number of physical ports (0: the query failed).
    pub phys_port_cnt: u8,
}

impl Device {
    /// Opens the device: checks the ABI version and the driver, opens the
    /// character device (checked as [`Device::open_node`] says) and creates
    /// a user context (GET_CONTEXT).
    pub fn open(&self) -> Result<Context> {
        if self.abi_version() != rverbs_abi::IB_USER_VERBS_ABI_VERSION {
            return Err(Error::AbiVersion {
                device: self.name().to_string(),
                found: self.abi_version(),
                expected: rverbs_abi::IB_USER_VERBS_ABI_VERSION,
            });
        }
        let Some(supported) = crate::provider::driver_abi(self.driver()) else {
            return Err(Error::UnsupportedDriver {
                device: self.name().to_string(),
                driver: self.driver().to_string(),
            });
        };
        if !supported.contains(&self.driver_abi_version()) {
            return Err(Error::DriverAbiVersion {
                device: self.name().to_string(),
                found: self.driver_abi_version(),
                supported,
            });
        }
        Context::open(self.clone())
    }
}

/// An open RDMA device. Cheap to clone; every object created from it keeps
/// it open, so it closes when the last of them is dropped.
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.inner.device.name())
            .finish()
    }
}

impl Context {
    pub(crate) fn open(device: Device) -> Result<Context> {
        let fd = Arc::new(OwnedFd::from(device.open_node()?));
        let (provider, async_fd, num_comp_vectors) =
            crate::provider::Ctx::open(device.name(), device.driver(), &fd)?;
        rverbs_abi::fd::set_nonblocking(async_fd.as_fd())
            .map_err(Error::kernel("async fd O_NONBLOCK"))?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                provider,
                fd,
                async_fd,
                device,
                num_comp_vectors,
                caps: std::sync::OnceLock::new(),
                link_layers: Default::default(),
            }),
        })
    }

    /// The device this context was opened on.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }

    /// Number of completion vectors.
    pub fn num_comp_vectors(&self) -> u32 {
        self.inner.num_comp_vectors
    }

    /// Whether `self` and `other` are the same open context.
    pub fn same(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The uverbs command fd.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }

    /// The provider's context: every create goes through it.
    pub(crate) fn provider(&self) -> &crate::provider::Ctx {
        &self.inner.provider
    }

    /// The uverbs command fd (`struct ibv_context`'s `cmd_fd`, which the C
    /// ABI library hands to C programs). Borrowed: it stays the context's;
    /// commands written to it behind the library's back are the writer's
    /// responsibility.
    pub fn cmd_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }

    /// The asynchronous event fd (non-blocking; readable when an event is
    /// pending): register it with `poll`/`epoll` and read events with
    /// [`Context::try_get_async_event`] (see [`crate::event`]).
    pub fn async_fd(&self) -> BorrowedFd<'_> {
        self.inner.async_fd.as_fd()
    }

    /// The EFA device attributes (`max_rdma_size`, RDMA READ and WRITE, RNR
    /// retry, the source GID in completions, ...: what libefa's
    /// `efadv_query_device` reports), on an EFA device; `None` on any
    /// other. Read when the context was opened: no command.
    pub fn efa_attr(&self) -> Option<EfaAttr> {
        self.provider().efa_attr()
    }

    /// Queries the device attributes: the extended command where the kernel
    /// has it (it adds timestamp and capability fields), the legacy one
    /// otherwise.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let mut ex = ExQueryDeviceResp::new_zeroed();
        // The provider sends it, asking for its driver's part (mlx5:
        // offload capabilities) as its C library does.
        match self.provider().query_device_ex() {
            Ok(r) => {
                ex = r;
                let attr = DeviceAttr {
                    raw: ex,
                    extended: true,
                    fw_bytes: self.efa_attr().is_some(),
                };
                self.remember_caps(&attr);
                Ok(attr)
            }
            Err(Errno::EOPNOTSUPP | Errno::ENOSYS | Errno::EINVAL) => {
                let base = exec(self.fd(), &QueryDevice::default(), &mut [])
                    .map_err(Error::kernel("query_device"))?;
                ex.base = base;
                let attr = DeviceAttr {
                    raw: ex,
                    extended: false,
                    fw_bytes: self.efa_attr().is_some(),
                };
                self.remember_caps(&attr);
                Ok(attr)
            }
            Err(e) => Err(Error::kernel("query_device_ex")(e)),
        }
    }

    /// The device's capabilities the library acts on, queried (the
    /// extended QUERY_DEVICE) the first time they are
    /// needed and kept. If the query fails, the capabilities count as
    /// absent (and the query is tried again next time).
    pub(crate) fn caps(&self) -> Caps {
        if let Some(c) = self.inner.caps.get() {
            return *c;
        }
        match self.query_device() {
            // query_device keeps them.
            Ok(attr) => self.remember_caps(&attr),
            Err(_) => Caps::default(),
        }
    }

    /// Keeps the capabilities of `attr` (the first query's; they do not
    /// change) and returns those kept.
    fn remember_caps(&self, attr: &DeviceAttr) -> Caps {
        let (cap_flags_ex, odp_general) = attr.ex().map_or((0, 0), |ex| {
            (ex.device_cap_flags_ex, ex.odp_caps.general_caps)
        });
        let caps = Caps {
            cap_flags_ex,
            odp_general,
            phys_port_cnt: attr.phys_port_cnt,
        };
        *self.inner.caps.get_or_init(|| caps)
    }

    /// Queries port `port` (from 1): one `UVERBS_METHOD_QUERY_PORT` ioctl,
    /// which also answers [`PortAttr::port_cap_flags2`] (as libibverbs
    /// asks), or the `write()` command where the kernel lacks the method.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        let driver_id = self.inner.device.driver().id().unwrap_or(0);
        let attr = match crate::sys::cmd::query_port_ex(self.fd(), driver_id, port) {
            Ok(buf) => port_attr_ex(&buf)?,
            Err(e) if no_ioctl(e) => {
                let cmd = QueryPort {
                    port_num: port,
                    ..Default::default()
                };
                let raw = exec(self.fd(), &cmd, &mut []).map_err(Error::kernel("query_port"))?;
                PortAttr { raw, cap_flags2: 0 }
            }
            Err(e) => return Err(Error::kernel("query_port")(e)),
        };
        if let Some(c) = usize::from(port)
            .checked_sub(1)
            .and_then(|i| self.inner.link_layers.get(i))
        {
            let _ = c.set(attr.link_layer());
        }
        Ok(attr)
    }

    /// Port `port`'s link layer: from the first QUERY_PORT of that port
    /// (any [`Context::query_port`] call), asked now if there was none.
    pub(crate) fn link_layer(&self, port: u8) -> Result<LinkLayer> {
        let cached = usize::from(port)
            .checked_sub(1)
            .and_then(|i| self.inner.link_layers.get(i))
            .and_then(|c| c.get().copied());
        match cached {
            Some(l) => Ok(l),
            None => Ok(self.query_port(port)?.link_layer()),
        }
    }

    /// The number of physical ports (`phys_port_cnt` of
    /// [`Context::query_device`]), kept from the first query that
    /// succeeded.
    pub fn phys_port_cnt(&self) -> Result<u8> {
        match self.caps().phys_port_cnt {
            0 => Ok(self.query_device()?.phys_port_cnt),
            n => Ok(n),
        }
    }

    /// The valid entries of every port's GID table, through the kernel's
    /// `UVERBS_METHOD_QUERY_GID_TABLE`. Where the kernel has no such method
    /// (before Linux 5.9, or without ioctl support: `ENOTTY`,
    /// `EOPNOTSUPP`, `EPROTONOSUPPORT`) the table is read from sysfs as
    /// libibverbs does: `ports/<p>/gids/<i>` (all-zero GIDs are empty
    /// slots), their type from `gid_attrs/types/<i>` and their netdev from
    /// `gid_attrs/ndevs/<i>`.
    pub fn query_gid_table(&self) -> Result<Vec<GidEntry>> {
        // Devices have a few valid GIDs and tables of hundreds of slots
        // (rxe: 1024 of 32 bytes): ask for a few first. The kernel refuses
        // an array shorter than its valid entries with EINVAL; then the
        // whole table is asked for.
        let mut few = [RawGidEntry::default(); FEW_GIDS];
        match self.gid_table_ioctl(&mut few) {
            Ok(n) => return Ok(few[..n].iter().map(gid_entry).collect()),
            Err(Errno::EINVAL) => {}
            Err(e) if no_ioctl(e) => {
                let dir = crate::device::ibdev_dir(self.inner.device.name());
                return gid_table_from_sysfs(&dir, &self.ports()?);
            }
            Err(e) => return Err(Error::kernel("query_gid_table")(e)),
        }
        let max: usize = self
            .ports()?
            .iter()
            .map(|(_, p)| p.gid_tbl_len as usize)
            .sum();
        if max <= FEW_GIDS {
            return Err(Error::kernel("query_gid_table")(Errno::EINVAL));
        }
        let mut raw = vec![RawGidEntry::default(); max];
        let n = self
            .gid_table_ioctl(&mut raw)
            .map_err(Error::kernel("query_gid_table"))?;
        Ok(raw[..n].iter().map(gid_entry).collect())
    }

    /// Every port's number and attributes.
    fn ports(&self) -> Result<Vec<(u8, PortAttr)>> {
        let attr = self.query_device()?;
        (1..=attr.phys_port_cnt)
            .map(|port| Ok((port, self.query_port(port)?)))
            .collect()
    }

    /// `UVERBS_METHOD_QUERY_GID_TABLE` into `raw`: how many entries the
    /// kernel wrote.
    fn gid_table_ioctl(&self, raw: &mut [RawGidEntry]) -> std::result::Result<usize, Errno> {
        let len = raw.len();
        let driver_id = self.inner.device.driver().id().unwrap_or(0);
        let n = crate::sys::cmd::query_gid_table(self.fd(), driver_id, raw)?;
        Ok(usize::try_from(n).map_or(len, |n| n.min(len)))
    }

    /// `port_cap_flags2` of `port` (`IBV_PORT_*_SUP` bits of the second
    /// capability word), which only the ioctl `UVERBS_METHOD_QUERY_PORT`
    /// reports; an error where the kernel lacks the method (libibverbs
    /// then reports 0).
    pub fn port_cap_flags2(&self, port: u8) -> Result<u16> {
        let driver_id = self.inner.device.driver().id().unwrap_or(0);
        let buf = crate::sys::cmd::query_port_ex(self.fd(), driver_id, port)
            .map_err(Error::kernel("query_port (ioctl)"))?;
        Ok(port_attr_ex(&buf)?.cap_flags2)
    }

    /// The GID entry at `index` of `port`, asked for alone through the
    /// kernel's `UVERBS_METHOD_QUERY_GID_ENTRY` (as libibverbs'
    /// `ibv_query_gid_ex` does), or read from sysfs where the kernel lacks
    /// the method (see [`Context::query_gid_table`]). An empty slot, an
    /// index past the table or a port the device lacks is
    /// [`Error::InvalidArgument`].
    pub fn query_gid_entry(&self, port: u8, index: u32) -> Result<GidEntry> {
        let mut raw = RawGidEntry::default();
        let driver_id = self.inner.device.driver().id().unwrap_or(0);
        let res = crate::sys::cmd::query_gid_entry(self.fd(), driver_id, port, index, &mut raw);
        let no_gid = || {
            Error::invalid_as(
                InvalidKind::NotPresent,
                format!("port {port} has no GID at index {index}"),
            )
        };
        match res {
            Ok(()) => Ok(gid_entry(&raw)),
            // An empty slot (ENODATA), an index past the table or a port
            // the device lacks (EINVAL).
            Err(Errno::ENODATA | Errno::EINVAL) => Err(no_gid()),
            Err(e) if no_ioctl(e) => {
                // The port's link layer (kept from an earlier QUERY_PORT)
                // names the GID type; a slot past the table has no file.
                let ethernet = self.link_layer(port)? == LinkLayer::Ethernet;
                let dir = crate::device::ibdev_dir(self.inner.device.name());
                match gid_entry_from_sysfs(&dir, port, ethernet, index) {
                    Ok(e) => e.ok_or_else(no_gid),
                    Err(Error::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound =>
                    {
                        Err(no_gid())
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(Error::kernel("query_gid_entry")(e)),
        }
    }

    /// The GID index to use on `port` when none is given: a RoCE v2 GID
    /// holding an IPv4 address if there is one (what RoCE deployments route),
    /// else any RoCE v2 GID, else the first valid GID.
    pub fn default_gid_index(&self, port: u8) -> Result<u8> {
        let table: Vec<GidEntry> = self
            .query_gid_table()?
            .into_iter()
            .filter(|e| e.port == port as u32)
            .collect();
        let pick = table
            .iter()
            .find(|e| e.gid_type == GidType::RoceV2 && e.gid.to_ipv4().is_some())
            .or_else(|| table.iter().find(|e| e.gid_type == GidType::RoceV2))
            .or_else(|| table.first())
            .ok_or_else(|| {
                Error::invalid_as(
                    InvalidKind::NotPresent,
                    format!("port {port} has no valid GID"),
                )
            })?;
        u8::try_from(pick.index)
            .map_err(|_| Error::invalid_as(InvalidKind::TooLarge, "GID index above 255"))
    }

    /// The GID at `index` of `port`; an error if that slot is empty. The
    /// index has the type of [`crate::ConnectOpts::sgid_index`] and
    /// [`crate::GlobalRoute::sgid_index`] (the kernel ABI's `u8`).
    pub fn query_gid(&self, port: u8, index: u8) -> Result<Gid> {
        Ok(self.query_gid_entry(port, u32::from(index))?.gid)
    }
}

/// How many GID entries [`Context::query_gid_table`] asks for first.
const FEW_GIDS: usize = 16;

/// Whether `e` says the kernel has no such ioctl method (before Linux 5.9,
/// or without ioctl support).
fn no_ioctl(e: Errno) -> bool {
    matches!(
        e,
        Errno::ENOTTY | Errno::EOPNOTSUPP | Errno::EPROTONOSUPPORT
    )
}

/// The answer of `UVERBS_METHOD_QUERY_PORT` (`ib_uverbs_query_port_resp_ex`:
/// the 40-byte legacy answer, then `port_cap_flags2`) as a [`PortAttr`].
fn port_attr_ex(buf: &[u8]) -> Result<PortAttr> {
    let short = || Error::Unusable("query_port: a short answer".into());
    let (raw, rest) = QueryPortResp::read_from_prefix(buf).map_err(|_| short())?;
    let flags2 = rest.get(..2).ok_or_else(short)?;
    Ok(PortAttr {
        raw,
        cap_flags2: u16::from_ne_bytes([flags2[0], flags2[1]]),
    })
}

/// A kernel GID entry as a [`GidEntry`].
fn gid_entry(e: &RawGidEntry) -> GidEntry {
    let mut g = [0u8; 16];
    g[..8].copy_from_slice(&e.gid[0].to_ne_bytes());
    g[8..].copy_from_slice(&e.gid[1].to_ne_bytes());
    GidEntry {
        gid: Gid(g),
        index: e.gid_index,
        port: e.port_num,
        gid_type: GidType::from_raw(e.gid_type),
        netdev_ifindex: e.netdev_ifindex,
    }
}

/// Parses a GID as sysfs prints it: eight groups of four hex digits
/// joined by `:` (`fe80:0000:0000:0000:0e42:a1ff:fefb:1234`).
fn parse_sysfs_gid(s: &str) -> Option<Gid> {
    let mut g = [0u8; 16];
    let mut groups = s.split(':');
    for chunk in g.chunks_exact_mut(2) {
        let part = groups.next()?;
        if part.is_empty() || part.len() > 4 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let v = u16::from_str_radix(part, 16).ok()?;
        chunk.copy_from_slice(&v.to_be_bytes());
    }
    groups.next().is_none().then_some(Gid(g))
}

/// An unreadable or malformed sysfs file, as an [`Error::Io`].
fn sysfs_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        what: path.display().to_string(),
        source,
    }
}

/// The GID tables of `ports` (number and attributes) of the ibdev whose
/// sysfs directory is `dir`, read from sysfs.
fn gid_table_from_sysfs(dir: &Path, ports: &[(u8, PortAttr)]) -> Result<Vec<GidEntry>> {
    let mut out = Vec::new();
    for (port, attr) in ports {
        for index in 0..attr.gid_tbl_len {
            let ethernet = attr.link_layer() == LinkLayer::Ethernet;
            out.extend(gid_entry_from_sysfs(dir, *port, ethernet, index)?);
        }
    }
    Ok(out)
}

/// GID `index` of `port` (an Ethernet port if `ethernet`) of the ibdev
/// whose sysfs directory is `dir`, read from sysfs: `None` for an empty
/// slot.
fn gid_entry_from_sysfs(
    dir: &Path,
    port: u8,
    ethernet: bool,
    index: u32,
) -> Result<Option<GidEntry>> {
    let pdir = dir.join(format!("ports/{port}"));
    let attrs_dir = pdir.join("gid_attrs");
    // "IB/RoCE v1" names the same type on both link layers.
    let v1 = if ethernet {
        GidType::RoceV1
    } else {
        GidType::Ib
    };
    let path = pdir.join(format!("gids/{index}"));
    let text = fs::read_to_string(&path).map_err(|e| sysfs_error(&path, e))?;
    let gid = parse_sysfs_gid(text.trim()).ok_or_else(|| {
        let msg = format!("not a GID: {:?}", text.trim());
        sysfs_error(
            &path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, msg),
        )
    })?;
    if gid.is_zero() {
        return Ok(None);
    }
    let tpath = attrs_dir.join(format!("types/{index}"));
    let gid_type = match fs::read_to_string(&tpath) {
        Ok(t) => match t.trim() {
            "IB/RoCE v1" => v1,
            "RoCE v2" => GidType::RoceV2,
            other => {
                let msg = format!("unknown GID type {other:?}");
                return Err(sysfs_error(
                    &tpath,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, msg),
                ));
            }
        },
        // No gid_attrs at all (old kernels, InfiniBand-only drivers): the
        // one type there is.
        Err(_) if !attrs_dir.exists() => v1,
        Err(e) => return Err(sysfs_error(&tpath, e)),
    };
    // Entries without a netdev fail to read (or are absent): 0.
    let netdev_ifindex = fs::read_to_string(attrs_dir.join(format!("ndevs/{index}")))
        .ok()
        .and_then(|name| CString::new(name.trim()).ok())
        .map(|name| crate::sys::if_nametoindex(&name))
        .unwrap_or(0);
    Ok(Some(GidEntry {
        gid,
        index,
        port: u32::from(port),
        gid_type,
        netdev_ifindex,
    }))
}

/// Device attributes (`ibv_device_attr` and its extension). Dereferences to
/// the kernel's `ib_uverbs_query_device_resp` fields
/// ([`abi::QueryDeviceResp`](crate::abi::QueryDeviceResp)).
#[derive(Debug, Clone, Copy)]
pub struct DeviceAttr {
    raw: ExQueryDeviceResp,
    extended: bool,
    /// The firmware version is four bytes (EFA's, as libefa prints it).
    fw_bytes: bool,
}

impl Deref for DeviceAttr {
    type Target = QueryDeviceResp;
    fn deref(&self) -> &QueryDeviceResp {
        &self.raw.base
    }
}

impl DeviceAttr {
    /// Firmware version as `major.minor.sub_minor` (what `ibv_devinfo`
    /// prints; on EFA its four bytes `a.b.c.d`, as libefa prints them).
    pub fn fw_ver(&self) -> String {
        let v = self.raw.base.fw_ver;
        if self.fw_bytes {
            let b = v.to_ne_bytes();
            return format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3]);
        }
        format!(
            "{}.{}.{}",
            (v >> 32) & 0xffff,
            (v >> 16) & 0xffff,
            v & 0xffff
        )
    }
    /// Node GUID.
    pub fn node_guid(&self) -> Guid {
        Guid::from_raw_be(self.raw.base.node_guid)
    }
    /// System image GUID.
    pub fn sys_image_guid(&self) -> Guid {
        Guid::from_raw_be(self.raw.base.sys_image_guid)
    }
    /// The extended attributes, if the kernel answered the extended query.
    pub fn ex(&self) -> Option<&ExQueryDeviceResp> {
        self.extended.then_some(&self.raw)
    }
}

/// Port attributes (`ibv_port_attr`). Dereferences to the kernel's
/// `ib_uverbs_query_port_resp` fields
/// ([`abi::QueryPortResp`](crate::abi::QueryPortResp)); the methods decode
/// the enums.
#[derive(Debug, Clone, Copy)]
pub struct PortAttr {
    raw: QueryPortResp,
    cap_flags2: u16,
}

impl Deref for PortAttr {
    type Target = QueryPortResp;
    fn deref(&self) -> &QueryPortResp {
        &self.raw
    }
}

/// Logical port state (`enum ib_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// No change.
    Nop,
    /// Link down.
    Down,
    /// Link up, not yet configured.
    Init,
    /// Armed.
    Armed,
    /// Active: traffic flows.
    Active,
    /// Active, deferred.
    ActiveDefer,
    /// A value this crate does not know.
    Other(u8),
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            PortState::Nop => "PORT_NOP",
            PortState::Down => "PORT_DOWN",
            PortState::Init => "PORT_INIT",
            PortState::Armed => "PORT_ARMED",
            PortState::Active => "PORT_ACTIVE",
            PortState::ActiveDefer => "PORT_ACTIVE_DEFER",
            PortState::Other(v) => return write!(f, "state {v}"),
        };
        f.write_str(s)
    }
}

/// The port's link layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkLayer {
    /// InfiniBand.
    InfiniBand,
    /// Ethernet (RoCE).
    Ethernet,
    /// Unspecified.
    Unspecified,
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::Unspecified => "Unknown",
        })
    }
}

impl PortAttr {
    /// `port_cap_flags2`, the second capability word (`IBV_PORT_*_SUP`
    /// bits), which only the kernel's `UVERBS_METHOD_QUERY_PORT` ioctl
    /// reports: 0 where the kernel lacks it, as libibverbs reports it.
    pub fn port_cap_flags2(&self) -> u16 {
        self.cap_flags2
    }

    /// Logical state.
    pub fn state(&self) -> PortState {
        match self.raw.state {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            v => PortState::Other(v),
        }
    }
    /// Largest MTU the port supports.
    pub fn max_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.raw.max_mtu)
    }
    /// MTU in use.
    pub fn active_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.raw.active_mtu)
    }
    /// Link layer.
    pub fn link_layer(&self) -> LinkLayer {
        match self.raw.link_layer {
            rverbs_abi::device::IB_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
            rverbs_abi::device::IB_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            _ => LinkLayer::Unspecified,
        }
    }
}

/// An MTU (`enum ib_mtu`): a port's largest and active MTU, a QP's path
/// MTU (re-exported by [`crate::qp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// From the kernel's encoding (1..=5).
    pub fn from_raw(v: u8) -> Option<Mtu> {
        Some(match v {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// From a byte count (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes(n: u32) -> Option<Mtu> {
        Some(match n {
            256 => Mtu::Mtu256,
            512 => Mtu::Mtu512,
            1024 => Mtu::Mtu1024,
            2048 => Mtu::Mtu2048,
            4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// In bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Driver;
    use crate::test_util::{fd0_state, TempTree};

    /// A context whose command fd is `/dev/null`, which takes every
    /// command and answers none: as if a forged node had been opened.
    fn null_context() -> Context {
        let null = |write| {
            OwnedFd::from(
                fs::File::options()
                    .read(true)
                    .write(write)
                    .open("/dev/null")
                    .unwrap(),
            )
        };
        let fd = Arc::new(null(true));
        Context {
            inner: Arc::new(ContextInner {
                provider: crate::provider::Ctx::Rxe(rverbs_rxe::Rxe::new(Arc::clone(&fd))),
                fd,
                async_fd: null(false),
                device: Device::for_tests("null0", Driver::Rxe, Path::new("/dev/null")),
                num_comp_vectors: 1,
                caps: std::sync::OnceLock::new(),
                link_layers: Default::default(),
            }),
        }
    }

    /// CREATE_COMP_CHANNEL's fd field is prefilled with -1; an answer that
    /// leaves it (nothing wrote it) is refused instead of adopting fd 0,
    /// which the channel would then close (or the process abort, with Rust's
    /// I/O safety check, as a second owner of fd 0 goes).
    #[test]
    fn comp_channel_without_an_fd_is_refused() {
        let before = fd0_state();
        let ctx = null_context();
        let e = ctx.create_comp_channel().unwrap_err();
        assert!(
            matches!(
                e,
                Error::NoFdInResponse {
                    op: "create_comp_channel",
                    field: "fd",
                    value: -1
                }
            ),
            "{e}"
        );
        drop(ctx);
        assert_eq!(fd0_state(), before);
    }

    #[test]
    fn sysfs_gid_parse() {
        let g = parse_sysfs_gid("fe80:0000:0000:0000:0e42:a1ff:fefb:1234").unwrap();
        assert_eq!(g, "fe80::e42:a1ff:fefb:1234".parse().unwrap());
        let v4 = parse_sysfs_gid("0000:0000:0000:0000:0000:ffff:0a00:0001").unwrap();
        assert_eq!(v4.to_ipv4(), Some(std::net::Ipv4Addr::new(10, 0, 0, 1)));
        assert!(parse_sysfs_gid("0000:0000:0000:0000:0000:0000:0000:0000")
            .unwrap()
            .is_zero());
        assert_eq!(parse_sysfs_gid("fe80::1"), None);
        assert_eq!(parse_sysfs_gid("fe80:0:0:0:0:0:0:1:2"), None);
        assert_eq!(parse_sysfs_gid("fe80:0:0:0:0:0:0:1x"), None);
        assert_eq!(parse_sysfs_gid("fe80:0:0:0:0:0:0:10000"), None);
        assert_eq!(parse_sysfs_gid(""), None);
    }

    fn port(gid_tbl_len: u32, link_layer: u8) -> PortAttr {
        let mut p = QueryPortResp::new_zeroed();
        p.gid_tbl_len = gid_tbl_len;
        p.link_layer = link_layer;
        PortAttr {
            raw: p,
            cap_flags2: 0,
        }
    }

    #[test]
    fn the_query_port_ioctl_answer_carries_flags2_after_the_legacy_one() {
        let legacy = size_of::<QueryPortResp>();
        let mut buf = vec![0u8; legacy + 8];
        // gid_tbl_len, after four u32 counters.
        buf[16..20].copy_from_slice(&3u32.to_ne_bytes());
        buf[legacy..legacy + 2].copy_from_slice(&0x0a0bu16.to_ne_bytes());
        let a = port_attr_ex(&buf).unwrap();
        assert_eq!(a.port_cap_flags2(), 0x0a0b);
        assert_eq!(a.gid_tbl_len, 3);
        assert!(port_attr_ex(&buf[..legacy + 1]).is_err());
        assert!(port_attr_ex(&buf[..legacy - 1]).is_err());
    }

    #[test]
    fn gid_table_from_a_sysfs_tree() {
        use rverbs_abi::device::{IB_LINK_LAYER_ETHERNET, IB_LINK_LAYER_INFINIBAND};
        let t = TempTree::new("gids");
        // Port 1: InfiniBand, no gid_attrs (as the mlx5 emulator's tree).
        t.file(
            "ports/1/gids/0",
            "fe80:0000:0000:0000:0c42:a103:00fb:1234\n",
        );
        t.file(
            "ports/1/gids/1",
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        );
        t.file(
            "ports/1/gids/2",
            "fe80:0000:0000:0000:0c42:a103:00fb:5678\n",
        );
        // Port 2: Ethernet with types and netdevs.
        t.file(
            "ports/2/gids/0",
            "fe80:0000:0000:0000:5054:00ff:fe12:3456\n",
        );
        t.file("ports/2/gid_attrs/types/0", "IB/RoCE v1\n");
        t.file("ports/2/gid_attrs/ndevs/0", "lo\n");
        t.file(
            "ports/2/gids/1",
            "0000:0000:0000:0000:0000:ffff:0a00:0001\n",
        );
        t.file("ports/2/gid_attrs/types/1", "RoCE v2\n");
        t.file("ports/2/gid_attrs/ndevs/1", "no-such-netdev0\n");
        let ports = [
            (1, port(3, IB_LINK_LAYER_INFINIBAND)),
            (2, port(2, IB_LINK_LAYER_ETHERNET)),
        ];
        let table = gid_table_from_sysfs(&t.0, &ports).unwrap();
        let lo = crate::sys::if_nametoindex(c"lo");
        assert_ne!(lo, 0);
        let got: Vec<(u32, u32, GidType, u32)> = table
            .iter()
            .map(|e| (e.port, e.index, e.gid_type, e.netdev_ifindex))
            .collect();
        assert_eq!(
            got,
            [
                (1, 0, GidType::Ib, 0),
                (1, 2, GidType::Ib, 0),
                (2, 0, GidType::RoceV1, lo),
                (2, 1, GidType::RoceV2, 0),
            ]
        );
        assert_eq!(table[3].gid.to_string(), "::ffff:10.0.0.1");

        // gid_attrs present but the type missing: an error, as in libibverbs.
        t.dir("ports/1/gid_attrs");
        assert!(matches!(
            gid_table_from_sysfs(&t.0, &ports[..1]),
            Err(Error::Io { .. })
        ));
        // A slot the table length promises but sysfs lacks: an error.
        let longer = [(2, port(3, IB_LINK_LAYER_ETHERNET))];
        let e = gid_table_from_sysfs(&t.0, &longer).unwrap_err();
        assert!(e.to_string().contains("gids/2"), "{e}");
        // Garbage in a GID file.
        t.file("ports/2/gids/0", "fe80::1\n");
        let e = gid_table_from_sysfs(&t.0, &ports[1..]).unwrap_err();
        assert!(e.to_string().contains("not a GID"), "{e}");
    }
}
