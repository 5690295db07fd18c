//! Memory the device reads and writes: page-aligned, zeroed queue buffers
//! and 64-byte doorbell records, allocated by us and handed to the kernel
//! (which pins them) by address.
