//! `uverbs-trace`: a test-only `LD_PRELOAD` library that records the uverbs
//! commands a process sends to the kernel, for `cargo xtask conform` (issue
//! 45, item 7). It changes nothing: every call goes on to the real function
//! (`dlsym(RTLD_NEXT)`), and what the kernel (or the emulator preloaded
//! after this library) answers goes back to the caller unchanged, errno
//! included.
//!
//! With `UVERBS_TRACE_LOG=<path>` set, each `write()` and each
//! `ioctl(RDMA_VERBS_IOCTL)` on a file descriptor the process opened on
//! `/dev/infiniband/uverbs*` appends one line to `<path>`, in the format
//! of the mlx5 emulator's `MLX5_EMU_CMD_LOG` (tests/mlx5-emu/src/record.rs),
//! so that `tools/xtask/src/cmd_compare.rs` reads both:
//! - `write <result> <bytes>`: the command's bytes as written;
//! - `ioctl <result> <object> <method> <id>:<flags>:<data>...`; an
//!   `INVOKE_WRITE` method is recorded as the `write` it carries.
//!
//! `result` is `ok` or the errno's name. Without `UVERBS_TRACE_LOG` the
//! library only passes calls through.
//!
//! Command files are known by the `open`/`open64` (and fortified) call that
//! made them, as libibverbs and our library open them; a descriptor made
//! by `openat`, `dup` or passed from another process is not traced.
//!
//! The caller's memory (the ioctl header, its attributes and the buffers
//! they point to) is copied with `process_vm_readv` on the process itself,
//! so a bad pointer is recorded as unreadable instead of crashing the
//! program; the kernel answers such a call `EFAULT` anyway. x86-64 only, for
//! the reason tests/mlx5-emu/src/interpose.rs gives (variadic `open` and
//! `ioctl` defined with a fixed last parameter).

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod hooks;
mod record;
