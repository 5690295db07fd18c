//! What every emulated character device does the same way: its `struct
//! stat`, and opening one as a memfd of ours (the command fd, which also
//! backs whatever the device lets user space map).

use libc::c_int;
use rverbs_abi::Errno;

use crate::{fdtable, real};

/// The `struct stat` of a uverbs device node `major:minor` (and of an open
/// device fd).
pub fn device_stat(major: u32, minor: u32) -> libc::stat {
    // SAFETY: `struct stat` is plain old data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_mode = libc::S_IFCHR | 0o666;
    st.st_rdev = libc::makedev(major, minor);
    st.st_nlink = 1;
    st.st_blksize = 4096;
    st
}

/// A new memfd standing for an opened device (close-on-exec if the `open`
/// flags ask for it), trackable in [`fdtable`]; returns it with its
/// `(st_dev, st_ino)`, by which a reused fd number is told apart.
pub fn open_memfd(flags: c_int) -> Result<(c_int, (u64, u64)), Errno> {
    let mfd_flags = if flags & libc::O_CLOEXEC != 0 {
        libc::MFD_CLOEXEC
    } else {
        0
    };
    // SAFETY: the name is a valid C string; memfd_create has no other
    // preconditions.
    let fd = unsafe { libc::memfd_create(c"uverbs0".as_ptr(), mfd_flags) };
    if fd < 0 {
        return Err(Errno::last());
    }
    if !fdtable::trackable(fd) {
        real::close(fd);
        return Err(Errno::EMFILE);
    }
    let Some(id) = real::file_id(fd) else {
        real::close(fd);
        return Err(Errno::EIO);
    };
    Ok((fd, id))
}
