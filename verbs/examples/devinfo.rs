//! Prints what `ibv_devinfo -v` prints that this crate can query: every
//! device (or `-d NAME`), its attributes, its ports, and their GID tables.
//!
//! Usage: `devinfo [-d DEVICE]`.

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn run() -> rverbs::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let want = match args.as_slice() {
        [] => None,
        [d, name] if d == "-d" => Some(name.clone()),
        _ => {
            return Err(rverbs::Error::InvalidArgument(rverbs::Invalid::new(
                rverbs::InvalidKind::Other,
                "usage: devinfo [-d DEVICE]",
            )))
        }
    };
    let devs = rverbs::devices()?;
    if devs.is_empty() {
        println!("No IB devices found");
        return Ok(());
    }
    for dev in devs
        .iter()
        .filter(|d| want.as_ref().is_none_or(|w| d.name() == w))
    {
        let ctx = dev.open()?;
        let a = ctx.query_device()?;
        println!("hca_id:\t{}", dev.name());
        println!("\tdriver:\t\t\t\t{}", dev.driver());
        println!("\tuverbs:\t\t\t\t{}", dev.uverbs());
        println!("\tfw_ver:\t\t\t\t{}", a.fw_ver());
        println!("\tnode_guid:\t\t\t{}", a.node_guid());
        println!("\tsys_image_guid:\t\t\t{}", a.sys_image_guid());
        println!("\tvendor_id:\t\t\t{:#06x}", a.vendor_id);
        println!("\tvendor_part_id:\t\t\t{}", a.vendor_part_id);
        println!("\thw_ver:\t\t\t\t{:#x}", a.hw_ver);
        println!("\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt);
        println!("\tmax_mr_size:\t\t\t{:#x}", a.max_mr_size);
        println!("\tpage_size_cap:\t\t\t{:#x}", a.page_size_cap);
        println!("\tmax_qp:\t\t\t\t{}", a.max_qp);
        println!("\tmax_qp_wr:\t\t\t{}", a.max_qp_wr);
        println!("\tdevice_cap_flags:\t\t{:#010x}", a.device_cap_flags);
        println!("\tmax_sge:\t\t\t{}", a.max_sge);
        println!("\tmax_sge_rd:\t\t\t{}", a.max_sge_rd);
        println!("\tmax_cq:\t\t\t\t{}", a.max_cq);
        println!("\tmax_cqe:\t\t\t{}", a.max_cqe);
        println!("\tmax_mr:\t\t\t\t{}", a.max_mr);
        println!("\tmax_pd:\t\t\t\t{}", a.max_pd);
        println!("\tmax_qp_rd_atom:\t\t\t{}", a.max_qp_rd_atom);
        println!("\tmax_res_rd_atom:\t\t{}", a.max_res_rd_atom);
        println!("\tmax_qp_init_rd_atom:\t\t{}", a.max_qp_init_rd_atom);
        println!("\tatomic_cap:\t\t\t{}", a.atomic_cap);
        println!("\tmax_mw:\t\t\t\t{}", a.max_mw);
        println!("\tmax_mcast_grp:\t\t\t{}", a.max_mcast_grp);
        println!("\tmax_mcast_qp_attach:\t\t{}", a.max_mcast_qp_attach);
        println!(
            "\tmax_total_mcast_qp_attach:\t{}",
            a.max_total_mcast_qp_attach
        );
        println!("\tmax_ah:\t\t\t\t{}", a.max_ah);
        println!("\tmax_srq:\t\t\t{}", a.max_srq);
        println!("\tmax_srq_wr:\t\t\t{}", a.max_srq_wr);
        println!("\tmax_srq_sge:\t\t\t{}", a.max_srq_sge);
        println!("\tmax_pkeys:\t\t\t{}", a.max_pkeys);
        println!("\tlocal_ca_ack_delay:\t\t{}", a.local_ca_ack_delay);
        if let Some(ex) = a.ex() {
            println!("\tdevice_cap_flags_ex:\t\t{:#x}", ex.device_cap_flags_ex);
            println!("\ttimestamp_mask:\t\t\t{:#x}", ex.timestamp_mask);
            println!("\thca_core_clock:\t\t\t{} kHz", ex.hca_core_clock);
        }
        for port in 1..=a.phys_port_cnt {
            let p = ctx.query_port(port)?;
            println!("\t\tport:\t{port}");
            println!("\t\t\tstate:\t\t\t{} ({})", p.state(), p.state);
            let mtu =
                |m: Option<rverbs::Mtu>, raw: u8| format!("{} ({raw})", m.map_or(0, |m| m.bytes()));
            println!("\t\t\tmax_mtu:\t\t{}", mtu(p.max_mtu(), p.max_mtu));
            println!("\t\t\tactive_mtu:\t\t{}", mtu(p.active_mtu(), p.active_mtu));
            println!("\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
            println!("\t\t\tport_lid:\t\t{}", p.lid);
            println!("\t\t\tport_lmc:\t\t{:#04x}", p.lmc);
            println!("\t\t\tlink_layer:\t\t{}", p.link_layer());
            println!("\t\t\tmax_msg_sz:\t\t{:#x}", p.max_msg_sz);
            println!("\t\t\tport_cap_flags:\t\t{:#010x}", p.port_cap_flags);
            println!("\t\t\tmax_vl_num:\t\t{}", p.max_vl_num);
            println!("\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len);
            println!("\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
            println!("\t\t\tactive_width:\t\t{}", p.active_width);
            println!("\t\t\tactive_speed:\t\t{}", p.active_speed);
            println!("\t\t\tphys_state:\t\t{}", p.phys_state);
            for e in ctx
                .query_gid_table()?
                .iter()
                .filter(|e| e.port == port as u32)
            {
                println!("\t\t\tGID[{:>3}]:\t\t{}, {}", e.index, e.gid, e.gid_type);
            }
        }
        println!();
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devinfo: {e}");
            ExitCode::FAILURE
        }
    }
}
