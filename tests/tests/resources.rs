//! Resources on a real rxe device: every object created and destroyed (and
//! no fd or kernel object leaked across many rounds), and our device, port
//! and GID queries compared field by field with what rdma-core's
//! `ibv_devinfo -v` reports for the same device.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::process::Command;

use rverbs::{
    AccessFlags, ConnectOpts, GidType, LinkLayer, Mtu, PortState, QpCap, QpInitAttr, QpState,
    QpType,
};
use verbs_tests::{open_rxe, Pair};

/// `ibv_devinfo -v` output, split into the device section and the sections
/// of each port: `key -> value` with the value's text as printed.
struct DevInfo {
    device: HashMap<String, String>,
    ports: Vec<HashMap<String, String>>,
}

fn ibv_devinfo(dev: &str) -> DevInfo {
    let out = Command::new("ibv_devinfo")
        .args(["-v", "-d", dev])
        .output()
        .expect(
            "running ibv_devinfo (rdma-core's ibverbs-utils must be installed for the VM suite)",
        );
    assert!(
        out.status.success(),
        "ibv_devinfo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut info = DevInfo {
        device: HashMap::new(),
        ports: Vec::new(),
    };
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_string(), v.trim().to_string());
        if k == "port" {
            info.ports.push(HashMap::new());
            continue;
        }
        match info.ports.last_mut() {
            Some(p) => p.insert(k, v),
            None => info.device.insert(k, v),
        };
    }
    assert!(
        !info.ports.is_empty(),
        "ibv_devinfo printed no port:\n{text}"
    );
    info
}

/// The number a field shows: `N` in a trailing `(N)`, else a hex or decimal
/// first token.
fn num(v: &str) -> u64 {
    if let (Some(o), true) = (v.rfind('('), v.ends_with(')')) {
        if let Ok(n) = v[o + 1..v.len() - 1].trim().parse() {
            return n;
        }
    }
    let tok = v.split_whitespace().next().unwrap_or("");
    match tok.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => tok.parse(),
    }
    .unwrap_or_else(|_| panic!("not a number: {v:?}"))
}

fn get<'a>(m: &'a HashMap<String, String>, k: &str) -> &'a str {
    m.get(k)
        .unwrap_or_else(|| panic!("ibv_devinfo printed no {k:?}"))
}

#[test]
fn device_attributes_match_ibv_devinfo() {
    let ctx = open_rxe();
    let name = ctx.device().name().to_string();
    let info = ibv_devinfo(&name);
    let a = ctx.query_device().unwrap();
    let d = &info.device;
    assert_eq!(get(d, "hca_id"), name);
    assert_eq!(get(d, "fw_ver"), a.fw_ver());
    assert_eq!(get(d, "node_guid"), a.node_guid().to_string());
    assert_eq!(get(d, "sys_image_guid"), a.sys_image_guid().to_string());
    assert_eq!(
        a.node_guid(),
        ctx.device().node_guid(),
        "sysfs and QUERY_DEVICE agree"
    );
    let fields: &[(&str, u64)] = &[
        ("vendor_id", a.vendor_id.into()),
        ("vendor_part_id", a.vendor_part_id.into()),
        ("hw_ver", a.hw_ver.into()),
        ("phys_port_cnt", a.phys_port_cnt.into()),
        ("max_mr_size", a.max_mr_size),
        ("page_size_cap", a.page_size_cap),
        ("max_qp", a.max_qp.into()),
        ("max_qp_wr", a.max_qp_wr.into()),
        ("device_cap_flags", a.device_cap_flags.into()),
        ("max_sge", a.max_sge.into()),
        ("max_sge_rd", a.max_sge_rd.into()),
        ("max_cq", a.max_cq.into()),
        ("max_cqe", a.max_cqe.into()),
        ("max_mr", a.max_mr.into()),
        ("max_pd", a.max_pd.into()),
        ("max_qp_rd_atom", a.max_qp_rd_atom.into()),
        ("max_ee_rd_atom", a.max_ee_rd_atom.into()),
        ("max_res_rd_atom", a.max_res_rd_atom.into()),
        ("max_qp_init_rd_atom", a.max_qp_init_rd_atom.into()),
        ("max_ee_init_rd_atom", a.max_ee_init_rd_atom.into()),
        ("atomic_cap", a.atomic_cap.into()),
        ("max_ee", a.max_ee.into()),
        ("max_rdd", a.max_rdd.into()),
        ("max_mw", a.max_mw.into()),
        ("max_raw_ipv6_qp", a.max_raw_ipv6_qp.into()),
        ("max_raw_ethy_qp", a.max_raw_ethy_qp.into()),
        ("max_mcast_grp", a.max_mcast_grp.into()),
        ("max_mcast_qp_attach", a.max_mcast_qp_attach.into()),
        (
            "max_total_mcast_qp_attach",
            a.max_total_mcast_qp_attach.into(),
        ),
        ("max_ah", a.max_ah.into()),
        ("max_fmr", a.max_fmr.into()),
        ("max_srq", a.max_srq.into()),
        ("max_srq_wr", a.max_srq_wr.into()),
        ("max_srq_sge", a.max_srq_sge.into()),
        ("max_pkeys", a.max_pkeys.into()),
        ("local_ca_ack_delay", a.local_ca_ack_delay.into()),
    ];
    let mut bad = Vec::new();
    for (k, ours) in fields {
        let theirs = num(get(d, k));
        if theirs != *ours {
            bad.push(format!("{k}: ibv_devinfo {theirs:#x}, ours {ours:#x}"));
        }
    }
    assert!(bad.is_empty(), "mismatches:\n{}", bad.join("\n"));
    assert!(
        a.ex().is_some(),
        "the 6.1 kernel answers the extended query"
    );
}

#[test]
fn port_attributes_and_gid_table_match_ibv_devinfo() {
    let ctx = open_rxe();
    let info = ibv_devinfo(ctx.device().name());
    let nports = ctx.query_device().unwrap().phys_port_cnt;
    assert_eq!(info.ports.len(), nports as usize);
    let table = ctx.query_gid_table().unwrap();
    for (i, theirs) in info.ports.iter().enumerate() {
        let port = i as u8 + 1;
        let p = ctx.query_port(port).unwrap();
        assert_eq!(p.state(), PortState::Active, "rxe0 is up in the VM");
        assert_eq!(p.link_layer(), LinkLayer::Ethernet);
        assert_eq!(get(theirs, "link_layer"), p.link_layer().to_string());
        assert_eq!(get(theirs, "state"), format!("{} ({})", p.state(), p.state));
        assert!(p.active_mtu().is_some() && p.max_mtu() >= p.active_mtu());
        let fields: &[(&str, u64)] = &[
            ("state", p.state.into()),
            ("max_mtu", p.max_mtu.into()),
            ("active_mtu", p.active_mtu.into()),
            ("sm_lid", p.sm_lid.into()),
            ("port_lid", p.lid.into()),
            ("port_lmc", p.lmc.into()),
            ("max_msg_sz", p.max_msg_sz.into()),
            ("port_cap_flags", p.port_cap_flags.into()),
            ("max_vl_num", p.max_vl_num.into()),
            ("bad_pkey_cntr", p.bad_pkey_cntr.into()),
            ("qkey_viol_cntr", p.qkey_viol_cntr.into()),
            ("sm_sl", p.sm_sl.into()),
            ("pkey_tbl_len", p.pkey_tbl_len.into()),
            ("gid_tbl_len", p.gid_tbl_len.into()),
            ("subnet_timeout", p.subnet_timeout.into()),
            ("init_type_reply", p.init_type_reply.into()),
            ("active_width", p.active_width.into()),
            ("active_speed", p.active_speed.into()),
            ("phys_state", p.phys_state.into()),
        ];
        let mut bad = Vec::new();
        for (k, ours) in fields {
            let t = num(get(theirs, k));
            if t != *ours {
                bad.push(format!(
                    "port {port} {k}: ibv_devinfo {t:#x}, ours {ours:#x}"
                ));
            }
        }
        assert!(bad.is_empty(), "mismatches:\n{}", bad.join("\n"));

        // GID lines: `GID[  N]: <gid>, <type>`.
        let mut theirs_gids: Vec<(u32, String, String)> = theirs
            .iter()
            .filter_map(|(k, v)| {
                let idx = k
                    .strip_prefix("GID[")?
                    .strip_suffix(']')?
                    .trim()
                    .parse()
                    .ok()?;
                let (g, t) = v.split_once(',').unwrap_or((v, ""));
                Some((idx, g.trim().to_string(), t.trim().to_string()))
            })
            .collect();
        theirs_gids.sort();
        let ours: Vec<(u32, String, String)> = table
            .iter()
            .filter(|e| e.port == port as u32)
            .map(|e| (e.index, e.gid.to_string(), e.gid_type.to_string()))
            .collect();
        assert!(!ours.is_empty(), "port {port} has GIDs");
        assert_eq!(ours, theirs_gids, "GID table of port {port}");
    }
    // The VM gives veth0 10.0.0.1: a RoCE v2 IPv4 GID must be there and be
    // the default choice.
    let idx = ctx.default_gid_index(1).unwrap();
    let e = table.iter().find(|e| e.index == idx as u32).unwrap();
    assert_eq!(e.gid_type, GidType::RoceV2);
    assert!(e.gid.to_ipv4().is_some(), "{:?}", e.gid);

    // One entry at a time: the same entries; empty slots, indexes past
    // the table and absent ports are invalid arguments.
    for e in &table {
        assert_eq!(ctx.query_gid_entry(e.port as u8, e.index).unwrap(), *e);
    }
    let len = ctx.query_port(1).unwrap().gid_tbl_len as u32;
    let empty = (0..len)
        .find(|i| table.iter().all(|e| e.index != *i))
        .unwrap();
    for (port, index) in [(1, empty), (1, len), (1, u32::MAX), (nports + 1, 0), (0, 0)] {
        match ctx.query_gid_entry(port, index) {
            Err(rverbs::Error::InvalidArgument(_)) => {}
            other => panic!("GID {index} of port {port}: {other:?}"),
        }
    }

    // More valid GIDs than the table query asks for first (16): twenty
    // IPv6 addresses on veth0 add as many GIDs per type (rxe has RoCE v2
    // only); the table is asked for again whole.
    let ip = |args: &[&str]| {
        let st = Command::new("ip").args(args).status().expect("ip");
        assert!(st.success(), "ip {args:?}");
    };
    let addrs: Vec<String> = (1..=20).map(|i| format!("fd00:5::{i}/128")).collect();
    for a in &addrs {
        ip(&["-6", "addr", "add", a, "dev", "veth0", "nodad"]);
    }
    let per_addr = table.iter().filter(|e| e.gid.to_ipv4().is_some()).count();
    let want = table.len() + per_addr * addrs.len();
    let mut big = Vec::new();
    for _ in 0..100 {
        big = ctx.query_gid_table().unwrap();
        if big.len() >= want {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for a in &addrs {
        ip(&["-6", "addr", "del", a, "dev", "veth0"]);
    }
    assert_eq!(big.len(), want, "{big:?}");
    for e in &table {
        assert!(big.contains(e), "{e:?} kept");
    }
    let v6 = big
        .iter()
        .filter(|e| e.gid.to_string().starts_with("fd00:5::"))
        .count();
    assert_eq!(v6, per_addr * addrs.len());
    assert_eq!(ctx.default_gid_index(1).unwrap(), idx);
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn every_resource_created_and_destroyed_without_leaks() {
    // Warm up once (lazy statics, first-open costs), then measure.
    drop(Pair::new());
    let fds = open_fds();
    for round in 0..20u32 {
        let ctx = open_rxe();
        let pd = ctx.alloc_pd().unwrap();
        let ch = ctx.create_comp_channel().unwrap();
        let cq = ctx.create_cq_with(16 + round, Some(&ch), 0).unwrap();
        let mr1 = pd
            .register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
            .unwrap();
        let mr2 = pd
            .alloc_mr(8192, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
            .unwrap();
        assert_ne!(mr1.lkey(), mr2.lkey());
        let mut qps = Vec::new();
        for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
            let qp = pd
                .create_qp(&QpInitAttr {
                    send_cq: &cq,
                    recv_cq: &cq,
                    qp_type: t,
                    cap: QpCap::default(),
                    sq_sig_all: false,
                })
                .unwrap();
            assert_eq!(qp.qp_type(), t);
            assert!(qp.cap().max_send_wr >= 64 && qp.cap().max_recv_wr >= 64);
            qps.push(qp);
        }
        cq.req_notify(false).unwrap();
        // Drop children before the PD, the PD before the context, in any
        // order the caller likes: parents outlive children by construction.
        drop(pd);
        drop(mr1);
        drop(ctx);
        drop(qps);
        drop(mr2);
        drop(cq);
        drop(ch);
    }
    assert_eq!(open_fds(), fds, "file descriptors leaked");
}

#[test]
fn query_qp_reports_what_was_set() {
    let p = Pair::with(verbs_tests::PairOpts {
        connect: ConnectOpts {
            path_mtu: Mtu::Mtu1024,
            timeout: 17,
            retry_cnt: 5,
            rnr_retry: 6,
            min_rnr_timer: 9,
            ..Default::default()
        },
        ..Default::default()
    });
    let (attr, cap, sig_all) = p.a.query().unwrap();
    assert_eq!(attr.qp_state, Some(QpState::Rts));
    assert_eq!(attr.dest_qp_num, Some(p.b.qp_num()));
    assert_eq!(attr.sq_psn, Some(100));
    assert_eq!(attr.rq_psn, Some(200));
    assert_eq!(attr.path_mtu, Some(Mtu::Mtu1024));
    assert_eq!(attr.timeout, Some(17));
    assert_eq!(attr.retry_cnt, Some(5));
    assert_eq!(attr.rnr_retry, Some(6));
    assert_eq!(attr.min_rnr_timer, Some(9));
    assert_eq!(attr.port_num, Some(1));
    assert_eq!(attr.qp_access_flags, Some(verbs_tests::all_access()));
    let ah = attr.ah_attr.unwrap();
    let grh = ah.grh.expect("RoCE paths carry a GRH");
    assert_eq!(grh.dgid, p.ctx.query_gid(1, grh.sgid_index).unwrap());
    // The kernel reports the ring it allocated, which may be deeper than
    // the depth it granted at creation (rxe rounds up to a power of two).
    let granted = p.a.cap();
    assert!(
        cap.max_send_wr >= granted.max_send_wr && cap.max_recv_wr >= granted.max_recv_wr,
        "{cap:?} vs {granted:?}"
    );
    assert_eq!(
        (cap.max_send_sge, cap.max_recv_sge, cap.max_inline_data),
        (
            granted.max_send_sge,
            granted.max_recv_sge,
            granted.max_inline_data
        )
    );
    assert!(!sig_all);
}

#[test]
fn unknown_device_is_a_clear_error() {
    let e = rverbs::device("no_such_dev0").unwrap_err();
    assert!(matches!(e, rverbs::Error::NoSuchDevice(_)), "{e}");
    let list = rverbs::devices().unwrap();
    assert!(
        list.iter().any(|d| *d.driver() == rverbs::Driver::Rxe),
        "{list:?}"
    );
    for d in &list {
        assert_eq!(d.abi_version(), 6);
        assert_eq!(d.driver_abi_version(), 2, "rxe's ring ABI");
        assert!(d.dev_path().exists(), "{}", d.dev_path().display());
    }
}
