//! The stand-in for a dmabuf, the memory `UVERBS_METHOD_REG_DMABUF_MR`
//! registers (GPU memory, on a real system, exported by its driver as a
//! dma-buf file).
//!
//! There is no exporter here, so a file that behaves like the kernel's
//! `udmabuf` (which turns memfd pages into a dma-buf) stands in for one: a
//! **memfd sealed against shrinking** (`MFD_ALLOW_SEALING`, then
//! `F_ADD_SEALS` with `F_SEAL_SHRINK`; `F_SEAL_WRITE` is refused, as
//! udmabuf refuses it). Its size is the dmabuf's size. Any other open file
//! is "not a dmabuf" (`EINVAL`, what `dma_buf_get` answers), a number that
//! is not open is `EBADF`.
//!
//! The emulated HCA reaches the memory through a shared mapping of the
//! file that the registration makes ([`map`]) and the MR owns
//! ([`Mapping`], unmapped when the MR goes), so the application sees what
//! the device wrote through its own mapping of the same file, as it would
//! see a GPU buffer's contents through the GPU's API. The seal is what
//! makes that mapping safe to use from the HCA thread: the file cannot
//! shrink under it (a truncated file would turn the HCA's access into a
//! `SIGBUS`).

use libc::c_int;
use rverbs_abi::Errno;

use crate::real;

/// Page size of the mappings (x86-64).
const PAGE: u64 = 4096;

/// The size in bytes of the dmabuf `fd` stands for: `EBADF` if `fd` is not
/// an open file, `EINVAL` if it is not a stand-in (see the module docs).
pub fn size(fd: c_int) -> Result<u64, Errno> {
    if fd < 0 {
        return Err(Errno::EBADF);
    }
    // SAFETY: F_GET_SEALS takes no pointer; any fd number is memory-safe.
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    if seals < 0 {
        // Not a shmem file (EINVAL), or not open (EBADF).
        return Err(match Errno::last() {
            Errno::EBADF => Errno::EBADF,
            _ => Errno::EINVAL,
        });
    }
    if seals & libc::F_SEAL_SHRINK == 0 || seals & libc::F_SEAL_WRITE != 0 {
        return Err(Errno::EINVAL);
    }
    // SAFETY: `struct stat` is plain old data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable `struct stat`.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(Errno::last());
    }
    u64::try_from(st.st_size).map_err(|_| Errno::EINVAL)
}

/// The emulator's shared mapping of (part of) a stand-in dmabuf; unmapped
/// on drop.
#[derive(Debug)]
pub struct Mapping {
    addr: usize,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: this mapping was made by `map` and is unmapped only here;
        // the HCA touches it only under the emulator lock, through the MR
        // that owns this value, which is being dropped under that lock.
        // The real munmap: the interposed one would take the lock again.
        unsafe { real::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// Maps `[offset, offset + length)` of stand-in `fd` (whole pages around
/// it), shared and writable; returns the mapping and the address of byte
/// `offset`. The caller checked the range lies inside the file.
pub fn map(fd: c_int, offset: u64, length: u64) -> Result<(Mapping, u64), Errno> {
    let first = offset - offset % PAGE;
    let end = offset
        .checked_add(length)
        .and_then(|e| e.checked_next_multiple_of(PAGE))
        .ok_or(Errno::EINVAL)?;
    let len = usize::try_from(end - first).map_err(|_| Errno::ENOMEM)?;
    let file_off = libc::off_t::try_from(first).map_err(|_| Errno::EINVAL)?;
    // SAFETY: a new mapping at an address of the kernel's choosing, so no
    // existing memory is replaced; the file is sealed against shrinking,
    // so every page the HCA uses stays backed.
    let p = unsafe {
        real::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            file_off,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    let m = Mapping {
        addr: p as usize,
        len,
    };
    let start = p as u64 + (offset - first);
    Ok((m, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memfd(seal: c_int, len: i64) -> c_int {
        // SAFETY: a valid name; flags only.
        let fd = unsafe { libc::memfd_create(c"dmabuf-test".as_ptr(), libc::MFD_ALLOW_SEALING) };
        assert!(fd >= 0);
        // SAFETY: fd is ours; plain integer arguments.
        unsafe {
            assert_eq!(libc::ftruncate(fd, len), 0);
            if seal != 0 {
                assert_eq!(libc::fcntl(fd, libc::F_ADD_SEALS, seal), 0);
            }
        }
        fd
    }

    #[test]
    fn stand_ins_and_others() {
        let good = memfd(libc::F_SEAL_SHRINK, 8192);
        assert_eq!(size(good), Ok(8192));
        let unsealed = memfd(0, 4096);
        assert_eq!(size(unsealed), Err(Errno::EINVAL));
        let frozen = memfd(libc::F_SEAL_SHRINK | libc::F_SEAL_WRITE, 4096);
        assert_eq!(size(frozen), Err(Errno::EINVAL));
        assert_eq!(size(-1), Err(Errno::EBADF));
        let mut p = [0 as c_int; 2];
        // SAFETY: room for two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        assert_eq!(size(p[0]), Err(Errno::EINVAL), "a pipe is no dmabuf");

        let (m, start) = map(good, 4096 + 16, 100).expect("maps");
        // SAFETY: inside the mapping just made, which covers the range.
        unsafe { (start as *mut u8).write(7) };
        let mut b = [0u8; 1];
        // SAFETY: reads one byte of our own memfd into `b`.
        let n = unsafe { libc::pread(good, b.as_mut_ptr().cast(), 1, 4096 + 16) };
        assert_eq!((n, b[0]), (1, 7), "the file sees the write");
        drop(m);
        for fd in [good, unsealed, frozen, p[0], p[1]] {
            real::close(fd);
        }
    }
}
