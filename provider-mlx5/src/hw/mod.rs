//! Raw memory and MMIO: the one place of this crate that uses `unsafe`.
//!
//! Everything the device reads or writes is reached through the types
//! here, each named for its step the way rdma-core's `util/udma_barrier.h`
//! and libmlx5's queue helpers name theirs:
//!
//! - [`map`]: the mappings (`mmap`, unmapped on drop): queue buffers,
//!   doorbell pages, UAR pages;
//! - [`barrier`]: the barriers between the CPU and the device, each
//!   defined once;
//! - [`membarrier`]: asymmetric fences between this process's threads;
//! - [`dbrec`]: doorbell records and their named stores;
//! - [`uar`]: the UAR doorbell and BlueFlame writes;
//! - [`wqe`]: the send ring's WQE cursors, the receive ring and the SRQ's
//!   WQEs, writing typed PRM segments;
//! - [`cqe`]: CQE rings and reading the CQEs the device wrote;
//! - [`cmd`]: the commands that hand this memory to the kernel;
//! - [`slots`]: `wr_id` tables indexed by a masked ring counter;
//! - [`qdir`]: the queue directory an outside tool finds the queues by.
//!
//! Ring memory is never borrowed as a Rust reference: the device writes
//! it outside the program. It is read and written through raw pointers
//! (and atomics where the device and the CPU race), always inside a
//! mapping the accessing handle keeps alive through an `Arc`, at an index
//! masked to its ring.

pub(crate) mod barrier;
pub(crate) mod cmd;
pub(crate) mod cqe;
pub(crate) mod dbrec;
pub(crate) mod map;
pub(crate) mod membarrier;
pub(crate) mod qdir;
pub(crate) mod slots;
pub(crate) mod uar;
pub(crate) mod wqe;
