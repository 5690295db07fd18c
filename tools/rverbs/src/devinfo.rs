//! `rverbs devices` and `rverbs devinfo`: the device list and the device and
//! port attributes, printed with the labels and value formats of
//! rdma-core's `ibv_devices` and `ibv_devinfo [-v]` (as of rdma-core 44),
//! from this stack's own queries.
//!
//! Every value comes from the kernel through `verbs` (query_device, the
//! extended query, query_port, the GID table) or sysfs, except:
//! - `port_cap_flags2`, which only the ioctl `UVERBS_METHOD_QUERY_PORT`
//!   returns ([`rverbs::Context::port_cap_flags2`]; 0 when the kernel lacks
//!   the method, as rdma-core's write() fallback leaves it);
//! - the TSO, RSS hash and packet-pacing capabilities, which no core uverbs
//!   response carries (mlx4/mlx5 providers fill them from their driver
//!   data): printed as 0, which is what every other provider (rxe among
//!   them) reports.

use std::fmt::Write as _;

use anyhow::{anyhow, bail, Result};
use rverbs::{Device, GidType, Guid, LinkLayer};
use rverbs_abi::device::ExQueryDeviceResp;

use crate::common::num;

/// Options of `rverbs devinfo` (those of `ibv_devinfo`).
#[derive(Debug, Clone, clap::Args)]
pub struct DevinfoArgs {
    /// Use RDMA device DEV (default: every device).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub dev: Option<String>,
    /// Show port PORT only (default: every port).
    #[arg(short = 'i', long = "ib-port", value_name = "PORT", value_parser = parse_port)]
    pub ib_port: Option<u8>,
    /// Print only the device names.
    #[arg(short = 'l', long = "list")]
    pub list: bool,
    /// Print every attribute of the device(s).
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
}

fn parse_port(s: &str) -> std::result::Result<u8, String> {
    match num::<u8>(s)? {
        0 => Err("the port number must be at least 1".into()),
        p => Ok(p),
    }
}

/// `rverbs devices`: every device's name and node GUID, as `ibv_devices`
/// prints them (the GUID as 16 hex digits in wire order).
pub fn run_devices() -> Result<()> {
    let devs = rverbs::devices()?;
    print!(
        "{}",
        devices_text(devs.iter().map(|d| (d.name(), d.node_guid())))
    );
    Ok(())
}

/// The `ibv_devices` table of `(name, node GUID)` pairs.
fn devices_text<'a>(devs: impl IntoIterator<Item = (&'a str, Guid)>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "    {:<16}\t   node GUID", "device");
    let _ = writeln!(s, "    {:<16}\t----------------", "------");
    for (name, guid) in devs {
        let _ = writeln!(s, "    {:<16}\t{:016x}", name, u64::from_be_bytes(guid.0));
    }
    s
}

/// `rverbs devinfo`: what `ibv_devinfo` prints, for one device (`-d`) or
/// all of them.
pub fn run_devinfo(a: &DevinfoArgs) -> Result<()> {
    let devs = rverbs::devices()?;
    if a.list {
        let n = devs.len();
        println!("{n} HCA{} found:", if n == 1 { "" } else { "s" });
        for d in &devs {
            println!("\t{}", d.name());
        }
        println!();
        return Ok(());
    }
    let chosen: Vec<&Device> = match &a.dev {
        Some(name) => vec![devs
            .iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| anyhow!("IB device '{name}' wasn't found"))?],
        None if devs.is_empty() => bail!("No IB devices found"),
        None => devs.iter().collect(),
    };
    for dev in chosen {
        // Each device's text is printed whole once every query succeeded.
        print!("{}", device_text(dev, a.ib_port, a.verbose)?);
    }
    Ok(())
}

/// The transport of a device: its name as `ibv_devinfo` prints it, and
/// its `ibv_transport_type` value ([`Device::transport_type`]).
fn transport(dev: &Device) -> (&'static str, i32) {
    let t = dev.transport_type();
    (transport_name(t), t)
}

fn transport_name(t: i32) -> &'static str {
    match t {
        0 => "InfiniBand",
        1 => "iWARP",
        2 => "usNIC",
        3 => "usNIC UDP",
        4 => "unspecified",
        _ => "invalid transport",
    }
}

/// The device's `board_id` sysfs file without its trailing newline; `None`
/// when it is absent or empty.
fn board_id(dev: &Device) -> Option<String> {
    let s = std::fs::read_to_string(dev.sysfs_dir().join("board_id")).ok()?;
    let s = s.strip_suffix('\n').unwrap_or(&s).to_string();
    (!s.is_empty()).then_some(s)
}

/// The fields of the extended device query that the kernel filled
/// (`response_length`), zero elsewhere, as rdma-core copies them.
fn filled_ex(ex: Option<&ExQueryDeviceResp>) -> ExQueryDeviceResp {
    let Some(ex) = ex else {
        return ExQueryDeviceResp::default();
    };
    let len = ex.response_length as usize;
    let mut out = *ex;
    macro_rules! keep {
        ($($field:ident),*) => {$(
            if len < std::mem::offset_of!(ExQueryDeviceResp, $field) + size_of_val(&ex.$field) {
                out.$field = Default::default();
            }
        )*};
    }
    keep!(
        odp_caps,
        timestamp_mask,
        hca_core_clock,
        device_cap_flags_ex,
        rss_caps,
        max_wq_type_rq,
        raw_packet_caps,
        tm_caps,
        cq_moderation_caps,
        max_dm_size,
        xrc_odp_caps
    );
    out
}

/// The whole `ibv_devinfo` text of one device.
/// EFA's own attributes (what `efadv_query_device` reports; rdma-core's
/// `ibv_devinfo` does not print them), after everything it prints.
fn efa_attr(o: &mut String, e: &rverbs::EfaAttr) {
    let yes = |b: bool| if b { "yes" } else { "no" };
    let _ = writeln!(o, "\tefa:");
    let _ = writeln!(o, "\t\tmax_sq_wr:\t\t{}", e.max_sq_wr);
    let _ = writeln!(o, "\t\tmax_rq_wr:\t\t{}", e.max_rq_wr);
    let _ = writeln!(o, "\t\tmax_sq_sge:\t\t{}", e.max_sq_sge);
    let _ = writeln!(o, "\t\tmax_rq_sge:\t\t{}", e.max_rq_sge);
    let _ = writeln!(o, "\t\tinline_buf_size:\t{}", e.inline_buf_size);
    let _ = writeln!(o, "\t\tmax_rdma_size:\t\t{}", e.max_rdma_size);
    let _ = writeln!(o, "\t\trdma_read:\t\t{}", yes(e.rdma_read));
    let _ = writeln!(o, "\t\trdma_write:\t\t{}", yes(e.rdma_write));
    let _ = writeln!(o, "\t\trnr_retry:\t\t{}", yes(e.rnr_retry));
    let _ = writeln!(o, "\t\tcq_with_sgid:\t\t{}", yes(e.cq_with_sgid));
    let _ = writeln!(o, "\t\tcq_notifications:\t{}", yes(e.cq_notifications));
    let _ = writeln!(
        o,
        "\t\tunsolicited_write_recv:\t{}",
        yes(e.unsolicited_write_recv)
    );
    let _ = writeln!(o, "\t\tmax_tx_batch:\t\t{}", e.max_tx_batch);
    let _ = writeln!(o, "\t\tmin_sq_wr:\t\t{}", e.min_sq_wr);
    let _ = writeln!(o, "\t\tsub_cqs_per_cq:\t\t{}", e.sub_cqs_per_cq);
}

fn device_text(dev: &Device, ib_port: Option<u8>, verbose: bool) -> Result<String> {
    let ctx = dev.open()?;
    let a = ctx.query_device()?;
    if let Some(p) = ib_port {
        if p > a.phys_port_cnt {
            bail!("Invalid port requested for device");
        }
    }
    let (tname, tnum) = transport(dev);
    let mut s = String::new();
    let o = &mut s;
    let _ = writeln!(o, "hca_id:\t{}", dev.name());
    let _ = writeln!(o, "\ttransport:\t\t\t{tname} ({tnum})");
    let fw = a.fw_ver();
    if !fw.is_empty() {
        let _ = writeln!(o, "\tfw_ver:\t\t\t\t{fw}");
    }
    let _ = writeln!(o, "\tnode_guid:\t\t\t{}", a.node_guid());
    let _ = writeln!(o, "\tsys_image_guid:\t\t\t{}", a.sys_image_guid());
    let _ = writeln!(o, "\tvendor_id:\t\t\t0x{:04x}", a.vendor_id);
    let _ = writeln!(o, "\tvendor_part_id:\t\t\t{}", a.vendor_part_id as i32);
    let _ = writeln!(o, "\thw_ver:\t\t\t\t0x{:X}", a.hw_ver);
    if let Some(b) = board_id(dev) {
        let _ = writeln!(o, "\tboard_id:\t\t\t{b}");
    }
    let _ = writeln!(o, "\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt);

    if verbose {
        let ex = filled_ex(a.ex());
        let d = |v: u32| v as i32;
        let _ = writeln!(o, "\tmax_mr_size:\t\t\t0x{:x}", a.max_mr_size);
        let _ = writeln!(o, "\tpage_size_cap:\t\t\t0x{:x}", a.page_size_cap);
        let _ = writeln!(o, "\tmax_qp:\t\t\t\t{}", d(a.max_qp));
        let _ = writeln!(o, "\tmax_qp_wr:\t\t\t{}", d(a.max_qp_wr));
        let _ = writeln!(o, "\tdevice_cap_flags:\t\t0x{:08x}", a.device_cap_flags);
        device_cap_flags(o, a.device_cap_flags);
        let _ = writeln!(o, "\tmax_sge:\t\t\t{}", d(a.max_sge));
        let _ = writeln!(o, "\tmax_sge_rd:\t\t\t{}", d(a.max_sge_rd));
        let _ = writeln!(o, "\tmax_cq:\t\t\t\t{}", d(a.max_cq));
        let _ = writeln!(o, "\tmax_cqe:\t\t\t{}", d(a.max_cqe));
        let _ = writeln!(o, "\tmax_mr:\t\t\t\t{}", d(a.max_mr));
        let _ = writeln!(o, "\tmax_pd:\t\t\t\t{}", d(a.max_pd));
        let _ = writeln!(o, "\tmax_qp_rd_atom:\t\t\t{}", d(a.max_qp_rd_atom));
        let _ = writeln!(o, "\tmax_ee_rd_atom:\t\t\t{}", d(a.max_ee_rd_atom));
        let _ = writeln!(o, "\tmax_res_rd_atom:\t\t{}", d(a.max_res_rd_atom));
        let _ = writeln!(o, "\tmax_qp_init_rd_atom:\t\t{}", d(a.max_qp_init_rd_atom));
        let _ = writeln!(o, "\tmax_ee_init_rd_atom:\t\t{}", d(a.max_ee_init_rd_atom));
        let _ = writeln!(
            o,
            "\tatomic_cap:\t\t\t{} ({})",
            atomic_cap_str(a.atomic_cap),
            d(a.atomic_cap)
        );
        let _ = writeln!(o, "\tmax_ee:\t\t\t\t{}", d(a.max_ee));
        let _ = writeln!(o, "\tmax_rdd:\t\t\t{}", d(a.max_rdd));
        let _ = writeln!(o, "\tmax_mw:\t\t\t\t{}", d(a.max_mw));
        let _ = writeln!(o, "\tmax_raw_ipv6_qp:\t\t{}", d(a.max_raw_ipv6_qp));
        let _ = writeln!(o, "\tmax_raw_ethy_qp:\t\t{}", d(a.max_raw_ethy_qp));
        let _ = writeln!(o, "\tmax_mcast_grp:\t\t\t{}", d(a.max_mcast_grp));
        let _ = writeln!(o, "\tmax_mcast_qp_attach:\t\t{}", d(a.max_mcast_qp_attach));
        let _ = writeln!(
            o,
            "\tmax_total_mcast_qp_attach:\t{}",
            d(a.max_total_mcast_qp_attach)
        );
        let _ = writeln!(o, "\tmax_ah:\t\t\t\t{}", d(a.max_ah));
        let _ = writeln!(o, "\tmax_fmr:\t\t\t{}", d(a.max_fmr));
        if a.max_fmr != 0 {
            let _ = writeln!(o, "\tmax_map_per_fmr:\t\t{}", d(a.max_map_per_fmr));
        }
        let _ = writeln!(o, "\tmax_srq:\t\t\t{}", d(a.max_srq));
        if a.max_srq != 0 {
            let _ = writeln!(o, "\tmax_srq_wr:\t\t\t{}", d(a.max_srq_wr));
            let _ = writeln!(o, "\tmax_srq_sge:\t\t\t{}", d(a.max_srq_sge));
        }
        let _ = writeln!(o, "\tmax_pkeys:\t\t\t{}", a.max_pkeys);
        let _ = writeln!(o, "\tlocal_ca_ack_delay:\t\t{}", a.local_ca_ack_delay);
        ex_caps(o, &ex);
        let _ = writeln!(
            o,
            "\tnum_comp_vectors:\t\t{}",
            ctx.num_comp_vectors() as i32
        );
    }

    for port in 1..=a.phys_port_cnt {
        if ib_port.is_some_and(|p| p != port) {
            continue;
        }
        let p = ctx.query_port(port)?;
        let _ = writeln!(o, "\t\tport:\t{port}");
        let _ = writeln!(
            o,
            "\t\t\tstate:\t\t\t{} ({})",
            port_state_str(p.state),
            p.state
        );
        let _ = writeln!(
            o,
            "\t\t\tmax_mtu:\t\t{} ({})",
            mtu_str(p.max_mtu),
            p.max_mtu
        );
        let _ = writeln!(
            o,
            "\t\t\tactive_mtu:\t\t{} ({})",
            mtu_str(p.active_mtu),
            p.active_mtu
        );
        let _ = writeln!(o, "\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
        let _ = writeln!(o, "\t\t\tport_lid:\t\t{}", p.lid);
        let _ = writeln!(o, "\t\t\tport_lmc:\t\t0x{:02x}", p.lmc);
        let _ = writeln!(o, "\t\t\tlink_layer:\t\t{}", link_layer_str(p.link_layer));
        if verbose {
            let flags2 = p.port_cap_flags2();
            let _ = writeln!(o, "\t\t\tmax_msg_sz:\t\t0x{:x}", p.max_msg_sz);
            let _ = writeln!(o, "\t\t\tport_cap_flags:\t\t0x{:08x}", p.port_cap_flags);
            let _ = writeln!(o, "\t\t\tport_cap_flags2:\t0x{flags2:04x}");
            let _ = writeln!(
                o,
                "\t\t\tmax_vl_num:\t\t{} ({})",
                vl_str(p.max_vl_num),
                p.max_vl_num
            );
            let _ = writeln!(o, "\t\t\tbad_pkey_cntr:\t\t0x{:x}", p.bad_pkey_cntr);
            let _ = writeln!(o, "\t\t\tqkey_viol_cntr:\t\t0x{:x}", p.qkey_viol_cntr);
            let _ = writeln!(o, "\t\t\tsm_sl:\t\t\t{}", p.sm_sl);
            let _ = writeln!(o, "\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len);
            let _ = writeln!(o, "\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len as i32);
            let _ = writeln!(o, "\t\t\tsubnet_timeout:\t\t{}", p.subnet_timeout);
            let _ = writeln!(o, "\t\t\tinit_type_reply:\t{}", p.init_type_reply);
            let _ = writeln!(
                o,
                "\t\t\tactive_width:\t\t{}X ({})",
                width_str(p.active_width),
                p.active_width
            );
            let _ = writeln!(
                o,
                "\t\t\tactive_speed:\t\t{} ({})",
                speed_str(p.active_speed),
                p.active_speed
            );
            if tnum == 0 {
                let _ = writeln!(
                    o,
                    "\t\t\tphys_state:\t\t{} ({})",
                    phys_state_str(p.phys_state),
                    p.phys_state
                );
            }
            let ethernet = p.link_layer() == LinkLayer::Ethernet;
            let mut gids: Vec<_> = ctx
                .query_gid_table()?
                .into_iter()
                .filter(|e| e.port == u32::from(port) && e.index < p.gid_tbl_len)
                .collect();
            gids.sort_by_key(|e| e.index);
            for e in gids {
                if let Some(line) = gid_line(e.index, &e.gid.0, e.gid_type, ethernet) {
                    let _ = writeln!(o, "{line}");
                }
            }
        }
        let _ = writeln!(o);
    }
    if verbose {
        if let Some(e) = ctx.efa_attr() {
            efa_attr(o, &e);
        }
    }
    Ok(s)
}

/// The extended capabilities block of `-v` (ODP, timestamps, clock, raw
/// packet, capability flags ex, TSO, RSS, WQ, packet pacing, tag matching,
/// CQ moderation, device memory).
fn ex_caps(o: &mut String, ex: &ExQueryDeviceResp) {
    let odp = &ex.odp_caps;
    let _ = writeln!(o, "\tgeneral_odp_caps:");
    if odp.general_caps & 1 != 0 {
        let _ = writeln!(o, "\t\t\t\t\tODP_SUPPORT");
    }
    if odp.general_caps & 2 != 0 {
        let _ = writeln!(o, "\t\t\t\t\tODP_SUPPORT_IMPLICIT");
    }
    if odp.general_caps & !3 != 0 {
        let _ = writeln!(o, "\t\t\t\t\tUnknown flags: 0x{:X}", odp.general_caps & !3);
    }
    for (name, caps) in [
        ("rc", odp.rc_odp_caps),
        ("uc", odp.uc_odp_caps),
        ("ud", odp.ud_odp_caps),
        ("xrc", ex.xrc_odp_caps),
    ] {
        let _ = writeln!(o, "\t{name}_odp_caps:");
        odp_transport_caps(o, caps);
    }
    if ex.timestamp_mask != 0 {
        let _ = writeln!(
            o,
            "\tcompletion timestamp_mask:\t\t\t0x{:016x}",
            ex.timestamp_mask
        );
    } else {
        let _ = writeln!(o, "\tcompletion_timestamp_mask not supported");
    }
    if ex.hca_core_clock != 0 {
        let _ = writeln!(o, "\thca_core_clock:\t\t\t{}kHZ", ex.hca_core_clock);
    } else {
        let _ = writeln!(o, "\tcore clock not supported");
    }
    if ex.raw_packet_caps != 0 {
        let _ = writeln!(o, "\traw packet caps:");
        for (bit, name) in [
            (0, "C-VLAN stripping offload"),
            (1, "Scatter FCS offload"),
            (2, "IP csum offload"),
            (3, "Delay drop"),
        ] {
            if ex.raw_packet_caps & (1 << bit) != 0 {
                let _ = writeln!(o, "\t\t\t\t\t{name}");
            }
        }
    }
    let _ = writeln!(
        o,
        "\tdevice_cap_flags_ex:\t\t0x{:X}",
        ex.device_cap_flags_ex
    );
    let hi = ex.device_cap_flags_ex & 0xffff_ffff_0000_0000;
    const RAW_SCATTER_FCS: u64 = 1 << 34;
    const PCI_WRITE_END_PADDING: u64 = 1 << 36;
    if hi & RAW_SCATTER_FCS != 0 {
        let _ = writeln!(o, "\t\t\t\t\tRAW_SCATTER_FCS");
    }
    if hi & PCI_WRITE_END_PADDING != 0 {
        let _ = writeln!(o, "\t\t\t\t\tPCI_WRITE_END_PADDING");
    }
    let unknown = hi & !(RAW_SCATTER_FCS | PCI_WRITE_END_PADDING);
    if unknown != 0 {
        let _ = writeln!(o, "\t\t\t\t\tUnknown flags: 0x{unknown:X}");
    }
    // TSO: provider data only (see the module docs).
    let _ = writeln!(o, "\ttso_caps:");
    let _ = writeln!(o, "\t\tmax_tso:\t\t\t0");
    let rss = &ex.rss_caps;
    let _ = writeln!(o, "\trss_caps:");
    let _ = writeln!(
        o,
        "\t\tmax_rwq_indirection_tables:\t\t\t{}",
        rss.max_rwq_indirection_tables
    );
    let _ = writeln!(
        o,
        "\t\tmax_rwq_indirection_table_size:\t\t\t{}",
        rss.max_rwq_indirection_table_size
    );
    // The hash function and fields: provider data only.
    let _ = writeln!(o, "\t\trx_hash_function:\t\t\t\t0x0");
    let _ = writeln!(o, "\t\trx_hash_fields_mask:\t\t\t\t0x0");
    supported_qpts(o, rss.supported_qpts);
    let _ = writeln!(o, "\tmax_wq_type_rq:\t\t\t{}", ex.max_wq_type_rq);
    // Packet pacing: provider data only.
    let _ = writeln!(o, "\tpacket_pacing_caps:");
    let _ = writeln!(o, "\t\tqp_rate_limit_min:\t0kbps");
    let _ = writeln!(o, "\t\tqp_rate_limit_max:\t0kbps");
    let tm = &ex.tm_caps;
    if tm.max_num_tags != 0 {
        let _ = writeln!(o, "\tmax_rndv_hdr_size:\t\t{}", tm.max_rndv_hdr_size);
        let _ = writeln!(o, "\tmax_num_tags:\t\t\t{}", tm.max_num_tags);
        let _ = writeln!(o, "\tmax_ops:\t\t\t{}", tm.max_ops);
        let _ = writeln!(o, "\tmax_sge:\t\t\t{}", tm.max_sge);
        let _ = writeln!(o, "\tflags:");
        if tm.flags & 1 != 0 {
            let _ = writeln!(o, "\t\t\t\t\tIBV_TM_CAP_RC");
        }
    } else {
        let _ = writeln!(o, "\ttag matching not supported");
    }
    let cqm = &ex.cq_moderation_caps;
    if cqm.max_cq_moderation_count != 0 && cqm.max_cq_moderation_period != 0 {
        let _ = writeln!(o, "\n\tcq moderation caps:");
        let _ = writeln!(o, "\t\tmax_cq_count:\t{}", cqm.max_cq_moderation_count);
        let _ = writeln!(
            o,
            "\t\tmax_cq_period:\t{} us\n",
            cqm.max_cq_moderation_period
        );
    }
    if ex.max_dm_size != 0 {
        let _ = writeln!(
            o,
            "\tmaximum available device memory:\t{}Bytes\n",
            ex.max_dm_size
        );
    }
}

/// The QP types of an RSS capability (`1 << IBV_QPT_*` bits).
fn supported_qpts(o: &mut String, qpts: u32) {
    const RAW_PACKET: u32 = 1 << 8;
    const UD: u32 = 1 << 4;
    if qpts == 0 {
        return;
    }
    let _ = writeln!(o, "\t\tsupported_qp:");
    if qpts & RAW_PACKET != 0 {
        let _ = writeln!(o, "\t\t\t\t\tSUPPORT_RAW_PACKET");
    }
    if qpts & UD != 0 {
        let _ = writeln!(o, "\t\t\t\t\tSUPPORT_UD");
    }
    if qpts & !(RAW_PACKET | UD) != 0 {
        let _ = writeln!(
            o,
            "\t\t\t\t\tUnknown flags: 0x{:X}",
            qpts & !(RAW_PACKET | UD)
        );
    }
}

fn odp_transport_caps(o: &mut String, caps: u32) {
    const NAMES: [&str; 6] = [
        "SUPPORT_SEND",
        "SUPPORT_RECV",
        "SUPPORT_WRITE",
        "SUPPORT_READ",
        "SUPPORT_ATOMIC",
        "SUPPORT_SRQ",
    ];
    if caps == 0 {
        let _ = writeln!(o, "\t\t\t\t\tNO SUPPORT");
        return;
    }
    for (bit, name) in NAMES.iter().enumerate() {
        if caps & (1 << bit) != 0 {
            let _ = writeln!(o, "\t\t\t\t\t{name}");
        }
    }
    if caps & !0x3f != 0 {
        let _ = writeln!(o, "\t\t\t\t\tUnknown flags: 0x{:X}", caps & !0x3f);
    }
}

/// The named `IBV_DEVICE_*` bits of `device_cap_flags`, in bit order.
const DEVICE_CAP_FLAGS: [(u32, &str); 24] = [
    (0, "RESIZE_MAX_WR"),
    (1, "BAD_PKEY_CNTR"),
    (2, "BAD_QKEY_CNTR"),
    (3, "RAW_MULTI"),
    (4, "AUTO_PATH_MIG"),
    (5, "CHANGE_PHY_PORT"),
    (6, "UD_AV_PORT_ENFORCE"),
    (7, "CURR_QP_STATE_MOD"),
    (8, "SHUTDOWN_PORT"),
    (9, "INIT_TYPE"),
    (10, "PORT_ACTIVE_EVENT"),
    (11, "SYS_IMAGE_GUID"),
    (12, "RC_RNR_NAK_GEN"),
    (13, "SRQ_RESIZE"),
    (14, "N_NOTIFY_CQ"),
    (17, "MEM_WINDOW"),
    (18, "UD_IP_CSUM"),
    (20, "XRC"),
    (21, "MEM_MGT_EXTENSIONS"),
    (23, "MEM_WINDOW_TYPE_2A"),
    (24, "MEM_WINDOW_TYPE_2B"),
    (25, "RC_IP_CSUM"),
    (26, "RAW_IP_CSUM"),
    (29, "MANAGED_FLOW_STEERING"),
];

fn device_cap_flags(o: &mut String, flags: u32) {
    let mut known = 0u32;
    for (bit, name) in DEVICE_CAP_FLAGS {
        known |= 1 << bit;
        if flags & (1 << bit) != 0 {
            let _ = writeln!(o, "\t\t\t\t\t{name}");
        }
    }
    if flags & !known != 0 {
        let _ = writeln!(o, "\t\t\t\t\tUnknown flags: 0x{:X}", flags & !known);
    }
}

fn atomic_cap_str(v: u32) -> &'static str {
    match v {
        0 => "ATOMIC_NONE",
        1 => "ATOMIC_HCA",
        2 => "ATOMIC_GLOB",
        _ => "invalid atomic capability",
    }
}

fn port_state_str(v: u8) -> &'static str {
    match v {
        1 => "PORT_DOWN",
        2 => "PORT_INIT",
        3 => "PORT_ARMED",
        4 => "PORT_ACTIVE",
        _ => "invalid state",
    }
}

fn phys_state_str(v: u8) -> &'static str {
    match v {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION TRAINNING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY TEST",
        _ => "invalid physical state",
    }
}

fn mtu_str(v: u8) -> &'static str {
    match v {
        1 => "256",
        2 => "512",
        3 => "1024",
        4 => "2048",
        5 => "4096",
        _ => "invalid MTU",
    }
}

fn width_str(v: u8) -> &'static str {
    match v {
        1 => "1",
        2 => "4",
        4 => "8",
        8 => "12",
        16 => "2",
        _ => "invalid width",
    }
}

fn speed_str(v: u8) -> &'static str {
    match v {
        1 => "2.5 Gbps",
        2 => "5.0 Gbps",
        4 | 8 => "10.0 Gbps",
        16 => "14.0 Gbps",
        32 => "25.0 Gbps",
        64 => "50.0 Gbps",
        128 => "100.0 Gbps",
        _ => "invalid speed",
    }
}

fn vl_str(v: u8) -> &'static str {
    match v {
        1 => "1",
        2 => "2",
        3 => "4",
        4 => "8",
        5 => "15",
        _ => "invalid value",
    }
}

fn link_layer_str(v: u8) -> &'static str {
    match v {
        0 => "Unspecified",
        1 => "InfiniBand",
        2 => "Ethernet",
        _ => "Unknown",
    }
}

/// One `GID[...]` line, or `None` for a GID whose interface id (last 8
/// bytes) is zero, which `ibv_devinfo` skips. IB and RoCE v1 GIDs print as
/// 8 groups of 4 hex digits, RoCE v2 GIDs as an IPv6 address; on Ethernet
/// the type follows.
fn gid_line(index: u32, gid: &[u8; 16], ty: GidType, ethernet: bool) -> Option<String> {
    if gid[8..].iter().all(|&b| b == 0) {
        return None;
    }
    let (text, ty_name) = match ty {
        GidType::Ib | GidType::RoceV1 => {
            let groups: Vec<String> = gid
                .chunks(2)
                .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
                .collect();
            (groups.join(":"), "RoCE v1")
        }
        GidType::RoceV2 => (ipv6_text(gid), "RoCE v2"),
        // rdma-core prints nothing for a GID type it cannot name.
        GidType::Other(_) => return None,
    };
    let suffix = if ethernet {
        format!(", {ty_name}")
    } else {
        String::new()
    };
    Some(format!("\t\t\tGID[{index:>3}]:\t\t{text}{suffix}"))
}

/// An IPv6 address the way glibc's `inet_ntop(AF_INET6)` writes it: lower
/// case hex groups without leading zeros, the longest run (the first on a
/// tie) of two or more zero groups as `::`, and the last 32 bits as a
/// dotted quad for IPv4-compatible (`::a.b.c.d`) and IPv4-mapped
/// (`::ffff:a.b.c.d`) addresses.
fn ipv6_text(a: &[u8; 16]) -> String {
    let w: Vec<u16> = a
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    // The longest run of zero groups.
    // (start, length) of the best and of the current run.
    type Run = Option<(usize, usize)>;
    let (mut best, mut cur): (Run, Run) = (None, None);
    for (i, &g) in w.iter().enumerate() {
        if g == 0 {
            let c = cur.map_or((i, 1), |(b, l)| (b, l + 1));
            cur = Some(c);
            if best.is_none_or(|(_, bl)| c.1 > bl) {
                best = Some(c);
            }
        } else {
            cur = None;
        }
    }
    let best = best.filter(|&(_, l)| l >= 2);
    let mut s = String::new();
    let mut i = 0;
    while i < 8 {
        if let Some((b, l)) = best {
            if i == b {
                s.push(':');
                if b + l == 8 {
                    s.push(':');
                }
                i += l;
                continue;
            }
        }
        if i > 0 {
            s.push(':');
        }
        let embedded_v4 =
            i == 6 && best.is_some_and(|(b, l)| b == 0 && (l == 6 || (l == 5 && w[5] == 0xffff)));
        if embedded_v4 {
            let _ = write!(s, "{}.{}.{}.{}", a[12], a[13], a[14], a[15]);
            break;
        }
        let _ = write!(s, "{:x}", w[i]);
        i += 1;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6(s: &str) -> [u8; 16] {
        s.parse::<std::net::Ipv6Addr>().unwrap().octets()
    }

    #[test]
    fn ipv6_like_inet_ntop() {
        for (addr, want) in [
            ("::ffff:10.0.0.1", "::ffff:10.0.0.1"),
            ("fe80::b868:6ff:fe3d:3dfd", "fe80::b868:6ff:fe3d:3dfd"),
            ("::", "::"),
            ("::1", "::1"),
            ("::10.0.0.1", "::10.0.0.1"),
            ("1::", "1::"),
            ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),
            ("1:0:0:2:3:0:0:4", "1::2:3:0:0:4"),
            ("1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7"),
            ("2001:db8::ffff:1.2.3.4", "2001:db8::ffff:102:304"),
            ("::fffe:1.2.3.4", "::fffe:102:304"),
        ] {
            assert_eq!(ipv6_text(&v6(addr)), want, "{addr}");
        }
    }

    #[test]
    fn gid_lines() {
        let g = v6("::ffff:10.0.0.1");
        assert_eq!(
            gid_line(1, &g, GidType::RoceV2, true).unwrap(),
            "\t\t\tGID[  1]:\t\t::ffff:10.0.0.1, RoCE v2"
        );
        let ib = v6("fe80::2:c903:a:b");
        assert_eq!(
            gid_line(0, &ib, GidType::Ib, false).unwrap(),
            "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0002:c903:000a:000b"
        );
        assert_eq!(
            gid_line(12, &ib, GidType::RoceV1, true).unwrap(),
            "\t\t\tGID[ 12]:\t\tfe80:0000:0000:0000:0002:c903:000a:000b, RoCE v1"
        );
        // A zero interface id is skipped.
        assert!(gid_line(0, &v6("fe80::"), GidType::RoceV2, true).is_none());
    }

    #[test]
    fn cap_flags_and_names() {
        let mut s = String::new();
        device_cap_flags(&mut s, 0x0122_3c76 | (1 << 31));
        let names: Vec<&str> = s.lines().map(str::trim).collect();
        assert_eq!(
            names,
            [
                "BAD_PKEY_CNTR",
                "BAD_QKEY_CNTR",
                "AUTO_PATH_MIG",
                "CHANGE_PHY_PORT",
                "UD_AV_PORT_ENFORCE",
                "PORT_ACTIVE_EVENT",
                "SYS_IMAGE_GUID",
                "RC_RNR_NAK_GEN",
                "SRQ_RESIZE",
                "MEM_WINDOW",
                "MEM_MGT_EXTENSIONS",
                "MEM_WINDOW_TYPE_2B",
                "Unknown flags: 0x80000000",
            ]
        );
        let mut s = String::new();
        odp_transport_caps(&mut s, 0);
        assert_eq!(s, "\t\t\t\t\tNO SUPPORT\n");
        let mut s = String::new();
        odp_transport_caps(&mut s, 0x21 | 0x100);
        assert_eq!(
            s,
            "\t\t\t\t\tSUPPORT_SEND\n\t\t\t\t\tSUPPORT_SRQ\n\t\t\t\t\tUnknown flags: 0x100\n"
        );
        assert_eq!(
            (width_str(1), width_str(16), width_str(3)),
            ("1", "2", "invalid width")
        );
        assert_eq!(
            (speed_str(8), speed_str(4), speed_str(0)),
            ("10.0 Gbps", "10.0 Gbps", "invalid speed")
        );
        assert_eq!((mtu_str(5), mtu_str(0)), ("4096", "invalid MTU"));
        assert_eq!(transport_name(0), "InfiniBand");
        assert_eq!(transport_name(1), "iWARP");
        assert_eq!(transport_name(-1), "invalid transport");
    }

    #[test]
    fn devices_table() {
        let guid = rverbs::Guid([0xb8, 0x68, 0x06, 0xff, 0xfe, 0x3d, 0x3d, 0xfd]);
        assert_eq!(
            devices_text([("rxe0", guid)]),
            "    device          \t   node GUID\n    ------          \t----------------\n    rxe0            \tb86806fffe3d3dfd\n"
        );
    }

    #[test]
    fn ex_fields_past_the_response_length_are_zero() {
        let mut ex = ExQueryDeviceResp {
            timestamp_mask: 7,
            hca_core_clock: 9,
            max_dm_size: 5,
            ..Default::default()
        };
        ex.response_length = std::mem::offset_of!(ExQueryDeviceResp, hca_core_clock) as u32;
        let f = filled_ex(Some(&ex));
        assert_eq!(
            (f.timestamp_mask, f.hca_core_clock, f.max_dm_size),
            (7, 0, 0)
        );
        assert_eq!(filled_ex(None).timestamp_mask, 0);
    }
}
