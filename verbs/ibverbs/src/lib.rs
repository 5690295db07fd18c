//! libibverbs' C ABI on top of `rverbs`: the library `cargo xtask ibverbs`
//! links into `libibverbs.so.1` (with the symbol versions of
//! `libibverbs.map`) and ships as `libibverbs.a`, so that an unmodified C
//! or Python verbs program runs on our stack with no rdma-core installed.
//!
//! Every (symbol, version) pair of rdma-core 56's `libibverbs.so.1` is
//! exported (182, the `IBVERBS_1.0` compatibility versions included; 183
//! with this library's own marker; `cargo xtask ibverbs` checks them
//! against `abi/rdma-core-56.syms`), so every program and library built
//! against rdma-core loads on it. What works: device discovery and
//! queries ([`ffi`]), PDs and MRs ([`ffi::pd`]), completion channels and
//! CQs, extended CQs included ([`ffi::cq`]), QPs, SRQs, AHs and the data
//! path ([`ffi::qp`]), the extended QP's work-request builder
//! ([`ffi::qp_ex`]), fork protection, the string helpers, the rate
//! conversions ([`ffi::enums`]), librdmacm's copy helpers ([`copy`]), and
//! the `IBVERBS_1.0` versions of the core verbs for programs linked
//! against libibverbs 1.0 ([`ffi::compat_1_0`],
//! [`ffi::compat_1_0_queues`]), and EFA's direct verbs ([`ffi::efadv`],
//! behind our `libefa.so.1`, package `rverbs-efadv`). The contexts it hands out are extended
//! (`struct verbs_context` before the `struct ibv_context` programs hold,
//! `abi_compat` set as libibverbs sets it), with the operations `verbs.h`'s
//! inline functions call filled in (`query_port`, `query_device_ex`,
//! `create_cq_ex`, `create_qp_ex`, and in `ibv_context_ops` `poll_cq`,
//! `req_notify_cq`, `post_send`, `post_recv`, `post_srq_recv`); every other
//! one is null, which the inline functions report as `EOPNOTSUPP`.
//! Everything else ([`unsupported`]: memory windows, asynchronous events,
//! XRC, flows, device memory, imports, and rdma-core's private provider
//! interface) fails as libibverbs fails for a provider without the verb.
//!
//! All `unsafe` lives in the modules that own C structs, [`ffi`] (and its
//! submodules) and [`copy`]; the logic they call is safe Rust ([`sysfs`], `rverbs`). No panic crosses the C
//! boundary: every exported function catches one and fails with `EIO`,
//! but for the data path's (post and poll), where a panic, which no input
//! should cause, aborts the process (they are `extern "C"`): catching cost
//! them more instructions than rdma-core spends on the whole call.

pub mod copy;
pub mod ffi;
pub mod sysfs;
pub mod unsupported;
