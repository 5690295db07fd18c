//! The AWS Elastic Fabric Adapter (EFA) provider of rverbs.
//!
//! EFA is the RDMA device of AWS instances: datagram queue pairs only (its
//! own SRD, "scalable reliable datagram", created as a driver QP type, and
//! UD), SEND with immediate data, and on the devices that say so RDMA READ
//! and WRITE; no RC or UC, no atomics, no SRQ, no memory windows. Its send
//! queue lives in device memory (the low-latency queue, written in 64-byte
//! descriptors), its receive queue and CQs in host rings the kernel
//! allocates and hands out by mmap key, and every CQ is a set of sub-CQs
//! with a phase bit per entry.
//!
//! The pure core of that data path is built and tested on its own: [`sq`]
//! builds a send descriptor from a work request once every rule has
//! passed, [`rq`] the receive descriptors, and [`cqe`] reads completion
//! entries (fuzzed: a device's or a hostile mapping's bytes never make it
//! panic). Around it, the provider contract ([`contract::Efa`]): the
//! context, PD, CQ, QP and AH through the kernel with EFA's driver data
//! (`rverbs_abi::efa::cmd`), the rings mapped through
//! `rverbs_provider::map`, and the queues the library posts to and polls.
//! This crate has no `unsafe` code.
//!
//! Proven on the emulated EFA device of `tests/efa-emu` (the same device
//! rdma-core's libefa runs on); not on EFA hardware.

#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![deny(unreachable_pub)]

pub mod contract;
pub mod cq;
pub mod cqe;
mod ctx;
mod qp;
pub mod rq;
pub mod sq;
mod wq;

pub use contract::{DeviceAttr, Efa};

/// `IB_QPT_DRIVER`: the QP type SRD queue pairs are created with (EFA's
/// only driver QP type).
pub const QPT_DRIVER: u8 = 0xff;

/// Amazon's PCI vendor id.
pub const PCI_VENDOR_AMAZON: u16 = 0x1d0f;

/// Whether PCI device `device` of vendor [`PCI_VENDOR_AMAZON`] is an EFA
/// function (the ids libefa's match table has, and the next).
pub fn is_efa_pci_device(device: u16) -> bool {
    matches!(device, 0xefa0..=0xefa3)
}
