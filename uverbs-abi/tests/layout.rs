//! Layout and constant checks of `uverbs-abi` against the kernel's RDMA uapi
//! headers installed on the host (`/usr/include/rdma`, from Debian's
//! `linux-libc-dev`: the core ABI, the rdma_cm's, and the rxe, mlx5 and EFA
//! driver data), and of the mlx5 hardware layouts (`mlx5::prm`)
//! against rdma-core's `/usr/include/infiniband/mlx5dv.h` (Debian's
//! `libibverbs-dev`).
//!
//! The crate's `#[repr(C)]` structs are hand-written mirrors of C structs the
//! kernel reads and writes byte for byte (uverbs commands and responses, the
//! ioctl header and attributes, the rxe mmap'd rings). A wrong field type, a
//! missing field or a shifted offset would not fail to compile: it would
//! make the kernel misread a command or make user space misread a ring. So
//! this test generates a small C program that includes the real headers and
//! prints `sizeof`, `_Alignof`, and for every field the Rust struct has, the
//! `offsetof` and `sizeof` of the corresponding C member; it compiles it with
//! `cc` (or `$CC`), runs it, and compares every number with
//! `size_of`/`align_of`/`offset_of!` on the Rust side. It also checks that the
//! listed Rust fields tile each Rust struct exactly, so a field missing from
//! the table below is noticed, and compares the crate's constants with the
//! values of the corresponding C enumerators and macros. No RDMA device is
//! needed. All mismatches are collected and reported together.
//!
//! Rules encoded by the table:
//! - `flex = "m"`: the C struct ends with the flexible array member `m`
//!   (`driver_data[]`, `attrs[]`, `data[]`, ...) which the Rust struct omits;
//!   the Rust size must equal `offsetof(C, m)` (or the `size` expression if
//!   given), and the C array must start right at the end of the Rust struct.
//! - `size = "expr"`: the expected size as a C expression.
//! - `member = "a.b"`: the Rust struct mirrors an anonymous struct member
//!   (a union arm); offsets are taken relative to that member.
//! - `lower_align = "why"`: the C struct's alignment is raised only by an
//!   omitted flexible member (directly or in an embedded struct), so the Rust
//!   alignment may be lower; sizes and offsets, which fix the byte layout,
//!   are still compared exactly.
//! - `field = "c.path"` maps a flattened Rust field to a nested C member;
//!   `field = _` marks explicit Rust tail padding with no C member (checked
//!   only through the struct size and the tiling check).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use rverbs_abi::mlx5::prm;
use rverbs_abi::{ah, cmd, cq, device, efa, ioctl, mlx5, mr, mw, pd, qp, rxe, srq, ucma, wr};

/// Per-entry options; the macro sets the named ones, so a misspelt option
/// is a compile error.
#[derive(Clone, Copy)]
struct Opts {
    member: Option<&'static str>,
    flex: Option<&'static str>,
    size: Option<&'static str>,
    lower_align: Option<&'static str>,
}

impl Opts {
    const NONE: Opts = Opts {
        member: None,
        flex: None,
        size: None,
        lower_align: None,
    };
}

struct Field {
    rust: &'static str,
    /// C member path relative to the struct (or to `member`); `None` for
    /// explicit Rust padding.
    c: Option<&'static str>,
    offset: usize,
    size: usize,
}

struct Entry {
    rust: &'static str,
    c: &'static str,
    opts: Opts,
    size: usize,
    align: usize,
    fields: Vec<Field>,
}

struct Const {
    /// C expression.
    c: &'static str,
    /// Rust expression, as written.
    rust: &'static str,
    value: u64,
}

fn size_of_field<T, F>(_: impl Fn(&T) -> &F) -> usize {
    size_of::<F>()
}

fn to_u64<T: TryInto<u64>>(v: T) -> u64 {
    v.try_into()
        .unwrap_or_else(|_| panic!("constant does not fit in u64"))
}

macro_rules! c_path {
    ($f:ident) => {
        Some(stringify!($f))
    };
    ($f:ident = _) => {
        None
    };
    ($f:ident = $p:literal) => {
        Some($p)
    };
}

/// One entry per Rust struct: `module::Type => "C type" [options] { fields }`.
/// Each entry yields the Rust numbers here and the C probe lines in
/// [`c_source`].
macro_rules! layout {
    ($(
        $m:ident :: $t:ident => $c:literal
        $([ $($k:ident = $v:expr),* $(,)? ])?
        { $($f:ident $(= $p:tt)?),* $(,)? }
    )*) => {
        vec![$(Entry {
            rust: concat!(stringify!($m), "::", stringify!($t)),
            c: $c,
            opts: Opts { $($($k: Some($v),)*)? ..Opts::NONE },
            size: size_of::<$m::$t>(),
            align: align_of::<$m::$t>(),
            fields: vec![$(Field {
                rust: stringify!($f),
                c: c_path!($f $(= $p)?),
                offset: core::mem::offset_of!($m::$t, $f),
                size: size_of_field(|s: &$m::$t| &s.$f),
            }),*],
        }),*]
    };
}

/// One entry per constant: `"C expression" => rust_expression`.
macro_rules! consts {
    ($($c:literal => $r:expr),* $(,)?) => {
        vec![$(Const { c: $c, rust: stringify!($r), value: to_u64($r) }),*]
    };
}

const FLEX_ALIGN: &str = "C alignment comes from the omitted __aligned_u64 flexible array";
const BASE_FLEX_ALIGN: &str =
    "C alignment comes from the flexible array that ends the embedded `base`";

// Not in the table, having no C counterpart: `cmd::NoResp` (a zero-sized
// marker for commands without a response, checked below to be zero-sized),
// `ioctl::IoctlCmd` (a builder, not `repr(C)`), and the provider-neutral,
// non-`repr(C)` work request types of wr.rs (`SendWr<'a>`, `RecvWr<'a>`,
// `Payload`; `WrOpcode` takes its values from the checked `wr_opcode`
// constants), and `ucma::QueryRoute` and `ucma::LeaveMcast`
// (`repr(transparent)` wrappers of the checked `ucma::Query` and
// `ucma::DestroyId`, which QUERY_ROUTE and LEAVE_MCAST reuse in C). The bitflags types are checked through their bits below
// (`mr::AccessFlags`) or not at all (`wr::SendFlags`: `IB_SEND_*` is
// kernel-internal).
fn entries() -> Vec<Entry> {
    layout! {
        // cmd.rs
        cmd::CmdHdr => "struct ib_uverbs_cmd_hdr" { command, in_words, out_words }
        cmd::ExCmdHdr => "struct ib_uverbs_ex_cmd_hdr" {
            response, provider_in_words, provider_out_words, cmd_hdr_reserved
        }

        // ioctl.rs
        ioctl::Attr => "struct ib_uverbs_attr" { attr_id, len, flags, attr_data, data }
        ioctl::IoctlHdr => "struct ib_uverbs_ioctl_hdr" [flex = "attrs"] {
            length, object_id, method_id, num_attrs, reserved1, driver_id, reserved2
        }

        // device.rs
        device::GetContext => "struct ib_uverbs_get_context" [flex = "driver_data"] { response }
        device::GetContextResp => "struct ib_uverbs_get_context_resp"
            [flex = "driver_data", lower_align = FLEX_ALIGN] { async_fd, num_comp_vectors }
        device::QueryDevice => "struct ib_uverbs_query_device" [flex = "driver_data"] { response }
        device::QueryDeviceResp => "struct ib_uverbs_query_device_resp" {
            fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
            vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
            max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
            max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
            max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
            max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
            max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt, reserved
        }
        device::ExQueryDevice => "struct ib_uverbs_ex_query_device" { comp_mask, reserved }
        device::OdpCaps => "struct ib_uverbs_odp_caps" {
            general_caps,
            rc_odp_caps = "per_transport_caps.rc_odp_caps",
            uc_odp_caps = "per_transport_caps.uc_odp_caps",
            ud_odp_caps = "per_transport_caps.ud_odp_caps",
            reserved,
        }
        device::RssCaps => "struct ib_uverbs_rss_caps" {
            supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size, reserved
        }
        device::TmCaps => "struct ib_uverbs_tm_caps" {
            max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge, reserved
        }
        device::CqModerationCaps => "struct ib_uverbs_cq_moderation_caps" {
            max_cq_moderation_count, max_cq_moderation_period, reserved
        }
        device::ExQueryDeviceResp => "struct ib_uverbs_ex_query_device_resp" {
            base, comp_mask, response_length, odp_caps, timestamp_mask, hca_core_clock,
            device_cap_flags_ex, rss_caps, max_wq_type_rq, raw_packet_caps, tm_caps,
            cq_moderation_caps, max_dm_size, xrc_odp_caps, reserved
        }
        device::QueryPort => "struct ib_uverbs_query_port" [flex = "driver_data"] {
            response, port_num, reserved
        }
        device::QueryPortResp => "struct ib_uverbs_query_port_resp" {
            port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, gid_tbl_len, pkey_tbl_len,
            lid, sm_lid, state, max_mtu, active_mtu, lmc, max_vl_num, sm_sl, subnet_timeout,
            init_type_reply, active_width, active_speed, phys_state, link_layer, flags, reserved
        }
        device::GidEntry => "struct ib_uverbs_gid_entry" {
            gid, gid_index, port_num, gid_type, netdev_ifindex
        }

        // pd.rs
        pd::AllocPd => "struct ib_uverbs_alloc_pd" [flex = "driver_data"] { response }
        pd::AllocPdResp => "struct ib_uverbs_alloc_pd_resp" [flex = "driver_data"] { pd_handle }
        pd::DeallocPd => "struct ib_uverbs_dealloc_pd" { pd_handle }

        // mw.rs
        mw::AllocMw => "struct ib_uverbs_alloc_mw" [flex = "driver_data"] {
            response, pd_handle, mw_type, reserved
        }
        mw::AllocMwResp => "struct ib_uverbs_alloc_mw_resp"
            [flex = "driver_data", lower_align = FLEX_ALIGN] {
            mw_handle, rkey
        }
        mw::DeallocMw => "struct ib_uverbs_dealloc_mw" { mw_handle }

        // mr.rs
        mr::RegMr => "struct ib_uverbs_reg_mr" [flex = "driver_data"] {
            response, start, length, hca_va, pd_handle, access_flags
        }
        mr::RegMrResp => "struct ib_uverbs_reg_mr_resp" [flex = "driver_data"] {
            mr_handle, lkey, rkey
        }
        mr::ReregMr => "struct ib_uverbs_rereg_mr" [flex = "driver_data"] {
            response, mr_handle, flags, start, length, hca_va, pd_handle, access_flags
        }
        mr::ReregMrResp => "struct ib_uverbs_rereg_mr_resp"
            [flex = "driver_data", lower_align = FLEX_ALIGN] { lkey, rkey }
        mr::DeregMr => "struct ib_uverbs_dereg_mr" { mr_handle }

        // cq.rs
        cq::CreateCq => "struct ib_uverbs_create_cq" [flex = "driver_data"] {
            response, user_handle, cqe, comp_vector, comp_channel, reserved
        }
        cq::ExCreateCq => "struct ib_uverbs_ex_create_cq" {
            user_handle, cqe, comp_vector, comp_channel, comp_mask, flags, reserved
        }
        cq::CreateCqResp => "struct ib_uverbs_create_cq_resp"
            [flex = "driver_data", lower_align = FLEX_ALIGN] { cq_handle, cqe }
        cq::ExCreateCqResp => "struct ib_uverbs_ex_create_cq_resp"
            [lower_align = BASE_FLEX_ALIGN] { base, comp_mask, response_length }
        cq::ResizeCq => "struct ib_uverbs_resize_cq" [flex = "driver_data"] {
            response, cq_handle, cqe
        }
        cq::ResizeCqResp => "struct ib_uverbs_resize_cq_resp"
            [flex = "driver_data", lower_align = FLEX_ALIGN] { cqe, reserved }
        cq::ReqNotifyCq => "struct ib_uverbs_req_notify_cq" { cq_handle, solicited_only }
        cq::DestroyCq => "struct ib_uverbs_destroy_cq" { response, cq_handle, reserved }
        cq::DestroyCqResp => "struct ib_uverbs_destroy_cq_resp" {
            comp_events_reported, async_events_reported
        }
        cq::CompEventDesc => "struct ib_uverbs_comp_event_desc" { cq_handle }
        cq::AsyncEventDesc => "struct ib_uverbs_async_event_desc" { element, event_type, reserved }
        cq::CreateCompChannel => "struct ib_uverbs_create_comp_channel" { response }
        cq::CreateCompChannelResp => "struct ib_uverbs_create_comp_channel_resp" { fd }

        // qp.rs
        qp::CreateQp => "struct ib_uverbs_create_qp" [flex = "driver_data"] {
            response, user_handle, pd_handle, send_cq_handle, recv_cq_handle, srq_handle,
            max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, sq_sig_all,
            qp_type, is_srq, reserved
        }
        qp::ExCreateQp => "struct ib_uverbs_ex_create_qp" {
            user_handle, pd_handle, send_cq_handle, recv_cq_handle, srq_handle, max_send_wr,
            max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, sq_sig_all, qp_type,
            is_srq, reserved, comp_mask, create_flags, rwq_ind_tbl_handle, source_qpn
        }
        qp::CreateQpResp => "struct ib_uverbs_create_qp_resp" [flex = "driver_data"] {
            qp_handle, qpn, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
            max_inline_data, reserved
        }
        qp::ExCreateQpResp => "struct ib_uverbs_ex_create_qp_resp" {
            base, comp_mask, response_length
        }
        qp::QpDest => "struct ib_uverbs_qp_dest" {
            dgid, flow_label, dlid, reserved, sgid_index, hop_limit, traffic_class, sl,
            src_path_bits, static_rate, is_global, port_num
        }
        qp::QueryQp => "struct ib_uverbs_query_qp" [flex = "driver_data"] {
            response, qp_handle, attr_mask
        }
        qp::QueryQpResp => "struct ib_uverbs_query_qp_resp"
            [flex = "driver_data", lower_align = FLEX_ALIGN] {
            dest, alt_dest, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
            max_inline_data, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, pkey_index,
            alt_pkey_index, qp_state, cur_qp_state, path_mtu, path_mig_state, sq_draining,
            max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt,
            rnr_retry, alt_port_num, alt_timeout, sq_sig_all, reserved
        }
        qp::ModifyQp => "struct ib_uverbs_modify_qp"
            [flex = "driver_data", lower_align = FLEX_ALIGN] {
            dest, alt_dest, qp_handle, attr_mask, qkey, rq_psn, sq_psn, dest_qp_num,
            qp_access_flags, pkey_index, alt_pkey_index, qp_state, cur_qp_state, path_mtu,
            path_mig_state, en_sqd_async_notify, max_rd_atomic, max_dest_rd_atomic,
            min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout,
            reserved
        }
        qp::ExModifyQp => "struct ib_uverbs_ex_modify_qp" [lower_align = BASE_FLEX_ALIGN] {
            base, rate_limit, reserved
        }
        qp::DestroyQp => "struct ib_uverbs_destroy_qp" { response, qp_handle, reserved }
        qp::AttachMcast => "struct ib_uverbs_attach_mcast"
            [flex = "driver_data", lower_align = FLEX_ALIGN] { gid, qp_handle, mlid, reserved }
        qp::DetachMcast => "struct ib_uverbs_detach_mcast"
            [flex = "driver_data", lower_align = FLEX_ALIGN] { gid, qp_handle, mlid, reserved }
        qp::DestroyQpResp => "struct ib_uverbs_destroy_qp_resp" { events_reported }
        qp::QpAttr => "struct ib_uverbs_qp_attr" {
            qp_attr_mask, qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn,
            sq_psn, dest_qp_num, qp_access_flags, ah_attr, alt_ah_attr, max_send_wr,
            max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, pkey_index,
            alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic,
            max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry,
            alt_port_num, alt_timeout, reserved
        }

        // srq.rs
        srq::CreateSrq => "struct ib_uverbs_create_srq" [flex = "driver_data"] {
            response, user_handle, pd_handle, max_wr, max_sge, srq_limit
        }
        srq::CreateSrqResp => "struct ib_uverbs_create_srq_resp" [flex = "driver_data"] {
            srq_handle, max_wr, max_sge, srqn
        }
        srq::ModifySrq => "struct ib_uverbs_modify_srq"
            [flex = "driver_data", lower_align = FLEX_ALIGN] {
            srq_handle, attr_mask, max_wr, srq_limit
        }
        srq::QuerySrq => "struct ib_uverbs_query_srq" [flex = "driver_data"] {
            response, srq_handle, reserved
        }
        srq::QuerySrqResp => "struct ib_uverbs_query_srq_resp" {
            max_wr, max_sge, srq_limit, reserved
        }
        srq::DestroySrq => "struct ib_uverbs_destroy_srq" { response, srq_handle, reserved }
        srq::DestroySrqResp => "struct ib_uverbs_destroy_srq_resp" { events_reported }

        // ah.rs
        ah::GlobalRoute => "struct ib_uverbs_global_route" {
            dgid, flow_label, sgid_index, hop_limit, traffic_class, reserved
        }
        ah::AhAttr => "struct ib_uverbs_ah_attr" {
            grh, dlid, sl, src_path_bits, static_rate, is_global, port_num, reserved
        }
        ah::CreateAh => "struct ib_uverbs_create_ah" [flex = "driver_data"] {
            response, user_handle, pd_handle, reserved, attr
        }
        ah::CreateAhResp => "struct ib_uverbs_create_ah_resp" [flex = "driver_data"] {
            ah_handle
        }
        ah::DestroyAh => "struct ib_uverbs_destroy_ah" { ah_handle }

        // wr.rs
        wr::Sge => "struct ib_uverbs_sge" { addr, length, lkey }
        wr::Wc => "struct ib_uverbs_wc" {
            wr_id, status, opcode, vendor_err, byte_len, ex, qp_num, src_qp, wc_flags,
            pkey_index, slid, sl, dlid_path_bits, port_num, reserved
        }
        wr::PostSend => "struct ib_uverbs_post_send" [flex = "send_wr"] {
            response, qp_handle, wr_count, sge_count, wqe_size
        }
        wr::PostSendResp => "struct ib_uverbs_post_send_resp" { bad_wr }

        // rxe.rs
        rxe::MmInfo => "struct mminfo" { offset, size, pad }
        rxe::CreateCqResp => "struct rxe_create_cq_resp" { mi }
        rxe::ResizeCqResp => "struct rxe_resize_cq_resp" { mi }
        rxe::CreateQpResp => "struct rxe_create_qp_resp" { rq_mi, sq_mi }
        rxe::CreateSrqResp => "struct rxe_create_srq_resp" { mi, srq_num, reserved }
        rxe::ModifySrqCmd => "struct rxe_modify_srq_cmd" { mmap_info_addr }
        rxe::CreateAhResp => "struct rxe_create_ah_resp" { ah_num, reserved }
        rxe::QueueBuf => "struct rxe_queue_buf" [flex = "data"] {
            log2_elem_size, index_mask, pad_1, producer_index, pad_2, consumer_index, pad_3
        }
        rxe::GlobalRoute => "struct rxe_global_route" {
            dgid, flow_label, sgid_index, hop_limit, traffic_class, pad = _
        }
        rxe::Av => "struct rxe_av" {
            port_num, network_type, dmac, grh, sgid_addr, dgid_addr
        }
        rxe::WrRdma => "struct rxe_send_wr" [member = "wr.rdma"] { remote_addr, rkey, reserved }
        rxe::WrAtomic => "struct rxe_send_wr" [member = "wr.atomic"] {
            remote_addr, compare_add, swap, rkey, reserved
        }
        rxe::WrMw => "struct rxe_send_wr" [member = "wr.mw"] {
            addr, length, mr_lkey, mw_rkey, rkey, access
        }
        rxe::WrUd => "struct rxe_send_wr" [member = "wr.ud"] {
            remote_qpn, remote_qkey, pkey_index, reserved, ah_num, pad, av
        }
        rxe::SendWr => "struct rxe_send_wr" { wr_id, reserved, opcode, send_flags, ex, wr }
        rxe::DmaInfo => "struct rxe_dma_info" [flex = "sge", lower_align = FLEX_ALIGN] {
            length, resid, cur_sge, num_sge, sge_offset, reserved
        }
        rxe::SendWqe => "struct rxe_send_wqe" [
            flex = "dma.sge",
            size = "offsetof(struct rxe_send_wqe, dma) + sizeof(struct rxe_dma_info)",
        ] {
            wr, status, state, iova, mask, first_psn, last_psn, ack_length, ssn,
            has_rd_atomic, dma
        }
        rxe::RecvWqe => "struct rxe_recv_wqe" [
            flex = "dma.sge",
            size = "offsetof(struct rxe_recv_wqe, dma) + sizeof(struct rxe_dma_info)",
        ] {
            wr_id, reserved, padding, dma
        }

        // ucma.rs (<rdma/rdma_user_cm.h>, <rdma/ib_user_sa.h>); the socket
        // addresses are byte arrays, checked for size and alignment
        ucma::SockaddrIn6 => "struct sockaddr_in6" { bytes = _ }
        ucma::SockaddrStorage => "struct __kernel_sockaddr_storage" { bytes = _ }
        ucma::UserPathRec => "struct ib_user_path_rec" {
            dgid, sgid, dlid, slid, raw_traffic, flow_label, reversible, mtu, pkey, hop_limit,
            traffic_class, numb_path, sl, mtu_selector, rate_selector, rate,
            packet_life_time_selector, packet_life_time, preference
        }
        ucma::PathRecData => "struct ib_path_rec_data" { flags, reserved, path_rec }
        ucma::CmdHdr => "struct rdma_ucm_cmd_hdr" { cmd, in_len = "in", out_len = "out" }
        ucma::CreateId => "struct rdma_ucm_create_id" { uid, response, ps, qp_type, reserved }
        ucma::CreateIdResp => "struct rdma_ucm_create_id_resp" { id }
        ucma::DestroyId => "struct rdma_ucm_destroy_id" { response, id, reserved }
        ucma::DestroyIdResp => "struct rdma_ucm_destroy_id_resp" { events_reported }
        ucma::BindIp => "struct rdma_ucm_bind_ip" { response, addr, id }
        ucma::Bind => "struct rdma_ucm_bind" { id, addr_size, reserved, addr }
        ucma::ResolveIp => "struct rdma_ucm_resolve_ip" { src_addr, dst_addr, id, timeout_ms }
        ucma::ResolveAddr => "struct rdma_ucm_resolve_addr" {
            id, timeout_ms, src_size, dst_size, reserved, src_addr, dst_addr
        }
        ucma::ResolveRoute => "struct rdma_ucm_resolve_route" { id, timeout_ms }
        ucma::Query => "struct rdma_ucm_query" { response, id, option }
        ucma::QueryRouteResp => "struct rdma_ucm_query_route_resp" {
            node_guid, ib_route, src_addr, dst_addr, num_paths, port_num, reserved, ibdev_index,
            reserved1
        }
        ucma::QueryAddrResp => "struct rdma_ucm_query_addr_resp" {
            node_guid, port_num, reserved, pkey, src_size, dst_size, src_addr, dst_addr,
            ibdev_index, reserved1
        }
        ucma::QueryPathResp => "struct rdma_ucm_query_path_resp" [flex = "path_data"] {
            num_paths, reserved
        }
        ucma::ConnParam => "struct rdma_ucm_conn_param" {
            qp_num, qkey, private_data, private_data_len, srq, responder_resources,
            initiator_depth, flow_control, retry_count, rnr_retry_count, valid
        }
        ucma::UdParam => "struct rdma_ucm_ud_param" {
            qp_num, qkey, ah_attr, private_data, private_data_len, reserved
        }
        ucma::Ece => "struct rdma_ucm_ece" { vendor_id, attr_mod }
        ucma::Connect => "struct rdma_ucm_connect" { conn_param, id, reserved, ece }
        ucma::Listen => "struct rdma_ucm_listen" { id, backlog }
        ucma::Accept => "struct rdma_ucm_accept" { uid, conn_param, id, reserved, ece }
        ucma::Reject => "struct rdma_ucm_reject" {
            id, private_data_len, reason, reserved, private_data
        }
        ucma::Disconnect => "struct rdma_ucm_disconnect" { id }
        ucma::InitQpAttr => "struct rdma_ucm_init_qp_attr" { response, id, qp_state }
        ucma::Notify => "struct rdma_ucm_notify" { id, event }
        ucma::JoinIpMcast => "struct rdma_ucm_join_ip_mcast" { response, uid, addr, id }
        ucma::JoinMcast => "struct rdma_ucm_join_mcast" {
            response, uid, id, addr_size, join_flags, addr
        }
        ucma::GetEvent => "struct rdma_ucm_get_event" { response }
        ucma::EventResp => "struct rdma_ucm_event_resp" {
            uid, id, event, status, param, reserved, ece
        }
        ucma::SetOption => "struct rdma_ucm_set_option" { optval, id, level, optname, optlen }
        ucma::MigrateId => "struct rdma_ucm_migrate_id" { response, id, fd }
        ucma::MigrateResp => "struct rdma_ucm_migrate_resp" { events_reported }

        // mlx5.rs
        mlx5::AllocUcontextReqV2 => "struct mlx5_ib_alloc_ucontext_req_v2" {
            total_num_bfregs, num_low_latency_bfregs, flags, comp_mask, max_cqe_version,
            reserved0, reserved1, reserved2, lib_caps
        }
        mlx5::AllocUcontextResp => "struct mlx5_ib_alloc_ucontext_resp" {
            qp_tab_size, bf_reg_size, tot_bfregs, cache_line_size, max_sq_desc_sz,
            max_rq_desc_sz, max_send_wqebb, max_recv_wr, max_srq_recv_wr, num_ports,
            flow_action_flags, comp_mask, response_length, cqe_version, cmds_supp_uhw,
            eth_min_inline, clock_info_versions, hca_core_clock_offset, log_uar_size,
            num_uars_per_page, num_dyn_bfregs, dump_fill_mkey
        }
        mlx5::AllocPdResp => "struct mlx5_ib_alloc_pd_resp" { pdn }
        mlx5::QueryDeviceResp => "struct mlx5_ib_query_device_resp"
            [lower_align = "the nested capability structs are byte arrays here"] {
            comp_mask, response_length, tso_caps, rss_caps, cqe_comp_caps, packet_pacing_caps,
            mlx5_ib_support_multi_pkt_send_wqes, flags, sw_parsing_caps, striding_rq_caps,
            tunnel_offloads_caps, dci_streams_caps, reserved
        }
        mlx5::CreateCq => "struct mlx5_ib_create_cq" {
            buf_addr, db_addr, cqe_size, cqe_comp_en, cqe_comp_res_format, flags,
            uar_page_index, reserved0, reserved1
        }
        mlx5::CreateCqResp => "struct mlx5_ib_create_cq_resp" { cqn, reserved }
        mlx5::ResizeCq => "struct mlx5_ib_resize_cq" { buf_addr, cqe_size, reserved0, reserved1 }
        mlx5::CreateSrq => "struct mlx5_ib_create_srq" {
            buf_addr, db_addr, flags, reserved0, uidx, reserved1
        }
        mlx5::CreateSrqResp => "struct mlx5_ib_create_srq_resp" { srqn, reserved }
        mlx5::CreateQp => "struct mlx5_ib_create_qp" {
            buf_addr, db_addr, sq_wqe_count, rq_wqe_count, rq_wqe_shift, flags, uidx,
            bfreg_index, sq_buf_addr, ece_options,
            dci_log_num_concurent = "dci_streams.log_num_concurent",
            dci_log_num_errored = "dci_streams.log_num_errored",
            reserved,
        }
        mlx5::CreateQpResp => "struct mlx5_ib_create_qp_resp" {
            bfreg_index, ece_options, comp_mask, tirn, tisn, rqn, sqn, reserved1, tir_icm_addr
        }
        mlx5::CreateAhResp => "struct mlx5_ib_create_ah_resp" { response_length, dmac, reserved }

        // efa.rs
        efa::AllocUcontextCmd => "struct efa_ibv_alloc_ucontext_cmd" { comp_mask, reserved_20 }
        efa::AllocUcontextResp => "struct efa_ibv_alloc_ucontext_resp" {
            comp_mask, cmds_supp_udata_mask, sub_cqs_per_cq, inline_buf_size, max_llq_size,
            max_tx_batch, min_sq_wr, reserved_a0,
        }
        efa::AllocPdResp => "struct efa_ibv_alloc_pd_resp" { comp_mask, pdn, reserved_30 }
        efa::CreateCq => "struct efa_ibv_create_cq" {
            comp_mask, cq_entry_size, num_sub_cqs, flags, reserved_58,
        }
        efa::CreateCqResp => "struct efa_ibv_create_cq_resp" {
            comp_mask, reserved_20, q_mmap_key, q_mmap_size, cq_idx, reserved_d0, db_off,
            db_mmap_key,
        }
        efa::CreateQp => "struct efa_ibv_create_qp" {
            comp_mask, rq_ring_size, sq_ring_size, driver_qp_type,
        }
        efa::CreateQpResp => "struct efa_ibv_create_qp_resp" {
            comp_mask, rq_db_offset, sq_db_offset, llq_desc_offset, rq_mmap_key, rq_mmap_size,
            rq_db_mmap_key, sq_db_mmap_key, llq_desc_mmap_key, send_sub_cq_idx,
            recv_sub_cq_idx, reserved_1e0,
        }
        efa::CreateAhResp => "struct efa_ibv_create_ah_resp" {
            comp_mask, efa_address_handle, reserved_30,
        }
        efa::ExQueryDeviceResp => "struct efa_ibv_ex_query_device_resp" {
            comp_mask, max_sq_wr, max_rq_wr, max_sq_sge, max_rq_sge, max_rdma_size, device_caps,
        }

        // mlx5/prm.rs (rdma-core's mlx5dv.h)
        prm::CtrlSeg => "struct mlx5_wqe_ctrl_seg" {
            opmod_idx_opcode, qpn_ds, signature, dci_stream_channel_id, fm_ce_se, imm
        }
        prm::RaddrSeg => "struct mlx5_wqe_raddr_seg" { raddr, rkey, reserved }
        prm::AtomicSeg => "struct mlx5_wqe_atomic_seg" { swap_add, compare }
        prm::DataSeg => "struct mlx5_wqe_data_seg" { byte_count, lkey, addr }
        prm::InlineSeg => "struct mlx5_wqe_inl_data_seg" { byte_count }
        prm::Av => "struct mlx5_wqe_av" {
            qkey = "key.qkey.qkey", qkey_reserved = "key.qkey.reserved", dqp_dct,
            stat_rate_sl, fl_mlid, rlid, reserved0, rmac, tclass, hop_limit, grh_gid_fl, rgid
        }
        prm::DatagramSeg => "struct mlx5_wqe_datagram_seg" { av }
        prm::SrqNextSeg => "struct mlx5_wqe_srq_next_seg" {
            rsvd0, next_wqe_index, signature, rsvd1
        }
        // The first 32 bytes are a union; the Rust struct is its anonymous
        // completion arm, whose members C names directly.
        prm::Cqe64 => "struct mlx5_cqe64" {
            rsvd0, wqe_id, rsvd4, ml_path, rsvd20, slid, flags_rqpn, hds_ip_ext,
            l4_hdr_type_etc, vlan_info, srqn_uidx, imm_inval_pkey, app, app_op, app_info,
            byte_cnt, timestamp, sop_drop_qpn, wqe_counter, signature, op_own
        }
        prm::ErrCqe => "struct mlx5_err_cqe" {
            rsvd0, srqn, rsvd1, vendor_err_synd, syndrome, s_wqe_opcode_qpn, wqe_counter,
            signature, op_own
        }
    }
}

// Not checked, because the uapi headers do not define them (they are
// kernel-internal, in include/rdma/ib_verbs.h): `wr::wc_status`
// (`enum ib_wc_status`), `wr::wc_flags` (`enum ib_wc_flags`),
// `wr::send_flags` (`IB_SEND_*`), `wr::wc_opcode::{RECV,
// RECV_RDMA_WITH_IMM}` (`IB_WC_RECV*` of `enum ib_wc_opcode`),
// `qp::qp_state` (`enum ib_qp_state`), `ucma::event`
// (`enum rdma_cm_event_type`, include/rdma/rdma_cm.h), `qp::attr_mask`
// (`enum ib_qp_attr_mask`), and `device::IB_LINK_LAYER_*`
// (`enum rdma_link_layer`). `qp::qp_type` is checked against the uapi
// mirror `enum ib_uverbs_qp_type`. `cmd::MAX_CMD_BYTES` and
// `ioctl::MAX_ATTRS` are this crate's own limits.
fn constants() -> Vec<Const> {
    use cmd::nr;
    use mr::AccessFlags as A;
    use wr::{wc_opcode as wc, wr_opcode as op};
    consts! {
        "IB_USER_VERBS_ABI_VERSION" => rverbs_abi::IB_USER_VERBS_ABI_VERSION,

        // cmd.rs
        "IB_USER_VERBS_CMD_FLAG_EXTENDED" => cmd::IB_USER_VERBS_CMD_FLAG_EXTENDED,
        "IB_USER_VERBS_CMD_GET_CONTEXT" => nr::GET_CONTEXT,
        "IB_USER_VERBS_CMD_QUERY_DEVICE" => nr::QUERY_DEVICE,
        "IB_USER_VERBS_CMD_QUERY_PORT" => nr::QUERY_PORT,
        "IB_USER_VERBS_CMD_ALLOC_PD" => nr::ALLOC_PD,
        "IB_USER_VERBS_CMD_ALLOC_MW" => nr::ALLOC_MW,
        "IB_USER_VERBS_CMD_DEALLOC_MW" => nr::DEALLOC_MW,
        "IB_USER_VERBS_CMD_DEALLOC_PD" => nr::DEALLOC_PD,
        "IB_USER_VERBS_CMD_CREATE_AH" => nr::CREATE_AH,
        "IB_USER_VERBS_CMD_DESTROY_AH" => nr::DESTROY_AH,
        "IB_USER_VERBS_CMD_REG_MR" => nr::REG_MR,
        "IB_USER_VERBS_CMD_REREG_MR" => nr::REREG_MR,
        "IB_USER_VERBS_CMD_DEREG_MR" => nr::DEREG_MR,
        "IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL" => nr::CREATE_COMP_CHANNEL,
        "IB_USER_VERBS_CMD_CREATE_CQ" => nr::CREATE_CQ,
        "IB_USER_VERBS_CMD_RESIZE_CQ" => nr::RESIZE_CQ,
        "IB_USER_VERBS_CMD_DESTROY_CQ" => nr::DESTROY_CQ,
        "IB_USER_VERBS_CMD_REQ_NOTIFY_CQ" => nr::REQ_NOTIFY_CQ,
        "IB_USER_VERBS_CMD_CREATE_QP" => nr::CREATE_QP,
        "IB_USER_VERBS_CMD_QUERY_QP" => nr::QUERY_QP,
        "IB_USER_VERBS_CMD_MODIFY_QP" => nr::MODIFY_QP,
        "IB_USER_VERBS_CMD_DESTROY_QP" => nr::DESTROY_QP,
        "IB_USER_VERBS_CMD_POST_SEND" => nr::POST_SEND,
        "IB_USER_VERBS_CMD_POST_RECV" => nr::POST_RECV,
        "IB_USER_VERBS_CMD_ATTACH_MCAST" => nr::ATTACH_MCAST,
        "IB_USER_VERBS_CMD_DETACH_MCAST" => nr::DETACH_MCAST,
        "IB_USER_VERBS_CMD_CREATE_SRQ" => nr::CREATE_SRQ,
        "IB_USER_VERBS_CMD_MODIFY_SRQ" => nr::MODIFY_SRQ,
        "IB_USER_VERBS_CMD_QUERY_SRQ" => nr::QUERY_SRQ,
        "IB_USER_VERBS_CMD_DESTROY_SRQ" => nr::DESTROY_SRQ,
        "IB_USER_VERBS_CMD_POST_SRQ_RECV" => nr::POST_SRQ_RECV,
        "IB_USER_VERBS_EX_CMD_QUERY_DEVICE" => nr::EX_QUERY_DEVICE,
        "IB_USER_VERBS_EX_CMD_CREATE_CQ" => nr::EX_CREATE_CQ,
        "IB_USER_VERBS_EX_CMD_CREATE_QP" => nr::EX_CREATE_QP,

        // ioctl.rs
        "RDMA_IOCTL_MAGIC" => ioctl::RDMA_IOCTL_MAGIC,
        "RDMA_VERBS_IOCTL" => ioctl::RDMA_VERBS_IOCTL,
        "UVERBS_ATTR_F_MANDATORY" => ioctl::UVERBS_ATTR_F_MANDATORY,
        "UVERBS_ATTR_F_VALID_OUTPUT" => ioctl::UVERBS_ATTR_F_VALID_OUTPUT,
        "UVERBS_OBJECT_DEVICE" => ioctl::object::DEVICE,
        "UVERBS_METHOD_QUERY_PORT" => ioctl::device_method::QUERY_PORT,
        "UVERBS_METHOD_QUERY_GID_TABLE" => ioctl::device_method::QUERY_GID_TABLE,
        "UVERBS_OBJECT_MR" => ioctl::object::MR,
        "UVERBS_METHOD_ADVISE_MR" => ioctl::mr_method::ADVISE_MR,
        "UVERBS_ATTR_ADVISE_MR_PD_HANDLE" => ioctl::advise_mr_attr::PD_HANDLE,
        "UVERBS_ATTR_ADVISE_MR_ADVICE" => ioctl::advise_mr_attr::ADVICE,
        "UVERBS_ATTR_ADVISE_MR_FLAGS" => ioctl::advise_mr_attr::FLAGS,
        "UVERBS_ATTR_ADVISE_MR_SGE_LIST" => ioctl::advise_mr_attr::SGE_LIST,
        "IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH" => ioctl::advise_mr_advice::PREFETCH,
        "IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE" => ioctl::advise_mr_advice::PREFETCH_WRITE,
        "IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT" => ioctl::advise_mr_advice::PREFETCH_NO_FAULT,
        "IB_UVERBS_ADVISE_MR_FLAG_FLUSH" => ioctl::ADVISE_MR_FLAG_FLUSH,
        "IBV_ODP_SUPPORT" => device::odp_general::SUPPORT,
        "IBV_ODP_SUPPORT_IMPLICIT" => device::odp_general::IMPLICIT,
        "IBV_ODP_SUPPORT_SEND" => device::odp_transport::SEND,
        "IBV_ODP_SUPPORT_RECV" => device::odp_transport::RECV,
        "IBV_ODP_SUPPORT_WRITE" => device::odp_transport::WRITE,
        "IBV_ODP_SUPPORT_READ" => device::odp_transport::READ,
        "IBV_ODP_SUPPORT_ATOMIC" => device::odp_transport::ATOMIC,
        "IBV_ODP_SUPPORT_SRQ_RECV" => device::odp_transport::SRQ_RECV,
        "UVERBS_METHOD_QUERY_GID_ENTRY" => ioctl::device_method::QUERY_GID_ENTRY,
        "UVERBS_ATTR_QUERY_GID_ENTRY_PORT" => ioctl::query_gid_entry_attr::PORT,
        "UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX" => ioctl::query_gid_entry_attr::GID_INDEX,
        "UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS" => ioctl::query_gid_entry_attr::FLAGS,
        "UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY" => ioctl::query_gid_entry_attr::RESP_ENTRY,
        "UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE" => ioctl::query_gid_table_attr::ENTRY_SIZE,
        "UVERBS_ATTR_QUERY_GID_TABLE_FLAGS" => ioctl::query_gid_table_attr::FLAGS,
        "UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES" => ioctl::query_gid_table_attr::RESP_ENTRIES,
        "UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES" =>
            ioctl::query_gid_table_attr::RESP_NUM_ENTRIES,

        // device.rs
        "IB_UVERBS_GID_TYPE_IB" => device::IB_UVERBS_GID_TYPE_IB,
        "IB_UVERBS_GID_TYPE_ROCE_V1" => device::IB_UVERBS_GID_TYPE_ROCE_V1,
        "IB_UVERBS_GID_TYPE_ROCE_V2" => device::IB_UVERBS_GID_TYPE_ROCE_V2,

        // mr.rs
        "IB_UVERBS_QP_CREATE_BLOCK_MULTICAST_LOOPBACK" => qp::QpCreateFlags::BLOCK_MULTICAST_LOOPBACK.bits(),
        "IB_UVERBS_QP_CREATE_SCATTER_FCS" => qp::QpCreateFlags::SCATTER_FCS.bits(),
        "IB_UVERBS_QP_CREATE_CVLAN_STRIPPING" => qp::QpCreateFlags::CVLAN_STRIPPING.bits(),
        "IB_UVERBS_QP_CREATE_PCI_WRITE_END_PADDING" => qp::QpCreateFlags::PCI_WRITE_END_PADDING.bits(),
        "IB_UVERBS_QP_CREATE_SQ_SIG_ALL" => qp::QpCreateFlags::SQ_SIG_ALL.bits(),
        "IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION" => 1u32,
        "IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN" => 2u32,
        "IB_UVERBS_ACCESS_LOCAL_WRITE" => A::LOCAL_WRITE.bits(),
        "IB_UVERBS_ACCESS_REMOTE_WRITE" => A::REMOTE_WRITE.bits(),
        "IB_UVERBS_ACCESS_REMOTE_READ" => A::REMOTE_READ.bits(),
        "IB_UVERBS_ACCESS_REMOTE_ATOMIC" => A::REMOTE_ATOMIC.bits(),
        "IB_UVERBS_ACCESS_MW_BIND" => A::MW_BIND.bits(),
        "IB_UVERBS_ACCESS_ZERO_BASED" => A::ZERO_BASED.bits(),
        "IB_UVERBS_ACCESS_ON_DEMAND" => A::ON_DEMAND.bits(),
        "IB_UVERBS_ACCESS_HUGETLB" => A::HUGETLB.bits(),
        "IB_UVERBS_ACCESS_RELAXED_ORDERING" => A::RELAXED_ORDERING.bits(),

        // qp.rs
        "IB_UVERBS_QPT_RC" => qp::qp_type::RC,
        "IB_UVERBS_QPT_UC" => qp::qp_type::UC,
        "IB_UVERBS_QPT_UD" => qp::qp_type::UD,

        // wr.rs
        "IB_UVERBS_WR_RDMA_WRITE" => op::RDMA_WRITE,
        "IB_UVERBS_WR_RDMA_WRITE_WITH_IMM" => op::RDMA_WRITE_WITH_IMM,
        "IB_UVERBS_WR_SEND" => op::SEND,
        "IB_UVERBS_WR_SEND_WITH_IMM" => op::SEND_WITH_IMM,
        "IB_UVERBS_WR_RDMA_READ" => op::RDMA_READ,
        "IB_UVERBS_WR_ATOMIC_CMP_AND_SWP" => op::ATOMIC_CMP_AND_SWP,
        "IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD" => op::ATOMIC_FETCH_AND_ADD,
        "IB_UVERBS_WR_LOCAL_INV" => op::LOCAL_INV,
        "IB_UVERBS_WR_BIND_MW" => op::BIND_MW,
        "IB_UVERBS_WR_SEND_WITH_INV" => op::SEND_WITH_INV,
        "IB_UVERBS_WC_SEND" => wc::SEND,
        "IB_UVERBS_WC_RDMA_WRITE" => wc::RDMA_WRITE,
        "IB_UVERBS_WC_RDMA_READ" => wc::RDMA_READ,
        "IB_UVERBS_WC_COMP_SWAP" => wc::COMP_SWAP,
        "IB_UVERBS_WC_FETCH_ADD" => wc::FETCH_ADD,
        "IB_UVERBS_WC_BIND_MW" => wc::BIND_MW,
        "IB_UVERBS_WC_LOCAL_INV" => wc::LOCAL_INV,
        // Debian 12's kernel headers predate ATOMIC_WRITE and FLUSH;
        // rdma-core's verbs.h has ATOMIC_WRITE (FLUSH is newer still).
        "IBV_WR_ATOMIC_WRITE" => op::ATOMIC_WRITE,
        "IBV_WC_ATOMIC_WRITE" => wc::ATOMIC_WRITE,
        "IB_UVERBS_ACCESS_OPTIONAL_RANGE" => A::OPTIONAL_RANGE.bits(),
        "sizeof(struct ib_uverbs_send_wr)" => wr::UVERBS_SEND_WR_SIZE,

        // rxe.rs
        "RXE_NETWORK_TYPE_IPV4" => rxe::RXE_NETWORK_TYPE_IPV4,
        "RXE_NETWORK_TYPE_IPV6" => rxe::RXE_NETWORK_TYPE_IPV6,
        "offsetof(struct rxe_queue_buf, data)" => rxe::QUEUE_DATA_OFFSET,
        "sizeof(((struct rxe_send_wr *)0)->wr)" => rxe::SEND_WR_UNION_BYTES,

        // ucma.rs
        "RDMA_USER_CM_ABI_VERSION" => ucma::RDMA_USER_CM_ABI_VERSION,
        "RDMA_MAX_PRIVATE_DATA" => ucma::RDMA_MAX_PRIVATE_DATA,
        "RDMA_USER_CM_CMD_CREATE_ID" => ucma::nr::CREATE_ID,
        "RDMA_USER_CM_CMD_DESTROY_ID" => ucma::nr::DESTROY_ID,
        "RDMA_USER_CM_CMD_BIND_IP" => ucma::nr::BIND_IP,
        "RDMA_USER_CM_CMD_RESOLVE_IP" => ucma::nr::RESOLVE_IP,
        "RDMA_USER_CM_CMD_RESOLVE_ROUTE" => ucma::nr::RESOLVE_ROUTE,
        "RDMA_USER_CM_CMD_QUERY_ROUTE" => ucma::nr::QUERY_ROUTE,
        "RDMA_USER_CM_CMD_CONNECT" => ucma::nr::CONNECT,
        "RDMA_USER_CM_CMD_LISTEN" => ucma::nr::LISTEN,
        "RDMA_USER_CM_CMD_ACCEPT" => ucma::nr::ACCEPT,
        "RDMA_USER_CM_CMD_REJECT" => ucma::nr::REJECT,
        "RDMA_USER_CM_CMD_DISCONNECT" => ucma::nr::DISCONNECT,
        "RDMA_USER_CM_CMD_INIT_QP_ATTR" => ucma::nr::INIT_QP_ATTR,
        "RDMA_USER_CM_CMD_GET_EVENT" => ucma::nr::GET_EVENT,
        "RDMA_USER_CM_CMD_GET_OPTION" => ucma::nr::GET_OPTION,
        "RDMA_USER_CM_CMD_SET_OPTION" => ucma::nr::SET_OPTION,
        "RDMA_USER_CM_CMD_NOTIFY" => ucma::nr::NOTIFY,
        "RDMA_USER_CM_CMD_JOIN_IP_MCAST" => ucma::nr::JOIN_IP_MCAST,
        "RDMA_USER_CM_CMD_LEAVE_MCAST" => ucma::nr::LEAVE_MCAST,
        "RDMA_USER_CM_CMD_MIGRATE_ID" => ucma::nr::MIGRATE_ID,
        "RDMA_USER_CM_CMD_QUERY" => ucma::nr::QUERY,
        "RDMA_USER_CM_CMD_BIND" => ucma::nr::BIND,
        "RDMA_USER_CM_CMD_RESOLVE_ADDR" => ucma::nr::RESOLVE_ADDR,
        "RDMA_USER_CM_CMD_JOIN_MCAST" => ucma::nr::JOIN_MCAST,
        "RDMA_PS_IPOIB" => ucma::port_space::IPOIB,
        "RDMA_PS_IB" => ucma::port_space::IB,
        "RDMA_PS_TCP" => ucma::port_space::TCP,
        "RDMA_PS_UDP" => ucma::port_space::UDP,
        "RDMA_USER_CM_QUERY_ADDR" => ucma::query_option::ADDR,
        "RDMA_USER_CM_QUERY_PATH" => ucma::query_option::PATH,
        "RDMA_USER_CM_QUERY_GID" => ucma::query_option::GID,
        "RDMA_MC_JOIN_FLAG_FULLMEMBER" => ucma::mc_join_flag::FULLMEMBER,
        "RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER" => ucma::mc_join_flag::SENDONLY_FULLMEMBER,
        "RDMA_MC_JOIN_FLAG_RESERVED" => ucma::mc_join_flag::RESERVED,
        "RDMA_OPTION_ID" => ucma::option_level::ID,
        "RDMA_OPTION_IB" => ucma::option_level::IB,
        "RDMA_OPTION_ID_TOS" => ucma::option_name::ID_TOS,
        "RDMA_OPTION_ID_REUSEADDR" => ucma::option_name::ID_REUSEADDR,
        "RDMA_OPTION_ID_AFONLY" => ucma::option_name::ID_AFONLY,
        "RDMA_OPTION_ID_ACK_TIMEOUT" => ucma::option_name::ID_ACK_TIMEOUT,
        "RDMA_OPTION_IB_PATH" => ucma::option_name::IB_PATH,
        "IB_PATH_GMP" => ucma::path_flag::GMP,
        "IB_PATH_PRIMARY" => ucma::path_flag::PRIMARY,
        "IB_PATH_ALTERNATE" => ucma::path_flag::ALTERNATE,
        "IB_PATH_OUTBOUND" => ucma::path_flag::OUTBOUND,
        "IB_PATH_INBOUND" => ucma::path_flag::INBOUND,
        "IB_PATH_INBOUND_REVERSE" => ucma::path_flag::INBOUND_REVERSE,
        "IB_PATH_BIDIRECTIONAL" => ucma::path_flag::BIDIRECTIONAL,
        "sizeof(((struct rdma_ucm_event_resp *)0)->param)" => ucma::EVENT_PARAM_LEN,
        "offsetof(struct rdma_ucm_event_resp, reserved)" => ucma::EventResp::MIN_LEN,
        "sizeof(struct sockaddr_in)" => ucma::SOCKADDR_IN_LEN,
        "sizeof(struct sockaddr_in6)" => ucma::SOCKADDR_IN6_LEN,
        "sizeof(struct __kernel_sockaddr_storage)" => ucma::SOCKADDR_STORAGE_LEN,
        "offsetof(struct sockaddr_in, sin_port)" => ucma::sockaddr_off::SIN_PORT,
        "offsetof(struct sockaddr_in, sin_addr)" => ucma::sockaddr_off::SIN_ADDR,
        "offsetof(struct sockaddr_in6, sin6_port)" => ucma::sockaddr_off::SIN6_PORT,
        "offsetof(struct sockaddr_in6, sin6_flowinfo)" => ucma::sockaddr_off::SIN6_FLOWINFO,
        "offsetof(struct sockaddr_in6, sin6_addr)" => ucma::sockaddr_off::SIN6_ADDR,
        "offsetof(struct sockaddr_in6, sin6_scope_id)" => ucma::sockaddr_off::SIN6_SCOPE_ID,
        "offsetof(struct sockaddr_in, sin_family)" => 0usize,
        "offsetof(struct sockaddr_in6, sin6_family)" => 0usize,

        // mlx5.rs
        "MLX5_IB_UVERBS_ABI_VERSION" => mlx5::MLX5_IB_UVERBS_ABI_VERSION,
        "MLX5_IB_ALLOC_UCTX_DEVX" => mlx5::MLX5_IB_ALLOC_UCTX_DEVX,
        "MLX5_LIB_CAP_4K_UAR" => mlx5::MLX5_LIB_CAP_4K_UAR,
        "MLX5_LIB_CAP_DYN_UAR" => mlx5::MLX5_LIB_CAP_DYN_UAR,
        "MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE" => mlx5::MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE,
        "MLX5_USER_CMDS_SUPP_UHW_CREATE_AH" => mlx5::MLX5_USER_CMDS_SUPP_UHW_CREATE_AH,
        "MLX5_QP_FLAG_SIGNATURE" => mlx5::MLX5_QP_FLAG_SIGNATURE,
        "MLX5_QP_FLAG_SCATTER_CQE" => mlx5::MLX5_QP_FLAG_SCATTER_CQE,
        "MLX5_QP_FLAG_BFREG_INDEX" => mlx5::MLX5_QP_FLAG_BFREG_INDEX,
        "MLX5_QP_FLAG_UAR_PAGE_INDEX" => mlx5::MLX5_QP_FLAG_UAR_PAGE_INDEX,
        "MLX5_SRQ_FLAG_SIGNATURE" => mlx5::MLX5_SRQ_FLAG_SIGNATURE,
        "MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD" => mlx5::MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD,
        "MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX" => mlx5::MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX,
        "MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS" => mlx5::MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS,
        "MLX5_IB_MMAP_REGULAR_PAGE" => mlx5::mmap_cmd::REGULAR_PAGE,
        "MLX5_IB_MMAP_GET_CONTIGUOUS_PAGES" => mlx5::mmap_cmd::GET_CONTIGUOUS_PAGES,
        "MLX5_IB_MMAP_WC_PAGE" => mlx5::mmap_cmd::WC_PAGE,
        "MLX5_IB_MMAP_NC_PAGE" => mlx5::mmap_cmd::NC_PAGE,
        "MLX5_IB_MMAP_CORE_CLOCK" => mlx5::mmap_cmd::CORE_CLOCK,
        "MLX5_IB_MMAP_ALLOC_WC" => mlx5::mmap_cmd::ALLOC_WC,
        "MLX5_IB_MMAP_CLOCK_INFO" => mlx5::mmap_cmd::CLOCK_INFO,
        "MLX5_IB_MMAP_DEVICE_MEM" => mlx5::mmap_cmd::DEVICE_MEM,

        // efa.rs (Debian 12's efa-abi.h; the newer bits are not in it)
        "EFA_UVERBS_ABI_VERSION" => efa::EFA_UVERBS_ABI_VERSION,
        "EFA_ALLOC_UCONTEXT_CMD_COMP_TX_BATCH" => efa::alloc_ucontext_comp::TX_BATCH,
        "EFA_ALLOC_UCONTEXT_CMD_COMP_MIN_SQ_WR" => efa::alloc_ucontext_comp::MIN_SQ_WR,
        "EFA_USER_CMDS_SUPP_UDATA_QUERY_DEVICE" => efa::supp_udata::QUERY_DEVICE,
        "EFA_USER_CMDS_SUPP_UDATA_CREATE_AH" => efa::supp_udata::CREATE_AH,
        "EFA_CREATE_CQ_WITH_COMPLETION_CHANNEL" => efa::create_cq_flags::WITH_COMPLETION_CHANNEL,
        "EFA_CREATE_CQ_WITH_SGID" => efa::create_cq_flags::WITH_SGID,
        "EFA_CREATE_CQ_RESP_DB_OFF" => efa::create_cq_resp_comp::DB_OFF,
        "EFA_QP_DRIVER_TYPE_SRD" => efa::EFA_QP_DRIVER_TYPE_SRD,
        "EFA_QUERY_DEVICE_CAPS_RDMA_READ" => efa::device_caps::RDMA_READ,
        "EFA_QUERY_DEVICE_CAPS_RNR_RETRY" => efa::device_caps::RNR_RETRY,
        "EFA_QUERY_DEVICE_CAPS_CQ_NOTIFICATIONS" => efa::device_caps::CQ_NOTIFICATIONS,
        "EFA_QUERY_DEVICE_CAPS_CQ_WITH_SGID" => efa::device_caps::CQ_WITH_SGID,

        // mlx5/prm.rs (rdma-core's mlx5dv.h)
        "MLX5_SEND_WQE_BB" => prm::SEND_WQE_BB,
        "MLX5_INLINE_SEG" => prm::INLINE_SEG,
        "MLX5_EXTENDED_UD_AV" => prm::EXTENDED_UD_AV,
        "MLX5_INVALID_LKEY" => prm::INVALID_LKEY,
        "MLX5_WQE_CTRL_FENCE" => prm::WQE_CTRL_FENCE,
        "MLX5_WQE_CTRL_CQ_UPDATE" => prm::WQE_CTRL_CQ_UPDATE,
        "MLX5_WQE_CTRL_SOLICITED" => prm::WQE_CTRL_SOLICITED,
        "MLX5_OPCODE_SEND_INVAL" => prm::opcode::SEND_INVAL,
        "MLX5_OPCODE_RDMA_WRITE" => prm::opcode::RDMA_WRITE,
        "MLX5_OPCODE_RDMA_WRITE_IMM" => prm::opcode::RDMA_WRITE_IMM,
        "MLX5_OPCODE_SEND" => prm::opcode::SEND,
        "MLX5_OPCODE_SEND_IMM" => prm::opcode::SEND_IMM,
        "MLX5_OPCODE_RDMA_READ" => prm::opcode::RDMA_READ,
        "MLX5_OPCODE_ATOMIC_CS" => prm::opcode::ATOMIC_CS,
        "MLX5_OPCODE_ATOMIC_FA" => prm::opcode::ATOMIC_FA,
        "MLX5_OPCODE_UMR" => prm::opcode::UMR,
        "MLX5_CQE_REQ" => prm::cqe_opcode::REQ,
        "MLX5_CQE_RESP_WR_IMM" => prm::cqe_opcode::RESP_WR_IMM,
        "MLX5_CQE_RESP_SEND" => prm::cqe_opcode::RESP_SEND,
        "MLX5_CQE_RESP_SEND_IMM" => prm::cqe_opcode::RESP_SEND_IMM,
        "MLX5_CQE_RESP_SEND_INV" => prm::cqe_opcode::RESP_SEND_INV,
        "MLX5_CQE_RESIZE_CQ" => prm::cqe_opcode::RESIZE_CQ,
        "MLX5_CQE_REQ_ERR" => prm::cqe_opcode::REQ_ERR,
        "MLX5_CQE_RESP_ERR" => prm::cqe_opcode::RESP_ERR,
        "MLX5_CQE_INVALID" => prm::cqe_opcode::INVALID,
        "MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR" => prm::syndrome::LOCAL_LENGTH_ERR,
        "MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR" => prm::syndrome::LOCAL_QP_OP_ERR,
        "MLX5_CQE_SYNDROME_LOCAL_PROT_ERR" => prm::syndrome::LOCAL_PROT_ERR,
        "MLX5_CQE_SYNDROME_WR_FLUSH_ERR" => prm::syndrome::WR_FLUSH_ERR,
        "MLX5_CQE_SYNDROME_MW_BIND_ERR" => prm::syndrome::MW_BIND_ERR,
        "MLX5_CQE_SYNDROME_BAD_RESP_ERR" => prm::syndrome::BAD_RESP_ERR,
        "MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR" => prm::syndrome::LOCAL_ACCESS_ERR,
        "MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR" => prm::syndrome::REMOTE_INVAL_REQ_ERR,
        "MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR" => prm::syndrome::REMOTE_ACCESS_ERR,
        "MLX5_CQE_SYNDROME_REMOTE_OP_ERR" => prm::syndrome::REMOTE_OP_ERR,
        "MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR" => prm::syndrome::TRANSPORT_RETRY_EXC_ERR,
        "MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR" => prm::syndrome::RNR_RETRY_EXC_ERR,
        "MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR" => prm::syndrome::REMOTE_ABORTED_ERR,
        "MLX5_CQ_DB_REQ_NOT_SOL" => prm::CQ_DB_REQ_NOT_SOL,
        "MLX5_CQ_DOORBELL" => prm::CQ_DOORBELL,
    }
}

/// The C probe prints `<kind> <name> <value>` lines: per struct `S` (expected
/// size) and `A` (alignment), `E` (start of the omitted flexible array, if
/// any), per field `F` (offset) and `Z` (size), per constant `K`; every
/// value as `unsigned long long`.
fn c_source(entries: &[Entry], consts: &[Const]) -> String {
    let mut s = String::from(
        "#include <stddef.h>\n\
         #include <stdio.h>\n\
         #include <rdma/ib_user_verbs.h>\n\
         #include <rdma/ib_user_ioctl_verbs.h>\n\
         #include <rdma/ib_user_ioctl_cmds.h>\n\
         #include <rdma/rdma_user_ioctl_cmds.h>\n\
         #include <rdma/rdma_user_rxe.h>\n\
         #include <rdma/rdma_user_cm.h>\n\
         #include <linux/in.h>\n\
         #include <rdma/mlx5-abi.h>\n\
         #include <rdma/efa-abi.h>\n\
         #include <infiniband/mlx5dv.h>\n\
         \n\
         #define P(kind, name, v) printf(\"%s %s %llu\\n\", kind, name, (unsigned long long)(v))\n\
         \n\
         int main(void)\n{\n",
    );
    for e in entries {
        let c = e.c;
        // An lvalue of the mirrored C object, for sizeof/_Alignof/typeof.
        let obj = match e.opts.member {
            Some(m) => format!("((({c} *)0)->{m})"),
            None => format!("(*({c} *)0)"),
        };
        let off = |path: &str| match e.opts.member {
            Some(m) => format!("(offsetof({c}, {m}.{path}) - offsetof({c}, {m}))"),
            None => format!("offsetof({c}, {path})"),
        };
        let size = match (e.opts.size, e.opts.flex) {
            (Some(expr), _) => format!("({expr})"),
            (None, Some(flex)) => off(flex),
            (None, None) => format!("sizeof({obj})"),
        };
        let r = e.rust;
        s += &format!("    P(\"S\", \"{r}\", {size});\n");
        s += &format!("    P(\"A\", \"{r}\", _Alignof(__typeof__({obj})));\n");
        if let Some(flex) = e.opts.flex {
            s += &format!("    P(\"E\", \"{r}\", {});\n", off(flex));
        }
        for f in &e.fields {
            let Some(path) = f.c else { continue };
            let key = format!("{r}.{}", f.rust);
            s += &format!("    P(\"F\", \"{key}\", {});\n", off(path));
            s += &format!("    P(\"Z\", \"{key}\", sizeof({obj}.{path}));\n");
        }
    }
    for k in consts {
        s += &format!("    P(\"K\", \"{}\", {});\n", k.c, k.c);
    }
    s += "    return 0;\n}\n";
    s
}

/// Writes, compiles and runs the probe; returns `(kind, name) -> value`.
fn run_probe(src: &str) -> HashMap<(String, String), u64> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("uverbs-abi-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let c_file = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&c_file, src).unwrap_or_else(|e| panic!("writing {}: {e}", c_file.display()));

    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = Command::new(&cc)
        .args(["-std=gnu11", "-Wall", "-o"])
        .arg(&exe)
        .arg(&c_file)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run the C compiler `{cc}` ({e}); this test needs a C compiler \
                 (e.g. `apt-get install gcc`) and the kernel uapi headers (`linux-libc-dev`)"
            )
        });
    assert!(
        out.status.success(),
        "compiling {} with `{cc}` failed ({}); are the kernel RDMA uapi headers installed \
         (/usr/include/rdma, Debian package `linux-libc-dev`) and rdma-core's mlx5dv.h \
         (/usr/include/infiniband, Debian package `libibverbs-dev`)?\n{}",
        c_file.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );

    if !out.stderr.is_empty() {
        eprintln!(
            "C compiler diagnostics:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let run = Command::new(&exe)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    assert!(
        run.status.success(),
        "{} failed: {}\n{}",
        exe.display(),
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout = String::from_utf8(run.stdout).expect("probe output is not UTF-8");
    let _ = std::fs::remove_dir_all(&dir);

    // `<kind> <name> <value>`; constant names are C expressions and may
    // contain spaces, so the name is everything between the first and the
    // last space.
    let mut values = HashMap::new();
    for line in stdout.lines() {
        let (head, v) = line.rsplit_once(' ').expect("malformed probe line");
        let (kind, name) = head.split_once(' ').expect("malformed probe line");
        values.insert((kind.to_string(), name.to_string()), parse(v, line));
    }
    values
}

fn parse(v: &str, line: &str) -> u64 {
    v.parse()
        .unwrap_or_else(|e| panic!("bad number in probe line {line:?}: {e}"))
}

/// Collects every comparison's failure.
struct Checker {
    c: HashMap<(String, String), u64>,
    bad: Vec<String>,
    checked: usize,
}

impl Checker {
    /// The C value of `kind`/`name`, noting its absence as a failure.
    fn get(&mut self, kind: &str, name: &str) -> Option<u64> {
        self.checked += 1;
        let v = self.c.get(&(kind.to_string(), name.to_string())).copied();
        if v.is_none() {
            self.bad
                .push(format!("{name}: no `{kind}` line in the C probe output"));
        }
        v
    }

    /// Compares the C value of `kind`/`name` with `rust`.
    fn eq(&mut self, kind: &str, name: &str, what: impl std::fmt::Display, rust: u64) {
        if let Some(c) = self.get(kind, name) {
            if c != rust {
                self.bad.push(format!("{what}: C {c}, Rust {rust}"));
            }
        }
    }
}

#[test]
fn layouts_and_constants_match_kernel_headers() {
    let entries = entries();
    let consts = constants();
    let mut ck = Checker {
        c: run_probe(&c_source(&entries, &consts)),
        bad: Vec::new(),
        checked: 0,
    };

    for e in &entries {
        let r = e.rust;
        let what = match e.opts.member {
            Some(m) => format!("{r} ({}.{m})", e.c),
            None => format!("{r} ({})", e.c),
        };
        ck.eq("S", r, format_args!("{what}: size"), e.size as u64);
        if let Some(c) = ck.get("A", r) {
            let rust = e.align as u64;
            match e.opts.lower_align {
                None if rust != c => ck.bad.push(format!("{what}: align: C {c}, Rust {rust}")),
                Some(why) if rust > c => ck.bad.push(format!(
                    "{what}: align: C {c}, Rust {rust} (may be lower, as {why}, but not higher)"
                )),
                _ => {}
            }
        }
        if let Some(flex) = e.opts.flex {
            ck.eq(
                "E",
                r,
                format_args!("{what}: flexible `{flex}` must start at the Rust size"),
                e.size as u64,
            );
        }
        for f in &e.fields {
            let Some(path) = f.c else { continue };
            let key = format!("{r}.{}", f.rust);
            ck.eq(
                "F",
                &key,
                format_args!("{key} (C `{path}`): offset"),
                f.offset as u64,
            );
            ck.eq(
                "Z",
                &key,
                format_args!("{key} (C `{path}`): size"),
                f.size as u64,
            );
        }
        // The listed fields must tile the Rust struct (every field listed,
        // none overlapping): the structs are `IntoBytes`, so have no padding.
        let mut fields: Vec<&Field> = e.fields.iter().collect();
        fields.sort_by_key(|f| f.offset);
        let mut end = 0;
        for f in fields {
            if f.offset != end {
                ck.bad.push(format!(
                    "{r}: listed fields do not tile the struct: gap or overlap at byte {end} \
                     (next listed field `{}` at {}); is a field missing from the table?",
                    f.rust, f.offset
                ));
            }
            end = f.offset + f.size;
        }
        if end != e.size {
            ck.bad.push(format!(
                "{r}: listed fields end at byte {end} but the struct has {} bytes; \
                 is a field missing from the table?",
                e.size
            ));
        }
    }
    for k in &consts {
        ck.eq(
            "K",
            k.c,
            format_args!("{} (C `{}`): value", k.rust, k.c),
            k.value,
        );
    }

    println!(
        "checked {} structs, {} fields, {} constants: {} values from the C probe",
        entries.len(),
        entries.iter().map(|e| e.fields.len()).sum::<usize>(),
        consts.len(),
        ck.checked
    );
    assert!(
        ck.bad.is_empty(),
        "{} mismatch(es) between uverbs-abi and the kernel uapi headers:\n  {}",
        ck.bad.len(),
        ck.bad.join("\n  ")
    );
}

/// `cmd::NoResp` has no C counterpart: it must stay zero-sized, since
/// `write_cmd` treats a zero-sized response as "no response".
#[test]
fn no_resp_is_zero_sized() {
    assert_eq!(size_of::<cmd::NoResp>(), 0);
}
