//! The one module of this crate allowed `unsafe` code (the crate root
//! denies it everywhere else), as `hw` is in `provider-mlx5` and `cmd` and
//! `queue` are in `provider-rxe`; rustix's `backend` is the model.
//!
//! What is here is what Rust cannot check: the uverbs
//! commands that carry a user address or hand back a file descriptor
//! ([`cmd`]), the memory of a registered region and the commands that
//! register it ([`mr`]), values whose drop waits for the kernel ([`mem`]),
//! and tokio's fd registration ([`tokio`](self::tokio)). Each is offered as
//! a safe function or type whose argument types carry what the unsafe
//! operation needs; the few `unsafe fn`s say what their caller must
//! uphold. The rest of the crate is safe Rust over them, plus the public
//! API's own `unsafe` items (`Pd::register_raw`, `Mr::as_slice`,
//! `Mr::as_mut_slice`, the `MrBuf` trait and its implementations, `Mr`'s
//! `Send`/`Sync`), the registration that builds an `Mr` from [`mr`]'s
//! commands (`mr/register.rs`) and the `OwnsFd` implementations of the fd
//! owners tokio registers, each allowed where it stands, its body calling
//! in here. Nothing here imports anything of the crate above it but its
//! error type.

pub(crate) mod cmd;
pub(crate) mod mem;
pub(crate) mod mr;
#[cfg(feature = "tokio")]
pub(crate) mod tokio;

use std::ffi::CStr;

/// Whether the real and effective user ids agree (not a set-uid run).
pub(crate) fn same_user() -> bool {
    // SAFETY: getuid takes no arguments, touches no memory and cannot fail.
    let uid = unsafe { libc::getuid() };
    // SAFETY: as getuid.
    uid == unsafe { libc::geteuid() }
}

/// The index of the network interface `name` (`if_nametoindex(3)`), 0 if
/// there is none.
pub(crate) fn if_nametoindex(name: &CStr) -> u32 {
    // SAFETY: `name` is a NUL-terminated string that lives through the
    // call; if_nametoindex only reads it.
    unsafe { libc::if_nametoindex(name.as_ptr()) }
}
