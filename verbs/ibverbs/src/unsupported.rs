//! The exported functions this library does not implement yet, so that
//! every program built against rdma-core loads (its consumers bind every
//! symbol at load time) and a call fails as libibverbs fails for a
//! provider without the verb: a constructor returns NULL with errno
//! `EOPNOTSUPP`; a verb that returns an errno returns `EOPNOTSUPP`. None
//! of them reads its arguments, so none needs `unsafe`.
//!
//! rdma-core's private `IBVERBS_PRIVATE_34` symbols are here only so that
//! its provider libraries (libmlx5, libefa, which pyverbs' provider
//! modules link) load: they fail the same way, and
//! `verbs_register_driver_34` registers nothing, so no rdma-core provider
//! ever runs under this library. (The private functions that have an
//! answer without a provider are in [`crate::ffi::provider`].)

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::atomic::AtomicBool;

use crate::ffi::set_errno;

/// NULL with errno `EOPNOTSUPP`.
fn null() -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    ptr::null_mut()
}

/// Exported functions that fail with NULL and errno `EOPNOTSUPP`.
macro_rules! returns_null {
    ($($name:ident($($arg:ident: $t:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: not implemented yet; NULL with errno `EOPNOTSUPP`.")]
        #[no_mangle]
        pub extern "C" fn $name($($arg: $t),*) -> *mut c_void {
            $(let _ = $arg;)*
            null()
        }
    )*};
}

/// Exported functions that return `EOPNOTSUPP` (libibverbs' verbs that
/// return an errno value).
macro_rules! returns_errno {
    ($($name:ident($($arg:ident: $t:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: not implemented yet; returns `EOPNOTSUPP`.")]
        #[no_mangle]
        pub extern "C" fn $name($($arg: $t),*) -> c_int {
            $(let _ = $arg;)*
            libc::EOPNOTSUPP
        }
    )*};
}

/// Exported functions with nothing to return and nothing to do here.
macro_rules! does_nothing {
    ($($name:ident($($arg:ident: $t:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: nothing to do (no object it takes exists here).")]
        #[no_mangle]
        pub extern "C" fn $name($($arg: $t),*) {
            $(let _ = $arg;)*
        }
    )*};
}

type P = *mut c_void;

returns_null! {
    ibv_import_device(cmd_fd: c_int);
    ibv_import_pd(context: P, pd_handle: u32);
    ibv_import_mr(pd: P, mr_handle: u32);
    ibv_import_dm(context: P, dm_handle: u32);
    verbs_open_device(device: P, private_data: P);
    _verbs_init_and_alloc_context(device: P, cmd_fd: c_int, alloc_size: usize, context_offset: P, driver_id: u32);
}

returns_errno! {
    ibv_resolve_eth_l2_from_gid(context: P, attr: P, eth_mac: P, vid: P);
    execute_ioctl(context: P, cmd: P);
    ibv_cmd_advise_mr(pd: P, advice: c_int, flags: u32, sg_list: P, num_sge: u32);
    ibv_cmd_alloc_dm(ctx: P, attr: P, dm: P, link: P);
    ibv_cmd_alloc_mw(pd: P, kind: c_int, mw: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_alloc_pd(context: P, pd: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_attach_mcast(qp: P, gid: P, lid: u16);
    ibv_cmd_close_xrcd(xrcd: P);
    ibv_cmd_create_ah(pd: P, ah: P, attr: P, resp: P, resp_size: usize);
    ibv_cmd_create_counters(context: P, attr: P, counters: P, link: P);
    ibv_cmd_create_cq(context: P, cqe: c_int, channel: P, comp_vector: c_int, cq: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_create_cq_ex(context: P, attr: P, cq: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize, flags: u32);
    ibv_cmd_create_cq_ex2(context: P, attr: P, cq: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize, flags: u32, driver: P);
    ibv_cmd_create_flow(qp: P, flow: P, attr: P, ucmd: P, ucmd_size: usize);
    ibv_cmd_create_flow_action_esp(ctx: P, attr: P, action: P, driver: P);
    ibv_cmd_create_qp(pd: P, qp: P, attr: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_create_qp_ex(context: P, qp: P, attr: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_create_qp_ex2(context: P, qp: P, attr: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_create_rwq_ind_table(context: P, attr: P, table: P, resp: P, resp_size: usize);
    ibv_cmd_create_srq(pd: P, srq: P, attr: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_create_srq_ex(context: P, srq: P, attr: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_create_wq(context: P, attr: P, wq: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_dealloc_mw(mw: P);
    ibv_cmd_dealloc_pd(pd: P);
    ibv_cmd_dereg_mr(mr: P);
    ibv_cmd_destroy_ah(ah: P);
    ibv_cmd_destroy_counters(counters: P);
    ibv_cmd_destroy_cq(cq: P);
    ibv_cmd_destroy_flow(flow: P);
    ibv_cmd_destroy_flow_action(action: P);
    ibv_cmd_destroy_qp(qp: P);
    ibv_cmd_destroy_rwq_ind_table(table: P);
    ibv_cmd_destroy_srq(srq: P);
    ibv_cmd_destroy_wq(wq: P);
    ibv_cmd_detach_mcast(qp: P, gid: P, lid: u16);
    ibv_cmd_free_dm(dm: P);
    ibv_cmd_get_context(context: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_modify_cq(cq: P, attr: P, cmd: P, cmd_size: usize);
    ibv_cmd_modify_flow_action_esp(action: P, attr: P, driver: P);
    ibv_cmd_modify_qp(qp: P, attr: P, attr_mask: c_int, cmd: P, cmd_size: usize);
    ibv_cmd_modify_qp_ex(qp: P, attr: P, attr_mask: c_int, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_modify_srq(srq: P, attr: P, attr_mask: c_int, cmd: P, cmd_size: usize);
    ibv_cmd_modify_wq(wq: P, attr: P, cmd: P, cmd_size: usize);
    ibv_cmd_open_qp(context: P, qp: P, vqp_sz: c_int, attr: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_open_xrcd(context: P, xrcd: P, size: c_int, attr: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_poll_cq(cq: P, ne: c_int, wc: P);
    ibv_cmd_post_recv(qp: P, wr: P, bad_wr: P);
    ibv_cmd_post_send(qp: P, wr: P, bad_wr: P);
    ibv_cmd_post_srq_recv(srq: P, wr: P, bad_wr: P);
    ibv_cmd_query_context(ctx: P, driver: P);
    ibv_cmd_query_device_any(context: P, input: P, attr: P, attr_size: usize, resp: P, resp_size: P);
    ibv_cmd_query_mr(pd: P, mr: P, mr_handle: u32);
    ibv_cmd_query_port(context: P, port_num: u8, attr: P, cmd: P, cmd_size: usize);
    ibv_cmd_query_qp(qp: P, attr: P, attr_mask: c_int, init_attr: P, cmd: P, cmd_size: usize);
    ibv_cmd_query_srq(srq: P, attr: P, cmd: P, cmd_size: usize);
    ibv_cmd_read_counters(counters: P, values: P, n: u32, flags: u32, link: P);
    ibv_cmd_reg_dm_mr(pd: P, dm: P, offset: u64, length: usize, access: u32, mr: P, link: P);
    ibv_cmd_reg_dmabuf_mr(pd: P, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int, mr: P);
    ibv_cmd_reg_mr(pd: P, addr: P, length: usize, hca_va: u64, access: c_int, mr: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_req_notify_cq(cq: P, solicited_only: c_int);
    ibv_cmd_rereg_mr(mr: P, flags: u32, addr: P, length: usize, hca_va: u64, access: c_int, pd: P, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
    ibv_cmd_resize_cq(cq: P, cqe: c_int, cmd: P, cmd_size: usize, resp: P, resp_size: usize);
}

does_nothing! {
    ibv_unimport_pd(pd: P);
    ibv_unimport_mr(mr: P);
    ibv_unimport_dm(dm: P);
    verbs_register_driver_34(ops: P);
    verbs_set_ops(vctx: P, ops: P);
    verbs_uninit_context(context: P);
    verbs_init_cq(cq: P, context: P, channel: P, cq_context: P);
}

/// `ibv_query_qp_data_in_order`: 0, "not known to be in order" (what
/// libibverbs answers for a provider without the query).
#[no_mangle]
pub extern "C" fn ibv_query_qp_data_in_order(qp: P, op: c_int, flags: u32) -> c_int {
    let _ = (qp, op, flags);
    0
}

/// `__verbs_log`, rdma-core's provider logging (variadic in C; the
/// arguments after `level` are not read, which the x86-64 and AArch64
/// calling conventions allow): logs nothing.
#[no_mangle]
pub extern "C" fn __verbs_log(ctx: P, level: u32) {
    let _ = (ctx, level);
}

/// `verbs_allow_disassociate_destroy`, a flag rdma-core's providers read
/// (a C `bool`; `AtomicBool` has its layout and may be written from C).
#[no_mangle]
pub static verbs_allow_disassociate_destroy: AtomicBool = AtomicBool::new(false);
