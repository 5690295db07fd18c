//! Memory windows: remote access to a range of a registered MR under a key
//! of its own, granted and revoked without registering again.
//!
//! A window is allocated on a PD ([`Pd::alloc_mw`]) and bound to a range of
//! an MR that allows binding ([`AccessFlags::MW_BIND`]) with
//! [`Mr::mw_bind`]'s description of the range and the rights:
//!
//! - **type 1**: [`Qp::bind_mw`] posts the bind; the window stays bound
//!   until it is bound again (a zero-length [`MwBind::unbind`] revokes it)
//!   or deallocated.
//! - **type 2** (rxe: type 2B): [`Mw::bind_wr`] builds the BIND_MW work
//!   request, posted like any other on a QP of the window's PD; only that
//!   QP's peer can use the key, and it is revoked by a LOCAL_INV on that QP
//!   ([`SendWr::local_inv`]) or by the peer's SEND_WITH_INV
//!   ([`SendWr::send_with_inv`]), which the receive completion reports
//!   ([`crate::Wc::invalidated_rkey`]).
//!
//! Each bind gives the window a new key (the same index, the low byte
//! stepped), as the IB specification asks, so a key handed out before
//! cannot reach what is bound later. The window keeps the key its last
//! posted bind asked for: if that bind completes in error
//! (`MW_BIND_ERR`), put the old key back with [`Mw::set_rkey`].
//!
//! On rxe (Linux 6.1, 6.12 and 7.x alike) a remote access through a
//! window key is checked against the bounds of the window's MR, not of the
//! window: a window narrows the rights and can be revoked, but a peer
//! holding its key reaches the whole MR. Bind windows to MRs that cover
//! only what may be exposed.
//!
//! Memory stays owned by the MR: the kernel holds the MR while a window is
//! bound to it and refuses to deregister it meanwhile. So windows bind only
//! to MRs that own their memory or whose memory the caller keeps by
//! contract ([`Mr::mw_bind`] exists for `Mr<B: MrBuf>` and for raw
//! registrations, and scoped ones refuse [`AccessFlags::MW_BIND`]):
//! [`Mr::into_inner`] and [`Mr::deregister_raw`] then fail and hand the MR
//! back; a dropped owning [`Mr`] whose deregistration fails keeps (leaks)
//! its memory rather than free what a peer may still write, and a dropped
//! raw one aborts. Deallocate or invalidate windows before dropping or
//! unwrapping their MR.
//!
//! The provider must have windows ([`Feature::MemoryWindows`]): rxe has
//! them; mlx5 (which needs UMR work requests for them) refuses with
//! [`Error::Unsupported`] before any command is sent.

use std::fmt;
use std::ops::RangeBounds;

use rverbs_abi::cmd::exec;
use rverbs_abi::mr::AccessFlags;
use rverbs_abi::mw::{mw_type, AllocMw, DeallocMw};
use rverbs_provider::contract::Feature;
use rverbs_provider::wr::{MwBindWr, SendFlags, SendWr};

use crate::error::{Error, InvalidKind, Result};
use crate::mr::{Mr, MrBuf, Raw, RemoteMr};
use crate::pd::Pd;
use crate::qp::Qp;

/// The rights a window may grant.
const WINDOW_RIGHTS: AccessFlags = AccessFlags::REMOTE_READ
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC);

/// The kind of a memory window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Bound with [`Qp::bind_mw`]; usable through any QP of its PD.
    Type1,
    /// Bound with a BIND_MW work request ([`Mw::bind_wr`]); usable only
    /// through the QP it was bound on; invalidated by LOCAL_INV or a
    /// peer's SEND_WITH_INV.
    Type2,
}

/// A range of an MR and the remote rights a window grants to it: what a
/// bind binds. Built by [`Mr::mw_bind`] (checked against the MR) or
/// [`MwBind::unbind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwBind {
    mr_lkey: u32,
    addr: u64,
    length: u64,
    access: AccessFlags,
}

impl MwBind {
    /// No range: binding a type 1 window to it revokes the window's access
    /// (type 2 windows are revoked by invalidation instead).
    pub const fn unbind() -> MwBind {
        MwBind {
            mr_lkey: 0,
            addr: 0,
            length: 0,
            access: AccessFlags::empty(),
        }
    }

    /// Start of the range (an address of the MR).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Bytes in the range.
    pub fn len(&self) -> u64 {
        self.length
    }

    /// Whether the range is empty ([`MwBind::unbind`]).
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// The remote rights granted.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
}

impl<B: MrBuf> Mr<B> {
    /// Describes `range` of this MR with the remote rights `access`
    /// (`REMOTE_READ`, `REMOTE_WRITE`, `REMOTE_ATOMIC`), for binding a
    /// window to it. Checked here as the device checks it: the MR must
    /// allow binding ([`AccessFlags::MW_BIND`]), writable or atomic rights
    /// need the MR's `LOCAL_WRITE`, and the range must be non-empty and
    /// inside the MR. For an MR that owns its memory, and for a raw
    /// registration ([`Pd::register_raw`], whose contract covers a bound
    /// window's hold); a scoped one ([`Pd::register_scoped`]) cannot allow
    /// windows, since a bound window keeps the kernel from deregistering
    /// it.
    pub fn mw_bind(&self, range: impl RangeBounds<usize>, access: AccessFlags) -> Result<MwBind> {
        self.bind_range(range, access)
    }
}

impl Mr<Raw> {
    /// [`Mr::mw_bind`] for a raw registration ([`Pd::register_raw`] with
    /// [`AccessFlags::MW_BIND`]): while a window is bound to it, the kernel
    /// refuses to deregister it, which [`Mr::deregister_raw`] reports.
    pub fn mw_bind(&self, range: impl RangeBounds<usize>, access: AccessFlags) -> Result<MwBind> {
        self.bind_range(range, access)
    }
}

impl<B> Mr<B> {
    /// [`Mr::mw_bind`]'s checks and description (never for a scoped MR,
    /// which cannot have `MW_BIND`).
    fn bind_range(&self, range: impl RangeBounds<usize>, access: AccessFlags) -> Result<MwBind> {
        if !self.access().contains(AccessFlags::MW_BIND) {
            return Err(Error::invalid_as(
                InvalidKind::Access,
                "the memory region was not registered with AccessFlags::MW_BIND",
            ));
        }
        if !WINDOW_RIGHTS.contains(access) {
            return Err(Error::invalid_as(
                InvalidKind::Access,
                format!(
                    "a window grants REMOTE_READ, REMOTE_WRITE and REMOTE_ATOMIC only, not {:?}",
                    access.difference(WINDOW_RIGHTS)
                ),
            ));
        }
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !self.access().contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(Error::invalid_as(
                InvalidKind::Access,
                "a writable window needs a memory region with LOCAL_WRITE",
            ));
        }
        let (start, end) = self.bounds(range)?;
        if start == end {
            return Err(Error::invalid_as(
                InvalidKind::Empty,
                "a window binds a non-empty range",
            ));
        }
        // Cannot overflow: iova + len fits a u64 (checked at registration).
        Ok(MwBind {
            mr_lkey: self.lkey(),
            addr: self.iova() + start as u64,
            length: (end - start) as u64,
            access,
        })
    }
}

/// A memory window. Dropping it deallocates it (revoking its key).
pub struct Mw {
    pd: Pd,
    handle: u32,
    rkey: u32,
    ty: MwType,
    /// The range its last posted bind asked for (empty: none).
    bound: MwBind,
}

impl fmt::Debug for Mw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mw")
            .field("handle", &self.handle)
            .field("type", &self.ty)
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .finish()
    }
}

impl Pd {
    /// Allocates a memory window of type `ty` (ALLOC_MW), unbound.
    /// [`Error::Unsupported`] on a provider without windows (mlx5 here).
    pub fn alloc_mw(&self, ty: MwType) -> Result<Mw> {
        self.context().provider().require(Feature::MemoryWindows)?;
        let cmd = AllocMw {
            response: 0,
            pd_handle: self.handle(),
            mw_type: match ty {
                MwType::Type1 => mw_type::TYPE_1,
                MwType::Type2 => mw_type::TYPE_2,
            },
            reserved: [0; 3],
        };
        let resp = exec(self.context().fd(), &cmd, &mut []).map_err(Error::kernel("alloc_mw"))?;
        Ok(Mw {
            pd: self.clone(),
            handle: resp.mw_handle,
            rkey: resp.rkey,
            ty,
            bound: MwBind::unbind(),
        })
    }
}

impl Mw {
    /// The window's key: what a peer uses once it is bound.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Puts back the key the kernel has, after a bind that completed in
    /// error left it unchanged (`old` is what [`Mw::rkey`] said before).
    pub fn set_rkey(&mut self, old: u32) {
        self.rkey = old;
    }

    /// The window's type.
    pub fn mw_type(&self) -> MwType {
        self.ty
    }

    /// The kernel's handle for the window.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The PD the window belongs to.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// What a peer needs to use the window as its last bind asked: the
    /// range's address and length and the window's key.
    pub fn remote(&self) -> RemoteMr {
        RemoteMr {
            addr: self.bound.addr,
            len: self.bound.length,
            rkey: self.rkey,
        }
    }

    /// The key the next bind gives the window: the same index, the low
    /// byte stepped.
    fn next_rkey(&self) -> u32 {
        (self.rkey & !0xff) | (self.rkey.wrapping_add(1) & 0xff)
    }

    /// The BIND_MW request for a bind to `bind`, and the window's state
    /// once it is posted.
    fn bind_request(&mut self, wr_id: u64, bind: &MwBind) -> SendWr<'static> {
        let rkey = self.next_rkey();
        let wr = SendWr::bind_mw_wr(
            wr_id,
            MwBindWr {
                mw_rkey: self.rkey,
                rkey,
                mr_lkey: bind.mr_lkey,
                addr: bind.addr,
                length: bind.length,
                access: bind.access,
            },
        );
        self.rkey = rkey;
        self.bound = *bind;
        wr
    }

    /// A type 2 window: the BIND_MW work request binding it to `bind`, to
    /// post on a QP of the window's PD (RC or UC). The window's key is the
    /// new one from here on ([`Mw::rkey`]); only the peer of that QP can
    /// use it, until a LOCAL_INV or the peer's SEND_WITH_INV revokes it.
    /// Refused for a type 1 window ([`Qp::bind_mw`] binds those) and for
    /// an empty range.
    pub fn bind_wr(&mut self, wr_id: u64, bind: &MwBind) -> Result<SendWr<'static>> {
        if self.ty != MwType::Type2 {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                "a type 1 window is bound with Qp::bind_mw, not a work request",
            ));
        }
        if bind.is_empty() {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                "a type 2 window is revoked by invalidation (LOCAL_INV), not an empty bind",
            ));
        }
        Ok(self.bind_request(wr_id, bind))
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        let cmd = DeallocMw {
            mw_handle: self.handle,
        };
        // A failure (device gone) leaves the kernel to free it with the
        // context; nothing of ours depends on it.
        let _ = exec(self.pd.context().fd(), &cmd, &mut []);
    }
}

impl Qp {
    /// Binds the type 1 window `mw` to `bind` (the bind verb): posts a
    /// BIND_MW work request on this QP (RC or UC, in RTS) with `flags`
    /// (`SIGNALED` for a completion of opcode BIND_MW) and returns the
    /// window's new key, usable through any QP of its PD once the bind has
    /// executed. [`MwBind::unbind`] revokes the window instead.
    pub fn bind_mw(
        &mut self,
        mw: &mut Mw,
        wr_id: u64,
        bind: &MwBind,
        flags: SendFlags,
    ) -> Result<u32> {
        if mw.ty != MwType::Type1 {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                "a type 2 window is bound with a work request (Mw::bind_wr)",
            ));
        }
        let (old_rkey, old_bound) = (mw.rkey, mw.bound);
        let mut wr = mw.bind_request(wr_id, bind);
        wr.set_send_flags(flags);
        match self.post_send(&[wr]) {
            Ok(()) => Ok(mw.rkey),
            Err(f) => {
                // Refused (index 0): nothing was posted, the kernel's key
                // is unchanged. A doorbell that failed after the request
                // was written (index 1) leaves it queued: the new key
                // stands.
                if f.index() == 0 {
                    mw.rkey = old_rkey;
                    mw.bound = old_bound;
                }
                Err(f.into())
            }
        }
    }
}
