//! libibverbs' C ABI on top of `rverbs`: the library `cargo xtask ibverbs`
//! links into `libibverbs.so.1` (with the symbol versions of
//! `libibverbs.map`) and ships as `libibverbs.a`, so that an unmodified C
//! or Python verbs program runs on our stack with no rdma-core installed.
//!
//! What is there so far (issue 27's first part): device discovery and
//! queries, what `ibv_devices` and `ibv_devinfo` use:
//! `ibv_get_device_list`, `ibv_free_device_list`, `ibv_get_device_name`,
//! `ibv_get_device_guid`, `ibv_open_device`, `ibv_close_device`,
//! `ibv_query_device`, `ibv_query_port`, `ibv_query_gid`,
//! `ibv_query_gid_type`, `ibv_query_pkey`, `ibv_get_pkey_index`,
//! `ibv_read_sysfs_file` and `ibv_wc_status_str`. The contexts it hands
//! out are extended (`struct verbs_context` before the `struct
//! ibv_context` programs hold, `abi_compat` set as libibverbs sets it),
//! with `query_port` and `query_device_ex` filled in, so `verbs.h`'s inline
//! `ibv_query_port` and `ibv_query_device_ex` reach them; every other
//! extended operation is null, which the inline functions report as
//! `EOPNOTSUPP`. PDs, CQs, QPs and the data path are not there yet.
//!
//! All `unsafe` lives in [`ffi`], which owns the C structs; the logic it
//! calls is safe Rust in [`sysfs`] and `rverbs`. No panic crosses the C
//! boundary: every exported function catches one and fails with `EIO`.

pub mod ffi;
pub mod sysfs;
