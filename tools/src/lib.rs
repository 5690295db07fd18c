//! The modules of the `rverbs` tool as a library, so that the decoders of
//! bytes it does not write itself (the pingpong and perf wire exchanges,
//! the netlink resource dumps and another process's rings of `inspect`)
//! can be reached from the fuzz targets in `tests/fuzz` and from
//! integration tests. The `rverbs` binary (`src/bin/rverbs.rs`) is a thin
//! command-line front end over these modules; the `xtask` harness does not
//! use them.

#[path = "rverbs/common.rs"]
pub mod common;
#[path = "rverbs/connected.rs"]
pub mod connected;
#[path = "rverbs/devinfo.rs"]
pub mod devinfo;
#[path = "rverbs/inspect.rs"]
pub mod inspect;
#[path = "rverbs/perf/mod.rs"]
pub mod perf;
#[path = "rverbs/srq.rs"]
pub mod srq;
#[path = "rverbs/ud.rs"]
pub mod ud;
#[path = "rverbs/wire.rs"]
pub mod wire;
