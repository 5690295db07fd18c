//! Setting a run up: opening the device and port ([`Opened`]) and creating
//! the buffer, CQs and QP ([`Parts`]).

use anyhow::{bail, Context as _, Result};
use rverbs::{AccessFlags, Context, Errno, Gid, LinkLayer, QpCap, QpInitAttr, QpType};

use super::plan::Plan;
use crate::common::page_size;

/// The opened device and the port's figures.
pub(super) struct Opened {
    pub(super) ctx: Context,
    pub(super) attr: rverbs::DeviceAttr,
    pub(super) port: rverbs::PortAttr,
    pub(super) gid_index: Option<u8>,
    pub(super) gid: Gid,
    pub(super) name: String,
}

pub(super) fn open(p: &Plan) -> Result<Opened> {
    let dev = match &p.dev {
        Some(name) => {
            rverbs::device(name).with_context(|| format!("IB device {name} not found"))?
        }
        None => rverbs::devices()
            .context("failed to get the RDMA device list")?
            .into_iter()
            .next()
            .context("no RDMA devices found")?,
    };
    let name = dev.name().to_string();
    let ctx = dev
        .open()
        .with_context(|| format!("couldn't get a context for {name}"))?;
    let attr = ctx.query_device().context("couldn't query the device")?;
    if p.ib_port > attr.phys_port_cnt {
        bail!(
            "-i/--ib-port {}: {name} has {} port(s)",
            p.ib_port,
            attr.phys_port_cnt
        );
    }
    let port = ctx
        .query_port(p.ib_port)
        .with_context(|| format!("couldn't query port {}", p.ib_port))?;
    let eth = port.link_layer() == LinkLayer::Ethernet;
    if !eth && port.lid == 0 {
        bail!(
            "port {} has no LID (is the subnet manager running?)",
            p.ib_port
        );
    }
    let gid_index = match p.gid_index {
        Some(i) => Some(i),
        None if eth => Some(
            ctx.default_gid_index(p.ib_port)
                .context("no usable GID on the port (give -x)")?,
        ),
        None => None,
    };
    let gid = match gid_index {
        Some(i) => ctx
            .query_gid(p.ib_port, i)
            .with_context(|| format!("-x/--gid-index {i}: can't read that GID"))?,
        None => Gid::ZERO,
    };
    Ok(Opened {
        ctx,
        attr,
        port,
        gid_index,
        gid,
        name,
    })
}

/// The verbs objects of a run before it connects: one buffer of two
/// halves (each the largest size, page-rounded), the send and receive
/// CQs, the RC QP.
pub(super) struct Parts {
    pub(super) mr: rverbs::Mr,
    pub(super) half: usize,
    pub(super) scq: rverbs::Cq,
    pub(super) rcq: rverbs::Cq,
    pub(super) qp: rverbs::Qp,
}

/// Creates a run's [`Parts`] on `o`, the buffer open to the peer with
/// `access` (and `LOCAL_WRITE`), its halves at least `min_half` bytes
/// (perftest's peer works within its cycle buffer, the larger page size,
/// from the address we announce). A QP refused with EINVAL while `-I`
/// asks for inline data is tried again without: if that works, the error
/// says the inline size is too large.
pub(super) fn create_parts_min(
    p: &Plan,
    o: &Opened,
    access: AccessFlags,
    min_half: u64,
) -> Result<Parts> {
    let page = page_size();
    let half = (p.max_size().max(64).max(min_half) as usize).div_ceil(page) * page;
    let pd = o.ctx.alloc_pd().context("couldn't allocate a PD")?;
    let mr = pd
        .alloc_mr(2 * half, AccessFlags::LOCAL_WRITE | access)
        .with_context(|| format!("couldn't register a {}-byte buffer", 2 * half))?;
    let scq = o
        .ctx
        .create_cq(p.tx_depth + 1)
        .context("couldn't create the send CQ")?;
    let rcq = o
        .ctx
        .create_cq(p.rx_depth + 1)
        .context("couldn't create the receive CQ")?;
    let cap = QpCap {
        max_send_wr: p.tx_depth,
        max_recv_wr: p.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: p.inline,
    };
    let attr = |cap| QpInitAttr {
        send_cq: &scq,
        recv_cq: &rcq,
        qp_type: QpType::Rc,
        cap,
        sq_sig_all: false,
    };
    let qp = match pd.create_qp(&attr(cap)) {
        Ok(q) => q,
        // The library names the device's limit where the provider knows it.
        Err(e) if p.inline > 0 && e.invalid_kind() == Some(rverbs::InvalidKind::TooLarge) => {
            bail!(
                "-I/--inline_size {} exceeds what the device allows inline ({e})",
                p.inline
            );
        }
        Err(e) if p.inline > 0 && e.errno() == Some(Errno::EINVAL) => {
            let probe = pd.create_qp(&attr(QpCap {
                max_inline_data: 0,
                ..cap
            }));
            if probe.is_ok() {
                bail!(
                    "-I/--inline_size {} exceeds what the device allows inline",
                    p.inline
                );
            }
            return Err(e).context("couldn't create the QP");
        }
        Err(e) => return Err(e).context("couldn't create the QP"),
    };
    Ok(Parts {
        mr,
        half,
        scq,
        rcq,
        qp,
    })
}

/// The device and port rdma_cm chose (`-R`), opened: like [`open`], with
/// the port's default GID (printed only).
pub(super) fn open_at(dev: &rverbs::Device, port_num: u8) -> Result<Opened> {
    let name = dev.name().to_string();
    let ctx = dev
        .open()
        .with_context(|| format!("couldn't get a context for {name}"))?;
    let attr = ctx.query_device().context("couldn't query the device")?;
    let port = ctx
        .query_port(port_num)
        .with_context(|| format!("couldn't query port {port_num}"))?;
    let gid_index = if port.link_layer() == LinkLayer::Ethernet {
        ctx.default_gid_index(port_num).ok()
    } else {
        None
    };
    let gid = match gid_index {
        Some(i) => ctx.query_gid(port_num, i).unwrap_or(Gid::ZERO),
        None => Gid::ZERO,
    };
    Ok(Opened {
        ctx,
        attr,
        port,
        gid_index,
        gid,
        name,
    })
}
