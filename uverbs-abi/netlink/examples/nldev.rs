//! Print the RDMA devices the kernel reports over netlink, like
//! `rdma dev show`, with each device's uverbs driver id.
//!
//! With `--expect-rxe`, exit 1 unless some device is named `rxe*` and has
//! `driver_id == RDMA_DRIVER_RXE` (the VM check).

use std::process::ExitCode;

use rverbs_netlink::{self as netlink, driver_id, NlSocket};

fn main() -> ExitCode {
    let expect_rxe = std::env::args().any(|a| a == "--expect-rxe");
    let devs = match netlink::devices() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("devices(): {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut sock = NlSocket::open().ok();
    for d in &devs {
        let guid = d.node_guid.map(|g| {
            let h = format!("{g:016x}");
            format!("{}:{}:{}:{}", &h[0..4], &h[4..8], &h[8..12], &h[12..16])
        });
        let chardev = sock
            .as_mut()
            .map(|s| netlink::chardev(s, d.index, "uverbs"));
        println!(
            "{}: {}: node_type {:?} protocol {:?} ports {:?} fw {:?} node_guid {} driver_id {:?} chardev {:?}",
            d.index,
            d.name,
            d.node_type,
            d.protocol,
            d.port_count,
            d.fw_version,
            guid.as_deref().unwrap_or("-"),
            d.driver_id,
            chardev,
        );
    }
    if devs.is_empty() {
        println!("no RDMA devices");
    }
    if expect_rxe {
        let ok = devs
            .iter()
            .any(|d| d.name.starts_with("rxe") && d.driver_id == Some(driver_id::RXE));
        if !ok {
            eprintln!(
                "no rxe device with driver_id RDMA_DRIVER_RXE ({})",
                driver_id::RXE
            );
            return ExitCode::FAILURE;
        }
        println!(
            "rxe check ok: driver_id == RDMA_DRIVER_RXE ({})",
            driver_id::RXE
        );
    }
    ExitCode::SUCCESS
}
