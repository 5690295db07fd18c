//! The parts of libibverbs' provider interface that answer without a
//! provider: `__ioctl_final_num_attrs` (rdma-core 56's
//! `IBVERBS_PRIVATE_34`, which its providers' ioctl command builders call
//! to size a command buffer chain), `ibv_read_ibdev_sysfs_file` (the same
//! version, a provider's read of its device's sysfs files) and
//! `ibv_register_driver@IBVERBS_1.1` (the driver registration of
//! libibverbs before rdma-core 13, a compatibility version only: it
//! registers nothing, as libibverbs' does nothing). The rest of the
//! private interface is in [`crate::unsupported`]: no rdma-core provider
//! ever runs under this library.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::mem::offset_of;

use super::{guard, set_errno};

/// The head of rdma-core's `struct ibv_command_buffer` (a provider's
/// ioctl command under construction, one block of a linked chain), as its
/// `cmd_ioctl.h` lays it out: the link, the next attribute to fill, the
/// last one, four index bytes and a byte of flag bits, then the kernel's
/// `struct ib_uverbs_ioctl_hdr` (24 bytes, 8-aligned) whose `attrs[]`
/// (`struct ib_uverbs_attr`, 16 bytes each) follow it.
#[repr(C)]
pub struct IbvCommandBuffer {
    /// The next block of the chain, or NULL.
    pub next: *mut IbvCommandBuffer,
    /// The next attribute to fill, within this block's `attrs`.
    pub next_attr: *mut c_void,
    /// The block's last attribute.
    pub last_attr: *mut c_void,
    /// `uhw_in_idx` ... `uhw_out_headroom_dwords`, then the flag bits.
    pub indices_and_flags: [u8; 5],
    /// `struct ib_uverbs_ioctl_hdr`.
    pub hdr: [u64; 3],
}

/// `sizeof(struct ib_uverbs_attr)`.
const UVERBS_ATTR_SIZE: usize = 16;

const _: () = assert!(offset_of!(IbvCommandBuffer, hdr) == 32);
const _: () = assert!(size_of::<IbvCommandBuffer>() == 56);

/// `__ioctl_final_num_attrs`: `num_attrs` plus the attributes filled in
/// every block of the chain from `link` (each block's `next_attr` less its
/// `attrs`), counted in `unsigned int` as libibverbs counts.
///
/// # Safety
/// `link` is NULL or the first of a NULL-terminated chain of live command
/// buffers, each `next_attr` within its own block's `attrs` (rdma-core's
/// contract: its command-building macros make them so).
#[no_mangle]
pub unsafe extern "C" fn __ioctl_final_num_attrs(
    num_attrs: c_uint,
    link: *mut IbvCommandBuffer,
) -> c_uint {
    guard(num_attrs, || {
        let mut n = num_attrs;
        let mut at = link;
        while !at.is_null() {
            // SAFETY: a non-null `at` is a live command buffer of the
            // chain (the contract); its fields are read in place, not
            // referenced.
            let (next, next_attr) = unsafe { ((*at).next, (*at).next_attr) };
            let attrs = at as usize + size_of::<IbvCommandBuffer>();
            let filled =
                (next_attr as usize).wrapping_sub(attrs) as isize / UVERBS_ATTR_SIZE as isize;
            n = n.wrapping_add(filled as c_uint);
            at = next;
        }
        n
    })
}

/// `ibv_read_ibdev_sysfs_file` (variadic in C: the format's arguments
/// follow `fnfmt`; they are not read, which the x86-64 and AArch64 calling
/// conventions allow): reads a file of a provider's device
/// (`struct verbs_sysfs_dev`). -1 with errno `EINVAL`: for NULL, as
/// libibverbs answers, and for any other pointer, since this library
/// registers no provider and so hands out no such device (use
/// `ibv_read_sysfs_file` with the device's `ibdev_path`).
#[no_mangle]
pub extern "C" fn ibv_read_ibdev_sysfs_file(
    buf: *mut c_char,
    size: usize,
    sysfs_dev: *mut c_void,
    fnfmt: *const c_char,
) -> c_int {
    let _ = (buf, size, sysfs_dev, fnfmt);
    guard(-1, || {
        set_errno(libc::EINVAL);
        -1
    })
}

/// `ibv_register_driver@IBVERBS_1.1`, a compatibility version only (no
/// program linked against rdma-core binds it; old libfabric providers
/// do): does nothing, as libibverbs' does nothing since the driver
/// interface became private.
#[export_name = "ibv_register_driver@IBVERBS_1.1"]
pub extern "C" fn ibv_register_driver_1_1(name: *const c_char, init_func: *mut c_void) {
    // Nothing runs that could panic: no guard needed.
    let _ = (name, init_func);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    #[test]
    fn attributes_are_counted_across_the_chain() {
        // Blocks with room for 4 attributes each.
        #[repr(C)]
        struct Block {
            b: IbvCommandBuffer,
            attrs: [[u8; UVERBS_ATTR_SIZE]; 4],
        }
        let mk = || Block {
            b: IbvCommandBuffer {
                next: ptr::null_mut(),
                next_attr: ptr::null_mut(),
                last_attr: ptr::null_mut(),
                indices_and_flags: [0; 5],
                hdr: [0; 3],
            },
            attrs: [[0; UVERBS_ATTR_SIZE]; 4],
        };
        let mut second = Box::new(mk());
        second.b.next_attr = second.attrs[3].as_mut_ptr().cast();
        let mut first = Box::new(mk());
        first.b.next_attr = first.attrs[1].as_mut_ptr().cast();
        first.b.next = &mut second.b;
        // SAFETY: a NULL-terminated chain of live blocks.
        let n = unsafe { __ioctl_final_num_attrs(5, &mut first.b) };
        assert_eq!(n, 5 + 1 + 3);
        // SAFETY: NULL is an empty chain.
        assert_eq!(unsafe { __ioctl_final_num_attrs(7, ptr::null_mut()) }, 7);
    }

    #[test]
    fn no_provider_device_is_ever_read() {
        let mut buf = [0 as c_char; 8];
        let r = ibv_read_ibdev_sysfs_file(buf.as_mut_ptr(), 8, ptr::null_mut(), c"x".as_ptr());
        assert_eq!(r, -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINVAL)
        );
    }
}
