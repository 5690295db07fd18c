//! The modules of the `rverbs` tool as a library, so that the decoders of
//! bytes it does not write itself (the pingpong and perf wire exchanges,
//! the netlink resource dumps and another process's rings of `inspect`)
//! can be reached from the fuzz targets in `tests/fuzz` and from
//! integration tests. The `rverbs` binary (`src/main.rs`) is a thin
//! command-line front end over these modules; the `xtask` harness does not
//! use them.

pub mod common;
pub mod connected;
pub mod devinfo;
pub mod inspect;
pub mod mckey;
pub mod perf;
pub mod rcopy;
pub mod rping;
pub mod rstream;
pub mod srq;
pub mod ucmatose;
pub mod ud;
pub mod udaddy;
pub mod wire;

#[cfg(test)]
mod option_tests;
