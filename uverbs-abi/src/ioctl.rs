//! The `RDMA_VERBS_IOCTL` method channel: the ioctl header, attributes, and an
//! [`IoctlCmd`] builder that frames a method call on the stack.

use std::os::fd::{AsRawFd, BorrowedFd};

use crate::Errno;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `RDMA_IOCTL_MAGIC`.
pub const RDMA_IOCTL_MAGIC: u8 = 0x1b;

/// `RDMA_VERBS_IOCTL`: `_IOWR(0x1b, 1, struct ib_uverbs_ioctl_hdr)`.
pub const RDMA_VERBS_IOCTL: libc::c_ulong = ((3 as libc::c_ulong) << 30)
    | ((size_of::<IoctlHdr>() as libc::c_ulong) << 16)
    | ((RDMA_IOCTL_MAGIC as libc::c_ulong) << 8)
    | 1;

/// `UVERBS_ATTR_F_MANDATORY`: the kernel fails the call if it does not know
/// the attribute.
pub const UVERBS_ATTR_F_MANDATORY: u16 = 1 << 0;
/// `UVERBS_ATTR_F_VALID_OUTPUT`: set by the kernel on outputs it wrote.
pub const UVERBS_ATTR_F_VALID_OUTPUT: u16 = 1 << 1;

/// `struct ib_uverbs_attr`: one attribute of a method call.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Attr {
    /// Attribute id within the method.
    pub attr_id: u16,
    /// Length of the pointed-to (or inline) data.
    pub len: u16,
    /// `UVERBS_ATTR_F_*`.
    pub flags: u16,
    /// Enum attributes: the element id in the low byte.
    pub attr_data: u16,
    /// Inline data (len <= 8 for inputs), a user pointer, an object handle
    /// or a file descriptor.
    pub data: u64,
}

/// `struct ib_uverbs_ioctl_hdr`: precedes the attribute array.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct IoctlHdr {
    /// Total length in bytes, attributes included.
    pub length: u16,
    /// Object the method belongs to (`UVERBS_OBJECT_*`).
    pub object_id: u16,
    /// Method id (`UVERBS_METHOD_*`).
    pub method_id: u16,
    /// Number of attributes that follow.
    pub num_attrs: u16,
    /// Must be zero.
    pub reserved1: u64,
    /// `enum rdma_driver_id` of the device (informational).
    pub driver_id: u32,
    /// Must be zero.
    pub reserved2: u32,
}

/// Object ids (`enum uverbs_default_objects`).
pub mod object {
    /// `UVERBS_OBJECT_DEVICE`.
    pub const DEVICE: u16 = 0;
    /// `UVERBS_OBJECT_MR`.
    pub const MR: u16 = 7;
}

/// `UVERBS_ATTR_UHW_IN`: a method's driver-specific input (the driver
/// data of a `write()` command).
pub const UVERBS_ATTR_UHW_IN: u16 = 0x1000;
/// `UVERBS_ATTR_UHW_OUT`: a method's driver-specific output.
pub const UVERBS_ATTR_UHW_OUT: u16 = 0x1001;

/// Methods of the MR object (`enum uverbs_methods_mr`).
pub mod mr_method {
    /// `UVERBS_METHOD_MR_DESTROY`.
    pub const MR_DESTROY: u16 = 1;
    /// `UVERBS_METHOD_ADVISE_MR`.
    pub const ADVISE_MR: u16 = 2;
    /// `UVERBS_METHOD_REG_DMABUF_MR`.
    pub const REG_DMABUF_MR: u16 = 4;
}

/// Attributes of `UVERBS_METHOD_REG_DMABUF_MR`.
pub mod reg_dmabuf_mr_attr {
    /// Out: the new MR's handle (an object attribute the kernel fills).
    pub const HANDLE: u16 = 0;
    /// In: the PD (an object handle).
    pub const PD_HANDLE: u16 = 1;
    /// In: where in the dmabuf the region starts (u64).
    pub const OFFSET: u16 = 2;
    /// In: the region's length in bytes (u64).
    pub const LENGTH: u16 = 3;
    /// In: the address the device knows the start by (u64).
    pub const IOVA: u16 = 4;
    /// In: the dmabuf's file descriptor (u32).
    pub const FD: u16 = 5;
    /// In: `IB_ACCESS_*` flags (u32; only local write, remote read, write,
    /// atomic and relaxed ordering are accepted).
    pub const ACCESS_FLAGS: u16 = 6;
    /// Out: the lkey (u32).
    pub const RESP_LKEY: u16 = 7;
    /// Out: the rkey (u32).
    pub const RESP_RKEY: u16 = 8;
}

/// Attributes of `UVERBS_METHOD_ADVISE_MR`.
pub mod advise_mr_attr {
    /// In: the PD (an object handle).
    pub const PD_HANDLE: u16 = 0;
    /// In: the advice (`IB_UVERBS_ADVISE_MR_ADVICE_*`, a constant).
    pub const ADVICE: u16 = 1;
    /// In: `IB_UVERBS_ADVISE_MR_FLAG_*` (u32).
    pub const FLAGS: u16 = 2;
    /// In: the ranges, an array of `struct ib_uverbs_sge`.
    pub const SGE_LIST: u16 = 3;
}

/// `enum ib_uverbs_advise_mr_advice`.
pub mod advise_mr_advice {
    /// Fault the pages in for reading.
    pub const PREFETCH: u32 = 0;
    /// Fault the pages in for writing.
    pub const PREFETCH_WRITE: u32 = 1;
    /// Map the pages already present, without faulting any in.
    pub const PREFETCH_NO_FAULT: u32 = 2;
}

/// `IB_UVERBS_ADVISE_MR_FLAG_FLUSH`: return once the advice is carried out
/// (else it may run after the call returns).
pub const ADVISE_MR_FLAG_FLUSH: u32 = 1 << 0;

/// Methods of the device object (`enum uverbs_methods_device`).
pub mod device_method {
    /// `UVERBS_METHOD_INVOKE_WRITE`: a `write()` command carried by ioctl.
    pub const INVOKE_WRITE: u16 = 0;
    /// `UVERBS_METHOD_GET_CONTEXT`.
    pub const GET_CONTEXT: u16 = 3;
    /// `UVERBS_METHOD_QUERY_PORT`.
    pub const QUERY_PORT: u16 = 2;
    /// `UVERBS_METHOD_QUERY_GID_TABLE`.
    pub const QUERY_GID_TABLE: u16 = 5;
    /// `UVERBS_METHOD_QUERY_GID_ENTRY`.
    pub const QUERY_GID_ENTRY: u16 = 6;
}

/// Attributes of `UVERBS_METHOD_INVOKE_WRITE` (and [`UVERBS_ATTR_UHW_IN`],
/// [`UVERBS_ATTR_UHW_OUT`] for the driver data).
pub mod invoke_write_attr {
    /// In: the core command (what follows the `write()` headers).
    pub const CORE_IN: u16 = 0;
    /// Out: the core response.
    pub const CORE_OUT: u16 = 1;
    /// In: the command number (`IB_USER_VERBS_CMD_*`, with
    /// `IB_USER_VERBS_CMD_FLAG_EXTENDED` for an extended one), a constant.
    pub const WRITE_CMD: u16 = 2;
}

/// Attributes of `UVERBS_METHOD_QUERY_PORT`.
pub mod query_port_attr {
    /// In: the port number (a constant).
    pub const PORT_NUM: u16 = 0;
    /// Out: `struct ib_uverbs_query_port_resp_ex`.
    pub const RESP: u16 = 1;
}

/// Length of `struct ib_uverbs_query_port_resp_ex`: the legacy answer,
/// `port_cap_flags2` (u16) and reserved bytes.
pub const QUERY_PORT_RESP_EX_LEN: usize = 48;

/// Attributes of `UVERBS_METHOD_QUERY_GID_TABLE`.
pub mod query_gid_table_attr {
    /// In: `sizeof(struct ib_uverbs_gid_entry)` as the caller knows it.
    pub const ENTRY_SIZE: u16 = 0;
    /// In: flags, must be zero.
    pub const FLAGS: u16 = 1;
    /// Out: the entry array.
    pub const RESP_ENTRIES: u16 = 2;
    /// Out: number of entries written (u64).
    pub const RESP_NUM_ENTRIES: u16 = 3;
}

/// Attributes of `UVERBS_METHOD_QUERY_GID_ENTRY`.
pub mod query_gid_entry_attr {
    /// In: the port number (u32).
    pub const PORT: u16 = 0;
    /// In: the GID index (u32).
    pub const GID_INDEX: u16 = 1;
    /// In: flags, must be zero.
    pub const FLAGS: u16 = 2;
    /// Out: one `struct ib_uverbs_gid_entry`.
    pub const RESP_ENTRY: u16 = 3;
}

/// Most attributes one [`IoctlCmd`] carries.
pub const MAX_ATTRS: usize = 16;

/// A method call under construction; the attribute array lives on the stack.
/// Pointers given to the `ptr_*` methods must stay valid until
/// [`IoctlCmd::execute`] returns, which the borrow `'a` enforces.
pub struct IoctlCmd<'a> {
    hdr: IoctlHdr,
    attrs: [Attr; MAX_ATTRS],
    n: usize,
    overflow: bool,
    _borrows: std::marker::PhantomData<&'a mut [u8]>,
}

impl<'a> IoctlCmd<'a> {
    /// Starts a call of `method` on `object`.
    pub fn new(object: u16, method: u16) -> Self {
        IoctlCmd {
            hdr: IoctlHdr {
                object_id: object,
                method_id: method,
                ..Default::default()
            },
            attrs: [Attr::default(); MAX_ATTRS],
            n: 0,
            overflow: false,
            _borrows: std::marker::PhantomData,
        }
    }

    /// Sets the header's `driver_id` (`enum rdma_driver_id` of the device),
    /// as rdma-core does on every call.
    pub fn driver_id(&mut self, id: u32) -> &mut Self {
        self.hdr.driver_id = id;
        self
    }

    fn push(&mut self, attr: Attr) -> &mut Self {
        if self.n == MAX_ATTRS {
            self.overflow = true;
        } else {
            self.attrs[self.n] = attr;
            self.n += 1;
        }
        self
    }

    /// A mandatory input carried inline (at most 8 bytes, as a u64).
    pub fn in_u64(&mut self, id: u16, value: u64) -> &mut Self {
        self.push(Attr {
            attr_id: id,
            len: 8,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data: value,
        })
    }

    /// A mandatory input carried inline as a u32.
    pub fn in_u32(&mut self, id: u16, value: u32) -> &mut Self {
        self.push(Attr {
            attr_id: id,
            len: 4,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data: value as u64,
        })
    }

    /// A mandatory input naming an object by its handle (an IDR
    /// attribute: length 0, the handle in `data`).
    pub fn in_handle(&mut self, id: u16, handle: u32) -> &mut Self {
        self.push(Attr {
            attr_id: id,
            len: 0,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data: handle as u64,
        })
    }

    /// A mandatory output naming the object the method creates (an IDR
    /// attribute of access NEW: length 0, the kernel writes the new
    /// handle into `data`; read it with [`IoctlCmd::handle`]).
    pub fn out_handle(&mut self, id: u16) -> &mut Self {
        self.in_handle(id, 0)
    }

    /// After a successful [`execute`](Self::execute): the handle the kernel
    /// wrote into object attribute `id` (see [`out_handle`](Self::out_handle));
    /// `None` if there is no such attribute or the value is not a handle.
    pub fn handle(&self, id: u16) -> Option<u32> {
        self.attrs[..self.n]
            .iter()
            .find(|a| a.attr_id == id && a.len == 0)
            .and_then(|a| u32::try_from(a.data).ok())
    }

    /// A mandatory input buffer the kernel reads: carried inline when it
    /// is at most 8 bytes (as the kernel expects), else by pointer.
    pub fn in_bytes(&mut self, id: u16, buf: &'a [u8]) -> &mut Self {
        if buf.len() > u16::MAX as usize {
            self.overflow = true;
            return self;
        }
        let data = if buf.len() <= 8 {
            let mut v = [0u8; 8];
            v[..buf.len()].copy_from_slice(buf);
            u64::from_ne_bytes(v)
        } else {
            buf.as_ptr() as u64
        };
        self.push(Attr {
            attr_id: id,
            len: buf.len() as u16,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data,
        })
    }

    /// A mandatory output buffer the kernel writes into.
    pub fn out_bytes(&mut self, id: u16, buf: &'a mut [u8]) -> &mut Self {
        if buf.len() > u16::MAX as usize {
            self.overflow = true;
            return self;
        }
        self.push(Attr {
            attr_id: id,
            len: buf.len() as u16,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data: buf.as_mut_ptr() as u64,
        })
    }

    /// A mandatory output of a plain-data value.
    pub fn out_value<T: IntoBytes + FromBytes>(&mut self, id: u16, v: &'a mut T) -> &mut Self {
        self.out_bytes(id, v.as_mut_bytes())
    }

    /// Sends the call on `fd`.
    ///
    /// # Safety
    ///
    /// The buffers given to [`out_bytes`](Self::out_bytes) and
    /// [`out_value`](Self::out_value) are borrowed and need nothing more.
    /// But an inline value ([`in_u64`](Self::in_u64)) may be a user
    /// address to the method (the address of memory to register, of a
    /// queue buffer): the caller must ensure every such address is valid
    /// for what the method makes the kernel and device do with it, reads
    /// or writes, for as long as the object the method creates or modifies
    /// can use it.
    ///
    /// `fd` must be a uverbs command fd: another driver may give
    /// `RDMA_VERBS_IOCTL`'s number a meaning of its own, under which the
    /// attribute array's values (pointers among them) do something else.
    pub unsafe fn execute(&mut self, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        if self.overflow {
            return Err(Errno::E2BIG);
        }
        const HDR: usize = size_of::<IoctlHdr>();
        const ATTR: usize = size_of::<Attr>();
        let mut buf = [0u8; HDR + MAX_ATTRS * ATTR];
        let len = HDR + self.n * ATTR;
        self.hdr.length = len as u16;
        self.hdr.num_attrs = self.n as u16;
        buf[..HDR].copy_from_slice(self.hdr.as_bytes());
        buf[HDR..len].copy_from_slice(self.attrs[..self.n].as_bytes());
        // SAFETY: `buf` holds a complete ioctl header and `n` attributes;
        // every pointer attribute is borrowed for `'a`, which outlives this
        // call, and the caller vouches for `fd` and for any address among
        // the inline values (this function's contract).
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), RDMA_VERBS_IOCTL as _, buf.as_mut_ptr()) };
        if rc < 0 {
            return Err(Errno::last());
        }
        // The kernel writes back into the array: new object handles and
        // the flags of outputs it filled.
        for (a, b) in self.attrs[..self.n]
            .iter_mut()
            .zip(buf[HDR..len].chunks_exact(ATTR))
        {
            if let Ok(v) = Attr::read_from_bytes(b) {
                *a = v;
            }
        }
        Ok(())
    }
}
