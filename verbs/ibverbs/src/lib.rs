//! libibverbs' C ABI on top of `rverbs`: the library `cargo xtask ibverbs`
//! links into `libibverbs.so.1` (with the symbol versions of
//! `libibverbs.map`) and ships as `libibverbs.a`, so that an unmodified C
//! or Python verbs program runs on our stack with no rdma-core installed.
//!
//! Every (symbol, version) pair that Debian 12's consumers of rdma-core 44
//! import is exported (135 with this library's own marker), so every such
//! program and library loads on it. What works so far (issue 27's first
//! parts): device discovery and queries (`ibv_get_device_list`,
//! `ibv_free_device_list`, `ibv_get_device_name`, `ibv_get_device_guid`,
//! `ibv_open_device`, `ibv_close_device`, `ibv_query_device`,
//! `ibv_query_port`, `ibv_query_gid`, `ibv_query_gid_type`,
//! `_ibv_query_gid_ex`, `_ibv_query_gid_table`, `ibv_query_pkey`,
//! `ibv_get_pkey_index`, `ibv_read_sysfs_file`, `ibv_get_sysfs_path`), fork
//! protection (`ibv_fork_init`, `ibv_is_fork_initialized`,
//! `ibv_dontfork_range`, `ibv_dofork_range`), the string helper
//! `ibv_wc_status_str` and librdmacm's copy helpers ([`copy`]). The
//! contexts it hands out are extended (`struct verbs_context` before the
//! `struct ibv_context` programs hold, `abi_compat` set as libibverbs sets
//! it), with `query_port` and `query_device_ex` filled in, so `verbs.h`'s
//! inline `ibv_query_port` and `ibv_query_device_ex` reach them; every
//! other extended operation is null, which the inline functions report as
//! `EOPNOTSUPP`. Everything else ([`unsupported`]: PDs, MRs, CQs, QPs,
//! SRQs, AHs, the data path, and rdma-core's private provider interface)
//! fails as libibverbs fails for a provider without the verb.
//!
//! All `unsafe` lives in the two modules that own C structs, [`ffi`] and
//! [`copy`]; the logic they call is safe Rust ([`sysfs`], `rverbs`). No panic crosses the C
//! boundary: every exported function catches one and fails with `EIO`.

pub mod copy;
pub mod ffi;
pub mod sysfs;
pub mod unsupported;
