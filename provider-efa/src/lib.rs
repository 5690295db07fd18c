//! The AWS Elastic Fabric Adapter (EFA) provider of rverbs, in progress.
//!
//! EFA is the RDMA device of AWS instances: datagram queue pairs only (its
//! own SRD, "scalable reliable datagram", created as a driver QP type, and
//! UD), SEND with immediate data, and on the devices that say so RDMA READ
//! and WRITE; no RC or UC, no atomics, no SRQ, no memory windows. Its send
//! queue lives in device memory (the low-latency queue, written in 64-byte
//! descriptors), its receive queue and CQs in host rings the kernel maps,
//! and every CQ is a set of sub-CQs with a phase bit per entry.
//!
//! What is here is the pure core of that data path, built and tested on
//! its own: [`sq`] builds a send descriptor from a work request once every
//! rule has passed, [`rq`] the receive descriptors, and [`cqe`] reads
//! completion entries (fuzzed: a device's or a hostile mapping's bytes
//! never make it panic). The provider contract (context, PD, CQ, QP and AH
//! through the kernel with EFA's driver data, `rverbs_abi::efa`), the
//! emulated EFA device it is proven on and the byte-for-byte comparison
//! with libefa are the next steps (the project's issue 46); until then no
//! EFA device is opened by rverbs.

#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![deny(unreachable_pub)]

pub mod cqe;
pub mod rq;
pub mod sq;
