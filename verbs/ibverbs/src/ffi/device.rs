//! Devices and contexts: `ibv_get_device_list`, `ibv_free_device_list`,
//! `ibv_get_device_name`, `ibv_get_device_guid`, `ibv_get_device_index`,
//! `ibv_get_sysfs_path`, `ibv_read_sysfs_file`, `ibv_open_device` and
//! `ibv_close_device`.

use super::*;

/// `ibv_get_device_list`: a NULL-terminated array (free it with
/// `ibv_free_device_list`) of the rxe and mlx5 devices; NULL with errno
/// if the devices cannot be listed.
///
/// # Safety
/// `num_devices` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut IbvDevice {
    guard(ptr::null_mut(), || {
        let found = match rverbs::devices() {
            Ok(d) => d,
            Err(e) => {
                set_errno(errno_of(&e));
                return ptr::null_mut();
            }
        };
        let mut devices = lock(&DEVICES);
        let mut list: Vec<*mut IbvDevice> = Vec::with_capacity(found.len() + 1);
        for dev in found {
            let same = |r: &DeviceRec| {
                r.dev.name() == dev.name()
                    && r.dev.uverbs() == dev.uverbs()
                    && r.dev.node_guid() == dev.node_guid()
            };
            let i = match devices.iter().position(|r| same(r)) {
                Some(i) => i,
                None => {
                    devices.push(Box::new(DeviceRec {
                        c: device_struct(&dev),
                        dev,
                    }));
                    devices.len() - 1
                }
            };
            list.push(&mut devices[i].c);
        }
        list.push(ptr::null_mut());
        let bytes = list.len() * size_of::<*mut IbvDevice>();
        // SAFETY: malloc of a non-zero size; checked for null below.
        let arr = unsafe { libc::malloc(bytes) } as *mut *mut IbvDevice;
        if arr.is_null() {
            set_errno(libc::ENOMEM);
            return ptr::null_mut();
        }
        // SAFETY: `arr` holds `list.len()` pointers (just allocated), and
        // does not overlap `list`.
        unsafe { ptr::copy_nonoverlapping(list.as_ptr(), arr, list.len()) };
        if !num_devices.is_null() {
            // SAFETY: the caller passes null or a writable int.
            unsafe { *num_devices = c_int::try_from(list.len() - 1).unwrap_or(c_int::MAX) };
        }
        arr
    })
}

/// `ibv_free_device_list`: frees the array (the devices stay valid).
///
/// # Safety
/// `list` is null or was returned by `ibv_get_device_list` and not freed.
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut IbvDevice) {
    // SAFETY: the caller passes an array from ibv_get_device_list, which
    // malloc allocated, or null (free(NULL) does nothing).
    unsafe { libc::free(list as *mut c_void) }
}

/// `ibv_get_device_name`: the device's name, or NULL (errno `EINVAL`) for a
/// pointer this library did not hand out.
///
/// # Safety
/// None beyond passing any pointer: it is checked before use.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut IbvDevice) -> *const c_char {
    guard(ptr::null(), || {
        let devices = lock(&DEVICES);
        match device_rec(&devices, device) {
            // The record is never freed, so the name outlives the guard.
            Some(r) => r.c.name.as_ptr(),
            None => {
                set_errno(libc::EINVAL);
                ptr::null()
            }
        }
    })
}

/// `ibv_get_device_guid`: the node GUID in network byte order (as
/// `__be64`), 0 for a pointer this library did not hand out.
///
/// # Safety
/// None beyond passing any pointer: it is checked before use.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut IbvDevice) -> u64 {
    guard(0, || {
        let devices = lock(&DEVICES);
        match device_rec(&devices, device) {
            Some(r) => u64::from_ne_bytes(r.dev.node_guid().0),
            None => {
                set_errno(libc::EINVAL);
                0
            }
        }
    })
}

/// `ibv_open_device`: a context on the device, or NULL with errno.
///
/// # Safety
/// None beyond passing any pointer: it is checked before use.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut IbvDevice) -> *mut IbvContext {
    guard(ptr::null_mut(), || {
        let opened = {
            let devices = lock(&DEVICES);
            let Some(r) = device_rec(&devices, device) else {
                set_errno(libc::EINVAL);
                return ptr::null_mut();
            };
            r.dev.open()
        };
        let ctx = match opened {
            Ok(c) => c,
            Err(e) => {
                set_errno(errno_of(&e));
                return ptr::null_mut();
            }
        };
        use std::os::fd::AsRawFd;
        // rverbs makes the async fd non-blocking; libibverbs' blocks (a
        // program's event thread sleeps in ibv_get_async_event).
        if let Err(e) = set_blocking(ctx.async_fd().as_raw_fd()) {
            set_errno(e);
            return ptr::null_mut();
        }
        let rec = Box::new(ContextRec {
            v: VerbsContext {
                query_port: Some(query_port_ex),
                before_alloc_parent_domain: [None; 13],
                alloc_parent_domain: Some(pd::alloc_parent_domain),
                dealloc_td: Some(pd::dealloc_td),
                alloc_td: Some(pd::alloc_td),
                before_create_cq_ex: [None; 8],
                create_cq_ex: Some(cq::create_cq_ex),
                priv_: ptr::null_mut(),
                query_device_ex: Some(query_device_ex),
                before_create_qp_ex: [None; 5],
                create_qp_ex: Some(qp::create_qp_ex),
                after_create_qp_ex: [None; 5],
                sz: size_of::<VerbsContext>(),
                context: IbvContext {
                    device,
                    ops: IbvContextOps {
                        before_alloc_mw: [None; 7],
                        alloc_mw: Some(mw::alloc_mw),
                        bind_mw: Some(mw::bind_mw),
                        dealloc_mw: Some(mw::dealloc_mw),
                        before_poll_cq: None,
                        poll_cq: Some(cq::poll_cq),
                        req_notify_cq: Some(cq::req_notify_cq),
                        before_post_srq_recv: [None; 7],
                        post_srq_recv: Some(qp::post_srq_recv),
                        before_post_send: [None; 4],
                        post_send: Some(qp::post_send),
                        post_recv: Some(qp::post_recv),
                        after_post_recv: [None; 5],
                    },
                    cmd_fd: ctx.cmd_fd().as_raw_fd(),
                    async_fd: ctx.async_fd().as_raw_fd(),
                    num_comp_vectors: c_int::try_from(ctx.num_comp_vectors()).unwrap_or(c_int::MAX),
                    mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                    abi_compat: VERBS_ABI_IS_EXTENDED,
                },
            },
            ctx,
        });
        let rec = Box::into_raw(rec);
        // SAFETY: `rec` was just allocated; the field's address is taken
        // without a reference (addr_of_mut), and stays valid while the
        // box lives.
        let c = unsafe { ptr::addr_of_mut!((*rec).v.context) };
        lock(&CONTEXTS).push((c as usize, rec as usize));
        c
    })
}

/// `ibv_close_device`: 0, or -1 with errno `EINVAL` for a context that is
/// not open.
///
/// # Safety
/// No other call on the context runs during or after this one.
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(context: *mut IbvContext) -> c_int {
    guard(-1, || {
        let mut open = lock(&CONTEXTS);
        let Some(i) = open.iter().position(|&(c, _)| c == context as usize) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        let (_, rec) = open.swap_remove(i);
        drop(open);
        event::forget_context(context);
        // SAFETY: `rec` came from Box::into_raw in ibv_open_device and was
        // still open (now removed, so it is freed once); the caller makes
        // no other call on it (the function's contract).
        drop(unsafe { Box::from_raw(rec as *mut ContextRec) });
        0
    })
}

/// `ibv_read_sysfs_file`: reads `dir/file` into `buf` (`size` bytes), the
/// trailing newline replaced by a NUL; the length, or -1 with errno.
///
/// # Safety
/// `dir` and `file` are NUL-terminated strings; `buf` has `size` writable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard(-1, || {
        if dir.is_null() || file.is_null() || (buf.is_null() && size > 0) {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller passes NUL-terminated strings (non-null).
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        use std::os::unix::ffi::OsStrExt;
        let path = Path::new(std::ffi::OsStr::from_bytes(d.to_bytes()))
            .join(std::ffi::OsStr::from_bytes(f.to_bytes()));
        let out: &mut [u8] = if size == 0 {
            &mut []
        } else {
            // SAFETY: the caller passes `size` writable bytes at `buf`
            // (non-null), which nothing else accesses during the call.
            unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, size) }
        };
        match crate::sysfs::read_into(&path, out) {
            Ok(n) => c_int::try_from(n).unwrap_or(c_int::MAX),
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}

/// `ibv_get_device_index`: the kernel's index of the device; -1 (as
/// libibverbs answers when it does not know it): not known here yet.
#[no_mangle]
pub extern "C" fn ibv_get_device_index(device: *mut IbvDevice) -> c_int {
    let _ = device;
    -1
}

/// `ibv_get_sysfs_path`: the sysfs root (`$SYSFS_PATH` when set, as in
/// libibverbs, else `/sys`), a string that lives as long as the process.
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    static PATH: OnceLock<CString> = OnceLock::new();
    guard(c"/sys".as_ptr(), || {
        PATH.get_or_init(|| {
            std::env::var("SYSFS_PATH")
                .ok()
                .and_then(|p| CString::new(p.trim_end_matches('/')).ok())
                .filter(|p| !p.as_bytes().is_empty())
                .unwrap_or_else(|| c"/sys".to_owned())
        })
        .as_ptr()
    })
}
