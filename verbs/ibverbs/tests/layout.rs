//! The C structs of `rverbs-ibverbs` against `<infiniband/verbs.h>` (Debian's
//! `libibverbs-dev`): a C program prints `sizeof` and, for every field the
//! Rust struct has, the C member's `offsetof` and `sizeof`; each must equal
//! the Rust side's. The listed fields must also tile each Rust struct, so a
//! field left out of the table is noticed. The 1.0 ABI's structs, in no
//! installed header, are checked against the project's declaration of
//! them, `tests/ibverbs-c/v10.h` (which the C test of the 1.0 versions
//! uses too).

use std::mem::{offset_of, size_of};
use std::process::Command;

use rverbs_ibverbs::copy::{IbvAhAttr, IbvGlobalRoute, IbvQpAttr, IbvQpCap, IbvSaPathRec};
use rverbs_ibverbs::ffi::compat_1_0::{
    IbvAh10, IbvContext10, IbvContextOps10, IbvDevice10, IbvMr10, IbvPd10,
};
use rverbs_ibverbs::ffi::compat_1_0_queues::{
    IbvCq10, IbvQp10, IbvQpInitAttr10, IbvRecvWr10, IbvSendWr10, IbvSrq10,
};
use rverbs_ibverbs::ffi::cq::{IbvCompChannel, IbvCq, IbvCqEx, IbvCqInitAttrEx};
use rverbs_ibverbs::ffi::ece::IbvEce;
use rverbs_ibverbs::ffi::event::IbvAsyncEvent;
use rverbs_ibverbs::ffi::mw::{IbvMw, IbvMwBind, IbvMwBindInfo, IbvSendWrBindMw};
use rverbs_ibverbs::ffi::pd::{IbvMr, IbvParentDomainInitAttr, IbvPd, IbvTd, IbvTdInitAttr};
use rverbs_ibverbs::ffi::qp::{
    IbvAh, IbvQp, IbvQpInitAttr, IbvRecvWr, IbvSendWr, IbvSrq, IbvSrqAttr, IbvSrqInitAttr,
    WrAtomic, WrRdma, WrUd,
};
use rverbs_ibverbs::ffi::qp_ex::{IbvDataBuf, IbvQpEx, IbvQpInitAttrEx, IbvRxHashConf};
use rverbs_ibverbs::ffi::{
    CqModerationCaps, IbvContext, IbvContextOps, IbvDevice, IbvDeviceAttr, IbvDeviceAttrEx,
    IbvGidEntry, IbvPortAttr, IbvPortAttrCompat, OdpCaps, PacketPacingCaps, PciAtomicCaps, RssCaps,
    TmCaps, TsoCaps, VerbsContext,
};

struct Field {
    c: &'static str,
    offset: usize,
    size: usize,
    /// Whether the C member's size must equal the Rust field's (not for
    /// a Rust array or struct that stands for several C members, which
    /// is named by its first).
    same_size: bool,
}

struct Entry {
    c: &'static str,
    align: usize,
    /// The C size to compare with (an expression).
    c_size: &'static str,
    size: usize,
    fields: Vec<Field>,
}

macro_rules! field_size {
    ($t:ty, $f:ident) => {{
        fn size_of_field<T>(_: impl Fn(&$t) -> &T) -> usize {
            size_of::<T>()
        }
        size_of_field(|s: &$t| &s.$f)
    }};
}

/// `field => "c.member"` compares offset and size; `field @ "c.first"`
/// only the offset (a Rust field standing for several C members).
macro_rules! entry {
    ($t:ty, $c:literal, $c_size:expr, [$($f:ident $op:tt $cf:literal),* $(,)?]) => {
        Entry {
            c: $c,
            align: std::mem::align_of::<$t>(),
            c_size: $c_size,
            size: size_of::<$t>(),
            fields: vec![$(Field {
                c: $cf,
                offset: offset_of!($t, $f),
                size: field_size!($t, $f),
                same_size: stringify!($op) == "=>",
            }),*],
        }
    };
}

fn entries() -> Vec<Entry> {
    vec![
        entry!(IbvDevice, "struct ibv_device", "sizeof(struct ibv_device)", [
            ops => "_ops", node_type => "node_type", transport_type => "transport_type",
            name => "name", dev_name => "dev_name", dev_path => "dev_path",
            ibdev_path => "ibdev_path",
        ]),
        entry!(IbvContext, "struct ibv_context", "sizeof(struct ibv_context)", [
            device => "device", ops => "ops", cmd_fd => "cmd_fd", async_fd => "async_fd",
            num_comp_vectors => "num_comp_vectors", mutex => "mutex",
            abi_compat => "abi_compat",
        ]),
        entry!(IbvDeviceAttr, "struct ibv_device_attr", "sizeof(struct ibv_device_attr)", [
            fw_ver => "fw_ver", node_guid => "node_guid", sys_image_guid => "sys_image_guid",
            max_mr_size => "max_mr_size", page_size_cap => "page_size_cap",
            vendor_id => "vendor_id", vendor_part_id => "vendor_part_id", hw_ver => "hw_ver",
            max_qp => "max_qp", max_qp_wr => "max_qp_wr", device_cap_flags => "device_cap_flags",
            max_sge => "max_sge", max_sge_rd => "max_sge_rd", max_cq => "max_cq",
            max_cqe => "max_cqe", max_mr => "max_mr", max_pd => "max_pd",
            max_qp_rd_atom => "max_qp_rd_atom", max_ee_rd_atom => "max_ee_rd_atom",
            max_res_rd_atom => "max_res_rd_atom", max_qp_init_rd_atom => "max_qp_init_rd_atom",
            max_ee_init_rd_atom => "max_ee_init_rd_atom", atomic_cap => "atomic_cap",
            max_ee => "max_ee", max_rdd => "max_rdd", max_mw => "max_mw",
            max_raw_ipv6_qp => "max_raw_ipv6_qp", max_raw_ethy_qp => "max_raw_ethy_qp",
            max_mcast_grp => "max_mcast_grp", max_mcast_qp_attach => "max_mcast_qp_attach",
            max_total_mcast_qp_attach => "max_total_mcast_qp_attach", max_ah => "max_ah",
            max_fmr => "max_fmr", max_map_per_fmr => "max_map_per_fmr", max_srq => "max_srq",
            max_srq_wr => "max_srq_wr", max_srq_sge => "max_srq_sge", max_pkeys => "max_pkeys",
            local_ca_ack_delay => "local_ca_ack_delay", phys_port_cnt => "phys_port_cnt",
        ]),
        entry!(VerbsContext, "struct verbs_context", "sizeof(struct verbs_context)", [
            query_port => "query_port", before_alloc_parent_domain @ "advise_mr",
            alloc_parent_domain => "alloc_parent_domain", dealloc_td => "dealloc_td",
            alloc_td => "alloc_td", before_create_cq_ex @ "modify_cq",
            create_cq_ex => "create_cq_ex", priv_ => "priv",
            query_device_ex => "query_device_ex", before_create_qp_ex @ "ibv_destroy_flow",
            create_qp_ex => "create_qp_ex", after_create_qp_ex @ "get_srq_num",
            sz => "sz", context => "context",
        ]),
        entry!(IbvPortAttr, "struct ibv_port_attr", "sizeof(struct ibv_port_attr)", [
            compat @ "state", port_cap_flags2 => "port_cap_flags2",
        ]),
        entry!(IbvDeviceAttrEx, "struct ibv_device_attr_ex", "sizeof(struct ibv_device_attr_ex)", [
            orig_attr => "orig_attr", comp_mask => "comp_mask", odp_caps => "odp_caps",
            completion_timestamp_mask => "completion_timestamp_mask",
            hca_core_clock => "hca_core_clock", device_cap_flags_ex => "device_cap_flags_ex",
            tso_caps => "tso_caps", rss_caps => "rss_caps", max_wq_type_rq => "max_wq_type_rq",
            packet_pacing_caps => "packet_pacing_caps", raw_packet_caps => "raw_packet_caps",
            tm_caps => "tm_caps", cq_mod_caps => "cq_mod_caps", max_dm_size => "max_dm_size",
            pci_atomic_caps => "pci_atomic_caps", xrc_odp_caps => "xrc_odp_caps",
            phys_port_cnt_ex => "phys_port_cnt_ex",
        ]),
        entry!(OdpCaps, "struct ibv_odp_caps", "sizeof(struct ibv_odp_caps)", [
            general_caps => "general_caps", rc_odp_caps => "per_transport_caps.rc_odp_caps",
            uc_odp_caps => "per_transport_caps.uc_odp_caps",
            ud_odp_caps => "per_transport_caps.ud_odp_caps",
        ]),
        entry!(TsoCaps, "struct ibv_tso_caps", "sizeof(struct ibv_tso_caps)", [
            max_tso => "max_tso", supported_qpts => "supported_qpts",
        ]),
        entry!(RssCaps, "struct ibv_rss_caps", "sizeof(struct ibv_rss_caps)", [
            supported_qpts => "supported_qpts",
            max_rwq_indirection_tables => "max_rwq_indirection_tables",
            max_rwq_indirection_table_size => "max_rwq_indirection_table_size",
            rx_hash_fields_mask => "rx_hash_fields_mask", rx_hash_function => "rx_hash_function",
        ]),
        entry!(PacketPacingCaps, "struct ibv_packet_pacing_caps", "sizeof(struct ibv_packet_pacing_caps)", [
            qp_rate_limit_min => "qp_rate_limit_min", qp_rate_limit_max => "qp_rate_limit_max",
            supported_qpts => "supported_qpts",
        ]),
        entry!(TmCaps, "struct ibv_tm_caps", "sizeof(struct ibv_tm_caps)", [
            max_rndv_hdr_size => "max_rndv_hdr_size", max_num_tags => "max_num_tags",
            flags => "flags", max_ops => "max_ops", max_sge => "max_sge",
        ]),
        entry!(CqModerationCaps, "struct ibv_cq_moderation_caps", "sizeof(struct ibv_cq_moderation_caps)", [
            max_cq_count => "max_cq_count", max_cq_period => "max_cq_period",
        ]),
        entry!(PciAtomicCaps, "struct ibv_pci_atomic_caps", "sizeof(struct ibv_pci_atomic_caps)", [
            fetch_add => "fetch_add", swap => "swap", compare_swap => "compare_swap",
        ]),
        entry!(IbvContextOps, "struct ibv_context_ops", "sizeof(struct ibv_context_ops)", [
            before_alloc_mw @ "_compat_query_device", alloc_mw => "alloc_mw",
            bind_mw => "bind_mw", dealloc_mw => "dealloc_mw",
            before_poll_cq => "_compat_create_cq", poll_cq => "poll_cq",
            req_notify_cq => "req_notify_cq", before_post_srq_recv @ "_compat_cq_event",
            post_srq_recv => "post_srq_recv", before_post_send @ "_compat_create_qp",
            post_send => "post_send", post_recv => "post_recv",
            after_post_recv @ "_compat_create_ah",
        ]),
        entry!(IbvEce, "struct ibv_ece", "sizeof(struct ibv_ece)", [
            vendor_id => "vendor_id", options => "options", comp_mask => "comp_mask",
        ]),
        entry!(IbvMw, "struct ibv_mw", "sizeof(struct ibv_mw)", [
            context => "context", pd => "pd", rkey => "rkey", handle => "handle",
            mw_type => "type",
        ]),
        entry!(IbvMwBindInfo, "struct ibv_mw_bind_info", "sizeof(struct ibv_mw_bind_info)", [
            mr => "mr", addr => "addr", length => "length",
            mw_access_flags => "mw_access_flags",
        ]),
        entry!(IbvMwBind, "struct ibv_mw_bind", "sizeof(struct ibv_mw_bind)", [
            wr_id => "wr_id", send_flags => "send_flags", bind_info => "bind_info",
        ]),
        entry!(IbvSendWrBindMw, "__typeof__(((struct ibv_send_wr *)0)->bind_mw)", "sizeof(__typeof__(((struct ibv_send_wr *)0)->bind_mw))", [
            mw => "mw", rkey => "rkey", bind_info => "bind_info",
        ]),
        entry!(IbvPd, "struct ibv_pd", "sizeof(struct ibv_pd)", [
            context => "context", handle => "handle",
        ]),
        entry!(IbvMr, "struct ibv_mr", "sizeof(struct ibv_mr)", [
            context => "context", pd => "pd", addr => "addr", length => "length",
            handle => "handle", lkey => "lkey", rkey => "rkey",
        ]),
        entry!(IbvCompChannel, "struct ibv_comp_channel", "sizeof(struct ibv_comp_channel)", [
            context => "context", fd => "fd", refcnt => "refcnt",
        ]),
        entry!(IbvCq, "struct ibv_cq", "sizeof(struct ibv_cq)", [
            context => "context", channel => "channel", cq_context => "cq_context",
            handle => "handle", cqe => "cqe", mutex => "mutex", cond => "cond",
            comp_events_completed => "comp_events_completed",
            async_events_completed => "async_events_completed",
        ]),
        entry!(IbvCqEx, "struct ibv_cq_ex", "sizeof(struct ibv_cq_ex)", [
            cq @ "context", comp_mask => "comp_mask", status => "status", wr_id => "wr_id",
            start_poll => "start_poll", next_poll => "next_poll", end_poll => "end_poll",
            read_opcode => "read_opcode", read_vendor_err => "read_vendor_err",
            read_byte_len => "read_byte_len", read_imm_data => "read_imm_data",
            read_qp_num => "read_qp_num", read_src_qp => "read_src_qp",
            read_wc_flags => "read_wc_flags", read_slid => "read_slid", read_sl => "read_sl",
            read_dlid_path_bits => "read_dlid_path_bits",
            read_unsupported @ "read_completion_ts",
        ]),
        entry!(IbvTd, "struct ibv_td", "sizeof(struct ibv_td)", [context => "context"]),
        entry!(IbvTdInitAttr, "struct ibv_td_init_attr", "sizeof(struct ibv_td_init_attr)", [
            comp_mask => "comp_mask",
        ]),
        entry!(IbvParentDomainInitAttr, "struct ibv_parent_domain_init_attr",
            "sizeof(struct ibv_parent_domain_init_attr)", [
            pd => "pd", td => "td", comp_mask => "comp_mask", alloc => "alloc", free => "free",
            pd_context => "pd_context",
        ]),
        entry!(IbvCqInitAttrEx, "struct ibv_cq_init_attr_ex", "sizeof(struct ibv_cq_init_attr_ex)", [
            cqe => "cqe", cq_context => "cq_context", channel => "channel",
            comp_vector => "comp_vector", wc_flags => "wc_flags", comp_mask => "comp_mask",
            flags => "flags", parent_domain => "parent_domain",
        ]),
        entry!(IbvQpEx, "struct ibv_qp_ex", "sizeof(struct ibv_qp_ex)", [
            qp @ "qp_base", comp_mask => "comp_mask", wr_id => "wr_id", wr_flags => "wr_flags",
            wr_atomic_cmp_swp => "wr_atomic_cmp_swp", wr_atomic_fetch_add => "wr_atomic_fetch_add",
            wr_bind_mw => "wr_bind_mw", wr_local_inv => "wr_local_inv",
            wr_rdma_read => "wr_rdma_read", wr_rdma_write => "wr_rdma_write",
            wr_rdma_write_imm => "wr_rdma_write_imm", wr_send => "wr_send",
            wr_send_imm => "wr_send_imm", wr_send_inv => "wr_send_inv",
            wr_send_tso => "wr_send_tso", wr_set_ud_addr => "wr_set_ud_addr",
            wr_set_xrc_srqn => "wr_set_xrc_srqn", wr_set_inline_data => "wr_set_inline_data",
            wr_set_inline_data_list => "wr_set_inline_data_list", wr_set_sge => "wr_set_sge",
            wr_set_sge_list => "wr_set_sge_list", wr_start => "wr_start",
            wr_complete => "wr_complete", wr_abort => "wr_abort",
            wr_atomic_write => "wr_atomic_write",
        ]),
        entry!(IbvQpInitAttrEx, "struct ibv_qp_init_attr_ex", "sizeof(struct ibv_qp_init_attr_ex)", [
            qp_context => "qp_context", send_cq => "send_cq", recv_cq => "recv_cq",
            srq => "srq", cap => "cap", qp_type => "qp_type", sq_sig_all => "sq_sig_all",
            comp_mask => "comp_mask", pd => "pd", xrcd => "xrcd",
            create_flags => "create_flags", max_tso_header => "max_tso_header",
            rwq_ind_tbl => "rwq_ind_tbl", rx_hash_conf => "rx_hash_conf",
            source_qpn => "source_qpn", send_ops_flags => "send_ops_flags",
        ]),
        entry!(IbvRxHashConf, "struct ibv_rx_hash_conf", "sizeof(struct ibv_rx_hash_conf)", [
            rx_hash_function => "rx_hash_function", rx_hash_key_len => "rx_hash_key_len",
            rx_hash_key => "rx_hash_key", rx_hash_fields_mask => "rx_hash_fields_mask",
        ]),
        entry!(IbvDataBuf, "struct ibv_data_buf", "sizeof(struct ibv_data_buf)", [
            addr => "addr", length => "length",
        ]),
        entry!(IbvQp, "struct ibv_qp", "sizeof(struct ibv_qp)", [
            context => "context", qp_context => "qp_context", pd => "pd",
            send_cq => "send_cq", recv_cq => "recv_cq", srq => "srq", handle => "handle",
            qp_num => "qp_num", state => "state", qp_type => "qp_type", mutex => "mutex",
            cond => "cond", events_completed => "events_completed",
        ]),
        entry!(IbvQpInitAttr, "struct ibv_qp_init_attr", "sizeof(struct ibv_qp_init_attr)", [
            qp_context => "qp_context", send_cq => "send_cq", recv_cq => "recv_cq",
            srq => "srq", cap => "cap", qp_type => "qp_type", sq_sig_all => "sq_sig_all",
        ]),
        entry!(IbvSrq, "struct ibv_srq", "sizeof(struct ibv_srq)", [
            context => "context", srq_context => "srq_context", pd => "pd",
            handle => "handle", mutex => "mutex", cond => "cond",
            events_completed => "events_completed",
        ]),
        entry!(IbvSrqAttr, "struct ibv_srq_attr", "sizeof(struct ibv_srq_attr)", [
            max_wr => "max_wr", max_sge => "max_sge", srq_limit => "srq_limit",
        ]),
        entry!(IbvSrqInitAttr, "struct ibv_srq_init_attr", "sizeof(struct ibv_srq_init_attr)", [
            srq_context => "srq_context", attr => "attr",
        ]),
        entry!(IbvAh, "struct ibv_ah", "sizeof(struct ibv_ah)", [
            context => "context", pd => "pd", handle => "handle",
        ]),
        entry!(IbvSendWr, "struct ibv_send_wr", "sizeof(struct ibv_send_wr)", [
            wr_id => "wr_id", next => "next", sg_list => "sg_list", num_sge => "num_sge",
            opcode => "opcode", send_flags => "send_flags", imm_data => "imm_data",
            wr => "wr", remote_srqn => "qp_type.xrc.remote_srqn", bind_mw => "bind_mw",
        ]),
        entry!(WrRdma, "__typeof__(((struct ibv_send_wr *)0)->wr.rdma)", "sizeof(__typeof__(((struct ibv_send_wr *)0)->wr.rdma))", [
            remote_addr => "remote_addr", rkey => "rkey",
        ]),
        entry!(WrAtomic, "__typeof__(((struct ibv_send_wr *)0)->wr.atomic)", "sizeof(__typeof__(((struct ibv_send_wr *)0)->wr.atomic))", [
            remote_addr => "remote_addr", compare_add => "compare_add",
            swap => "swap", rkey => "rkey",
        ]),
        entry!(WrUd, "__typeof__(((struct ibv_send_wr *)0)->wr.ud)", "sizeof(__typeof__(((struct ibv_send_wr *)0)->wr.ud))", [
            ah => "ah", remote_qpn => "remote_qpn", remote_qkey => "remote_qkey",
        ]),
        entry!(IbvRecvWr, "struct ibv_recv_wr", "sizeof(struct ibv_recv_wr)", [
            wr_id => "wr_id", next => "next", sg_list => "sg_list", num_sge => "num_sge",
        ]),
        // The kernel's ib_uverbs_wc, which poll_cq writes into the
        // program's ibv_wc array; its last two bytes (port_num, reserved)
        // are ibv_wc's tail padding.
        entry!(rverbs::abi::RawWc, "struct ibv_wc", "sizeof(struct ibv_wc)", [
            wr_id => "wr_id", status => "status", opcode => "opcode",
            vendor_err => "vendor_err", byte_len => "byte_len", ex => "imm_data",
            qp_num => "qp_num", src_qp => "src_qp", wc_flags => "wc_flags",
            pkey_index => "pkey_index", slid => "slid", sl => "sl",
            dlid_path_bits => "dlid_path_bits",
        ]),
        entry!(rverbs::Sge, "struct ibv_sge", "sizeof(struct ibv_sge)", [
            addr => "addr", length => "length", lkey => "lkey",
        ]),
        entry!(IbvAsyncEvent, "struct ibv_async_event", "sizeof(struct ibv_async_event)", [
            element => "element", event_type => "event_type",
        ]),
        entry!(IbvGidEntry, "struct ibv_gid_entry", "sizeof(struct ibv_gid_entry)", [
            gid => "gid", gid_index => "gid_index", port_num => "port_num",
            gid_type => "gid_type", ndev_ifindex => "ndev_ifindex",
        ]),
        entry!(IbvGlobalRoute, "struct ibv_global_route", "sizeof(struct ibv_global_route)", [
            dgid => "dgid", flow_label => "flow_label", sgid_index => "sgid_index",
            hop_limit => "hop_limit", traffic_class => "traffic_class",
        ]),
        entry!(IbvAhAttr, "struct ibv_ah_attr", "sizeof(struct ibv_ah_attr)", [
            grh => "grh", dlid => "dlid", sl => "sl", src_path_bits => "src_path_bits",
            static_rate => "static_rate", is_global => "is_global", port_num => "port_num",
        ]),
        entry!(IbvQpCap, "struct ibv_qp_cap", "sizeof(struct ibv_qp_cap)", [
            max_send_wr => "max_send_wr", max_recv_wr => "max_recv_wr",
            max_send_sge => "max_send_sge", max_recv_sge => "max_recv_sge",
            max_inline_data => "max_inline_data",
        ]),
        entry!(IbvQpAttr, "struct ibv_qp_attr", "sizeof(struct ibv_qp_attr)", [
            qp_state => "qp_state", cur_qp_state => "cur_qp_state", path_mtu => "path_mtu",
            path_mig_state => "path_mig_state", qkey => "qkey", rq_psn => "rq_psn",
            sq_psn => "sq_psn", dest_qp_num => "dest_qp_num", qp_access_flags => "qp_access_flags",
            cap => "cap", ah_attr => "ah_attr", alt_ah_attr => "alt_ah_attr",
            pkey_index => "pkey_index", alt_pkey_index => "alt_pkey_index",
            en_sqd_async_notify => "en_sqd_async_notify", sq_draining => "sq_draining",
            max_rd_atomic => "max_rd_atomic", max_dest_rd_atomic => "max_dest_rd_atomic",
            min_rnr_timer => "min_rnr_timer", port_num => "port_num", timeout => "timeout",
            retry_cnt => "retry_cnt", rnr_retry => "rnr_retry", alt_port_num => "alt_port_num",
            alt_timeout => "alt_timeout", rate_limit => "rate_limit",
        ]),
        entry!(IbvSaPathRec, "struct ibv_sa_path_rec", "sizeof(struct ibv_sa_path_rec)", [
            dgid => "dgid", sgid => "sgid", dlid => "dlid", slid => "slid",
            raw_traffic => "raw_traffic", flow_label => "flow_label", hop_limit => "hop_limit",
            traffic_class => "traffic_class", reversible => "reversible", numb_path => "numb_path",
            pkey => "pkey", sl => "sl", mtu_selector => "mtu_selector", mtu => "mtu",
            rate_selector => "rate_selector", rate => "rate",
            packet_life_time_selector => "packet_life_time_selector",
            packet_life_time => "packet_life_time", preference => "preference",
        ]),
        // The compat part of ibv_port_attr: everything before
        // port_cap_flags2, which the exported ibv_query_port never writes.
        entry!(IbvPortAttrCompat, "struct ibv_port_attr",
            "((offsetof(struct ibv_port_attr, flags) + 1 + 3) / 4 * 4)", [
            state => "state", max_mtu => "max_mtu", active_mtu => "active_mtu",
            gid_tbl_len => "gid_tbl_len", port_cap_flags => "port_cap_flags",
            max_msg_sz => "max_msg_sz", bad_pkey_cntr => "bad_pkey_cntr",
            qkey_viol_cntr => "qkey_viol_cntr", pkey_tbl_len => "pkey_tbl_len", lid => "lid",
            sm_lid => "sm_lid", lmc => "lmc", max_vl_num => "max_vl_num", sm_sl => "sm_sl",
            subnet_timeout => "subnet_timeout", init_type_reply => "init_type_reply",
            active_width => "active_width", active_speed => "active_speed",
            phys_state => "phys_state", link_layer => "link_layer", flags => "flags",
        ]),
        // The 1.0 ABI's structs, which no installed header has: against
        // the project's own declaration of them (tests/ibverbs-c/v10.h).
        entry!(IbvDevice10, "struct v10_device", "sizeof(struct v10_device)", [
            obsolete_sysfs_dev => "obsolete_sysfs_dev",
            obsolete_sysfs_ibdev => "obsolete_sysfs_ibdev", real_device => "real_device",
            ops => "ops",
        ]),
        entry!(IbvContextOps10, "struct v10_ops", "sizeof(struct v10_ops)", [
            before_poll_cq @ "query_device", poll_cq => "poll_cq",
            req_notify_cq => "req_notify_cq", before_post_srq_recv @ "cq_event",
            post_srq_recv => "post_srq_recv", before_post_send @ "create_qp",
            post_send => "post_send", post_recv => "post_recv", after_post_recv @ "create_ah",
        ]),
        entry!(IbvContext10, "struct v10_context", "sizeof(struct v10_context)", [
            device => "device", ops => "ops", cmd_fd => "cmd_fd", async_fd => "async_fd",
            num_comp_vectors => "num_comp_vectors", real_context => "real_context",
        ]),
        entry!(IbvPd10, "struct v10_pd", "sizeof(struct v10_pd)", [
            context => "context", handle => "handle", real_pd => "real_pd",
        ]),
        entry!(IbvMr10, "struct v10_mr", "sizeof(struct v10_mr)", [
            context => "context", pd => "pd", handle => "handle", lkey => "lkey",
            rkey => "rkey", real_mr => "real_mr",
        ]),
        entry!(IbvAh10, "struct v10_ah", "sizeof(struct v10_ah)", [
            context => "context", pd => "pd", handle => "handle", real_ah => "real_ah",
        ]),
        entry!(IbvCq10, "struct v10_cq", "sizeof(struct v10_cq)", [
            context => "context", cq_context => "cq_context", handle => "handle", cqe => "cqe",
            mutex => "mutex", cond => "cond", comp_events_completed => "comp_events_completed",
            async_events_completed => "async_events_completed", real_cq => "real_cq",
        ]),
        entry!(IbvSrq10, "struct v10_srq", "sizeof(struct v10_srq)", [
            context => "context", srq_context => "srq_context", pd => "pd", handle => "handle",
            mutex => "mutex", cond => "cond", events_completed => "events_completed",
            real_srq => "real_srq",
        ]),
        entry!(IbvQp10, "struct v10_qp", "sizeof(struct v10_qp)", [
            context => "context", qp_context => "qp_context", pd => "pd",
            send_cq => "send_cq", recv_cq => "recv_cq", srq => "srq", handle => "handle",
            qp_num => "qp_num", state => "state", qp_type => "qp_type", mutex => "mutex",
            cond => "cond", events_completed => "events_completed", real_qp => "real_qp",
        ]),
        entry!(IbvQpInitAttr10, "struct v10_qp_init_attr", "sizeof(struct v10_qp_init_attr)", [
            qp_context => "qp_context", send_cq => "send_cq", recv_cq => "recv_cq",
            srq => "srq", cap => "cap", qp_type => "qp_type", sq_sig_all => "sq_sig_all",
        ]),
        entry!(IbvSendWr10, "struct v10_send_wr", "sizeof(struct v10_send_wr)", [
            next => "next", wr_id => "wr_id", sg_list => "sg_list", num_sge => "num_sge",
            opcode => "opcode", send_flags => "send_flags", imm_data => "imm_data",
            wr => "wr",
        ]),
        entry!(IbvRecvWr10, "struct v10_recv_wr", "sizeof(struct v10_recv_wr)", [
            next => "next", wr_id => "wr_id", sg_list => "sg_list", num_sge => "num_sge",
        ]),
    ]
}

#[test]
fn structs_match_verbs_h() {
    let entries = entries();
    let v10 = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/ibverbs-c/v10.h");
    let mut c = format!(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n\
         #include <infiniband/sa.h>\n#include \"{}\"\nint main(void) {{\n",
        v10.display()
    );
    for e in &entries {
        c.push_str(&format!(
            "  printf(\"%zu %zu\\n\", (size_t)({}), _Alignof({}));\n",
            e.c_size, e.c
        ));
        for f in &e.fields {
            c.push_str(&format!(
                "  printf(\"%zu %zu\\n\", offsetof({0}, {1}), sizeof(((({0} *)0)->{1})));\n",
                e.c, f.c
            ));
        }
    }
    c.push_str(
        "  printf(\"%zu\\n\", sizeof(struct ibv_context_ops) / sizeof(void *));\n  return 0;\n}\n",
    );
    let dir = std::env::temp_dir().join(format!("ibverbs-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("a C compiler (cc)");
    assert!(
        st.success(),
        "the probe does not compile: install libibverbs-dev"
    );
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let mut bad = Vec::new();
    for e in &entries {
        let (size, align) = lines.next().unwrap().split_once(' ').unwrap();
        let (size, align): (usize, usize) = (size.parse().unwrap(), align.parse().unwrap());
        if size != e.size {
            bad.push(format!("{}: C size {size}, Rust {}", e.c, e.size));
        }
        // The compat part of ibv_port_attr is a prefix, not the C struct.
        if align != e.align && e.c_size.starts_with("sizeof") {
            bad.push(format!("{}: C alignment {align}, Rust {}", e.c, e.align));
        }
        let mut end = 0;
        for f in &e.fields {
            let l = lines.next().unwrap();
            let (o, s) = l.split_once(' ').unwrap();
            let (o, s): (usize, usize) = (o.parse().unwrap(), s.parse().unwrap());
            if o != f.offset || (f.same_size && s != f.size) {
                bad.push(format!(
                    "{}.{}: C offset {o} size {s}, Rust {} {}",
                    e.c, f.c, f.offset, f.size
                ));
            }
            if f.offset < end {
                bad.push(format!("{}.{}: overlaps the field before it", e.c, f.c));
            }
            // More than padding before it: a field left out of the table.
            if f.offset >= end + 8 {
                bad.push(format!(
                    "{}.{}: {} bytes before it",
                    e.c,
                    f.c,
                    f.offset - end
                ));
            }
            end = f.offset + f.size;
        }
        // The fields tile the struct up to its tail padding.
        let align_pad = e.size - end;
        if align_pad >= 8 {
            bad.push(format!("{}: {align_pad} bytes after the last field", e.c));
        }
    }
    let ops: usize = lines.next().unwrap().parse().unwrap();
    if ops != rverbs_ibverbs::ffi::CONTEXT_OPS {
        bad.push(format!(
            "struct ibv_context_ops: {ops} pointers in C, {} in Rust",
            rverbs_ibverbs::ffi::CONTEXT_OPS
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(bad.is_empty(), "layout mismatches:\n{}", bad.join("\n"));
}
