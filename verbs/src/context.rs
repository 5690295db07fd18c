//! An open device: the uverbs command fd and its user context, device and
//! port queries, the GID table, and the factories for PDs, CQs and
//! completion channels.

use std::fmt;
use std::fs::OpenOptions;
use std::ops::Deref;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use uverbs_abi::cmd::{nr, write_cmd, write_ex_cmd};
use uverbs_abi::device::{
    ExQueryDevice, ExQueryDeviceResp, GetContext, GetContextResp, GidEntry as RawGidEntry,
    QueryDevice, QueryDeviceResp, QueryPort, QueryPortResp,
};
use uverbs_abi::ioctl::{device_method, object, query_gid_table_attr as gt, IoctlCmd};
use uverbs_abi::Errno;
use zerocopy::FromZeros;

use crate::device::{Device, Guid};
use crate::error::{Error, Result};
use crate::gid::{Gid, GidEntry, GidType};

pub(crate) struct ContextInner {
    fd: OwnedFd,
    async_fd: OwnedFd,
    device: Device,
    num_comp_vectors: u32,
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
            .field("device", &self.inner.device.name)
            .finish()
    }
}

impl Context {
    pub(crate) fn open(device: Device) -> Result<Context> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&device.dev_path)
            .map_err(|source| Error::Io {
                what: device.dev_path.display().to_string(),
                source,
            })?;
        let fd = OwnedFd::from(file);
        let resp: GetContextResp = write_cmd(
            fd.as_fd(),
            nr::GET_CONTEXT,
            &GetContext::new_zeroed(),
            &[],
            &mut [],
        )
        .map_err(Error::kernel("get_context"))?;
        // SAFETY: the kernel just created this fd for us and nothing else owns it.
        let async_fd = unsafe { OwnedFd::from_raw_fd(resp.async_fd as i32) };
        crate::event::set_nonblocking(async_fd.as_fd())
            .map_err(Error::kernel("async fd O_NONBLOCK"))?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                fd,
                async_fd,
                device,
                num_comp_vectors: resp.num_comp_vectors,
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

    /// The asynchronous event fd (non-blocking; readable when an event is
    /// pending): register it with `poll`/`epoll` and read events with
    /// [`Context::try_get_async_event`] (see [`crate::event`]).
    pub fn async_fd(&self) -> BorrowedFd<'_> {
        self.inner.async_fd.as_fd()
    }

    /// Queries the device attributes: the extended command where the kernel
    /// has it (it adds timestamp and capability fields), the legacy one
    /// otherwise.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let mut ex = ExQueryDeviceResp::new_zeroed();
        match write_ex_cmd::<_, ExQueryDeviceResp>(
            self.fd(),
            nr::EX_QUERY_DEVICE,
            &ExQueryDevice::default(),
            &[],
            &mut [],
        ) {
            Ok(r) => {
                ex = r;
                Ok(DeviceAttr {
                    raw: ex,
                    extended: true,
                })
            }
            Err(Errno::EOPNOTSUPP | Errno::ENOSYS | Errno::EINVAL) => {
                let base: QueryDeviceResp = write_cmd(
                    self.fd(),
                    nr::QUERY_DEVICE,
                    &QueryDevice::default(),
                    &[],
                    &mut [],
                )
                .map_err(Error::kernel("query_device"))?;
                ex.base = base;
                Ok(DeviceAttr {
                    raw: ex,
                    extended: false,
                })
            }
            Err(e) => Err(Error::kernel("query_device_ex")(e)),
        }
    }

    /// Queries port `port` (from 1).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        let cmd = QueryPort {
            port_num: port,
            ..Default::default()
        };
        let raw: QueryPortResp = write_cmd(self.fd(), nr::QUERY_PORT, &cmd, &[], &mut [])
            .map_err(Error::kernel("query_port"))?;
        Ok(PortAttr(raw))
    }

    /// The valid entries of every port's GID table, through the kernel's
    /// `UVERBS_METHOD_QUERY_GID_TABLE`.
    pub fn query_gid_table(&self) -> Result<Vec<GidEntry>> {
        let attr = self.query_device()?;
        let mut max = 0usize;
        for port in 1..=attr.phys_port_cnt {
            max += self.query_port(port)?.gid_tbl_len as usize;
        }
        let mut raw = vec![RawGidEntry::default(); max.max(1)];
        let mut n: u64 = 0;
        {
            let bytes = zerocopy::IntoBytes::as_mut_bytes(raw.as_mut_slice());
            IoctlCmd::new(object::DEVICE, device_method::QUERY_GID_TABLE)
                .driver_id(self.inner.device.driver.id().unwrap_or(0))
                .in_u64(gt::ENTRY_SIZE, size_of::<RawGidEntry>() as u64)
                .in_u32(gt::FLAGS, 0)
                .out_bytes(gt::RESP_ENTRIES, bytes)
                .out_value(gt::RESP_NUM_ENTRIES, &mut n)
                .execute(self.fd())
                .map_err(Error::kernel("query_gid_table"))?;
        }
        let n = (n as usize).min(raw.len());
        Ok(raw[..n]
            .iter()
            .map(|e| {
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
            })
            .collect())
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
            .ok_or_else(|| Error::invalid(format!("port {port} has no valid GID")))?;
        u8::try_from(pick.index).map_err(|_| Error::invalid("GID index above 255"))
    }

    /// The GID at `index` of `port`; an error if that slot is empty.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        self.query_gid_table()?
            .into_iter()
            .find(|e| e.port == port as u32 && e.index == index)
            .map(|e| e.gid)
            .ok_or_else(|| Error::invalid(format!("port {port} has no GID at index {index}")))
    }
}

/// Device attributes (`ibv_device_attr` and its extension). Dereferences to
/// the kernel's `ib_uverbs_query_device_resp` fields.
#[derive(Debug, Clone, Copy)]
pub struct DeviceAttr {
    raw: ExQueryDeviceResp,
    extended: bool,
}

impl Deref for DeviceAttr {
    type Target = QueryDeviceResp;
    fn deref(&self) -> &QueryDeviceResp {
        &self.raw.base
    }
}

impl DeviceAttr {
    /// Firmware version as `major.minor.sub_minor` (what `ibv_devinfo` prints).
    pub fn fw_ver(&self) -> String {
        let v = self.raw.base.fw_ver;
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
/// `ib_uverbs_query_port_resp` fields; the methods decode the enums.
#[derive(Debug, Clone, Copy)]
pub struct PortAttr(pub QueryPortResp);

impl Deref for PortAttr {
    type Target = QueryPortResp;
    fn deref(&self) -> &QueryPortResp {
        &self.0
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
    /// Logical state.
    pub fn state(&self) -> PortState {
        match self.0.state {
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
    pub fn max_mtu(&self) -> Option<crate::qp::Mtu> {
        crate::qp::Mtu::from_raw(self.0.max_mtu)
    }
    /// MTU in use.
    pub fn active_mtu(&self) -> Option<crate::qp::Mtu> {
        crate::qp::Mtu::from_raw(self.0.active_mtu)
    }
    /// Link layer.
    pub fn link_layer(&self) -> LinkLayer {
        match self.0.link_layer {
            uverbs_abi::device::IB_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
            uverbs_abi::device::IB_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            _ => LinkLayer::Unspecified,
        }
    }
}
