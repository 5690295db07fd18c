//! Work requests in provider-neutral form: what the library hands every
//! provider's post path.
//!
//! A [`SendWr`] is built by the per-opcode constructors of [`opcode`] (or
//! their shorthands on [`SendWr`]), the way the io-uring crate's `opcode`
//! builders produce its submission entries: each operation takes exactly the
//! fields it has, so an immediate on a READ, an inline payload on an atomic
//! or a remote address on a SEND cannot be written. The fields are private;
//! providers read them through the accessors, which compile to plain loads.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::io::IoSlice;
use std::sync::Arc;

use rverbs_abi::mr::AccessFlags;
use rverbs_abi::wr::{flush_level, flush_type, send_flags, wr_opcode, Sge};

/// A send work request's operation (`enum ib_uverbs_wr_opcode`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    /// Write the local gather list to remote memory.
    RdmaWrite = wr_opcode::RDMA_WRITE,
    /// RDMA WRITE that also consumes a receive and delivers immediate data.
    RdmaWriteWithImm = wr_opcode::RDMA_WRITE_WITH_IMM,
    /// Send to the peer's next receive.
    Send = wr_opcode::SEND,
    /// Send with immediate data.
    SendWithImm = wr_opcode::SEND_WITH_IMM,
    /// Read remote memory into the local scatter list.
    RdmaRead = wr_opcode::RDMA_READ,
    /// 64-bit compare and swap on remote memory.
    AtomicCmpAndSwp = wr_opcode::ATOMIC_CMP_AND_SWP,
    /// 64-bit fetch and add on remote memory.
    AtomicFetchAndAdd = wr_opcode::ATOMIC_FETCH_AND_ADD,
    /// Invalidate a local rkey (a type 2 memory window's).
    LocalInv = wr_opcode::LOCAL_INV,
    /// Bind a memory window to a range of an MR.
    BindMw = wr_opcode::BIND_MW,
    /// Send, invalidating an rkey at the peer.
    SendWithInv = wr_opcode::SEND_WITH_INV,
    /// Make earlier RDMA WRITEs to a remote range globally visible or
    /// persistent (RDMA FLUSH).
    Flush = wr_opcode::FLUSH,
    /// Write 8 bytes to remote memory as one atomic store.
    AtomicWrite = wr_opcode::ATOMIC_WRITE,
}

impl WrOpcode {
    /// Every opcode.
    pub const ALL: [WrOpcode; 12] = [
        Self::RdmaWrite,
        Self::RdmaWriteWithImm,
        Self::Send,
        Self::SendWithImm,
        Self::RdmaRead,
        Self::AtomicCmpAndSwp,
        Self::AtomicFetchAndAdd,
        Self::LocalInv,
        Self::BindMw,
        Self::SendWithInv,
        Self::Flush,
        Self::AtomicWrite,
    ];

    /// The opcode whose `ib_uverbs_wr_opcode` value is `raw`, if any.
    pub fn from_raw(raw: u32) -> Option<WrOpcode> {
        Self::ALL.into_iter().find(|op| *op as u32 == raw)
    }

    /// Whether the operation names remote memory (remote address and rkey).
    pub fn is_rdma(self) -> bool {
        matches!(
            self,
            Self::RdmaWrite | Self::RdmaWriteWithImm | Self::RdmaRead
        )
    }
    /// Whether the operation is an atomic.
    pub fn is_atomic(self) -> bool {
        matches!(self, Self::AtomicCmpAndSwp | Self::AtomicFetchAndAdd)
    }
    /// Whether the operation is a memory window one: BIND_MW, LOCAL_INV,
    /// SEND_WITH_INV.
    pub fn is_mw(self) -> bool {
        matches!(self, Self::BindMw | Self::LocalInv | Self::SendWithInv)
    }
    /// Whether the operation carries immediate data.
    pub fn has_imm(self) -> bool {
        matches!(self, Self::RdmaWriteWithImm | Self::SendWithImm)
    }
    /// Whether the operation is one newer kernels added and a device may
    /// lack (ATOMIC_WRITE, FLUSH): a send queue accepts it only once the
    /// library has seen the device's capability for it.
    pub fn needs_capability(self) -> bool {
        matches!(self, Self::AtomicWrite | Self::Flush)
    }
}

bitflags::bitflags! {
    /// The placement types of an RDMA FLUSH (`IB_FLUSH_GLOBAL`,
    /// `IB_FLUSH_PERSISTENT`); a request names one or both.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct FlushType: u8 {
        /// To the responder's global visibility point: later reads by
        /// any agent see the data.
        const GLOBAL = flush_type::GLOBAL;
        /// To persistence (only MRs registered with `FLUSH_PERSISTENT`,
        /// which needs persistent memory).
        const PERSISTENT = flush_type::PERSISTENT;
    }
}

/// What an RDMA FLUSH covers (`IB_FLUSH_RANGE`, `IB_FLUSH_MR`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FlushLevel {
    /// The range the request names.
    #[default]
    Range = flush_level::RANGE,
    /// The whole MR the rkey names (address and length are ignored).
    Mr = flush_level::MR,
}

/// What a FLUSH request asks for: `length` bytes at `remote_addr` under
/// `rkey` (or the whole MR at [`FlushLevel::Mr`]), made `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlushWr {
    /// Start of the range.
    pub remote_addr: u64,
    /// Bytes in the range.
    pub length: u32,
    /// The remote MR's rkey.
    pub rkey: u32,
    /// Placement type(s).
    pub kind: FlushType,
    /// Range or whole MR.
    pub level: FlushLevel,
}

bitflags::bitflags! {
    /// Send flags (`IB_SEND_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA READs and atomics before starting.
        const FENCE = send_flags::FENCE;
        /// Generate a completion for this work request.
        const SIGNALED = send_flags::SIGNALED;
        /// Raise a solicited event at the receiver.
        const SOLICITED = send_flags::SOLICITED;
        /// Copy the payload into the WQE at post time (see [`Payload::Inline`]).
        const INLINE = send_flags::INLINE;
    }
}

/// Where a send work request's data comes from (or, for RDMA READ, goes to).
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    /// A gather (scatter for READ) list of registered memory.
    Sge(&'a [Sge]),
    /// Bytes copied into the work queue entry at post time: the buffers need
    /// not be registered and may be reused as soon as the post returns.
    Inline(&'a [IoSlice<'a>]),
}

/// The destination of a UD send: an address handle (by the number the
/// provider knows it by), the remote QP and the Q_Key to present to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct UdDest<'a> {
    /// The provider's number for the address handle (rxe: `ah_num`).
    pub ah_num: u32,
    /// The address vector the device reads from the WQE, for providers that
    /// put it there (mlx5: the 48-byte `mlx5_wqe_av`); `None` for rxe.
    pub av: Option<&'a [u8; 48]>,
    /// What keeps the address handle's kernel object alive, for providers
    /// whose device looks the handle up by number when it sends (rxe):
    /// the provider keeps a clone until the send's queue slot is reused
    /// or the QP is gone, so that the number cannot be handed to a new
    /// address handle while the send still names it. `None` for a
    /// destination built by hand: its address handle must then outlive
    /// the send by other means.
    pub hold: Option<&'a AhHold>,
    /// Remote QP number (24 bits).
    pub remote_qpn: u32,
    /// Q_Key the remote QP expects.
    pub remote_qkey: u32,
}

/// A reference that keeps an address handle's kernel object (and with it
/// its number) alive: cloning it is one atomic increment, no allocation.
/// The object is destroyed when the last clone is dropped. Compared and
/// hashed by identity.
#[derive(Clone)]
pub struct AhHold(Arc<dyn Send + Sync>);

impl AhHold {
    /// Holds `owner`, whose drop destroys the address handle.
    pub fn new<T: Send + Sync + 'static>(owner: Arc<T>) -> AhHold {
        AhHold(owner)
    }

    /// Clones of this hold alive, this one included (for tests and
    /// diagnostics).
    pub fn holders(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

impl fmt::Debug for AhHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AhHold")
            .field(&Arc::as_ptr(&self.0).cast::<()>())
            .finish()
    }
}

impl PartialEq for AhHold {
    fn eq(&self, other: &AhHold) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for AhHold {}

impl Hash for AhHold {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.0).cast::<()>().hash(state);
    }
}

/// What a BIND_MW request binds: window `mw_rkey` (its current key) to
/// `length` bytes at `addr` of the MR whose lkey is `mr_lkey`, with the
/// remote rights `access`, under the new key `rkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwBindWr {
    /// The window's current rkey.
    pub mw_rkey: u32,
    /// The key the window has once bound (same index, new low byte).
    pub rkey: u32,
    /// The MR's lkey.
    pub mr_lkey: u32,
    /// Start of the range (an address of the MR).
    pub addr: u64,
    /// Bytes in the range.
    pub length: u64,
    /// Remote rights through the window (`REMOTE_READ`, `REMOTE_WRITE`,
    /// `REMOTE_ATOMIC`).
    pub access: AccessFlags,
}

/// A send work request, built by an [`opcode`] builder. Chains are slices
/// of these.
#[derive(Debug, Clone, Copy)]
#[must_use = "a work request does nothing until it is posted; its builder methods return a new one"]
pub struct SendWr<'a> {
    wr_id: u64,
    opcode: WrOpcode,
    send_flags: SendFlags,
    imm_data: u32,
    payload: Payload<'a>,
    remote_addr: u64,
    rkey: u32,
    compare_add: u64,
    swap: u64,
    ud: Option<UdDest<'a>>,
    /// The payload's one SGE if it is exactly one SGE and there is no UD
    /// destination ([`SendRequest::lone_sge`]), kept with them: a post's
    /// fast path tests one field instead of three.
    lone: Option<&'a Sge>,
}

/// [`SendRequest::lone_sge`] of a request with `payload` and `ud`.
#[inline(always)]
const fn lone_of<'a>(payload: Payload<'a>, ud: &Option<UdDest<'_>>) -> Option<&'a Sge> {
    match (payload, ud) {
        (Payload::Sge([sge]), None) => Some(sge),
        _ => None,
    }
}

/// A receive work request.
#[derive(Debug, Clone, Copy)]
#[must_use = "a work request does nothing until it is posted"]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Scatter list of registered memory.
    pub sg_list: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    /// A receive into the scatter list `sg_list`.
    pub const fn new(wr_id: u64, sg_list: &'a [Sge]) -> Self {
        RecvWr { wr_id, sg_list }
    }
}

impl<'a> SendWr<'a> {
    const fn raw(wr_id: u64, opcode: WrOpcode, payload: Payload<'a>) -> Self {
        SendWr {
            wr_id,
            opcode,
            send_flags: SendFlags::empty(),
            imm_data: 0,
            payload,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
            lone: lone_of(payload, &None),
        }
    }

    /// SEND of the gather list `sges` ([`opcode::Send`]).
    pub const fn send(wr_id: u64, sges: &'a [Sge]) -> Self {
        opcode::Send::new(wr_id, sges).build()
    }
    /// ATOMIC_WRITE of `value` to `remote_addr` under `rkey`
    /// ([`opcode::AtomicWrite`]).
    pub const fn atomic_write(wr_id: u64, remote_addr: u64, rkey: u32, value: [u8; 8]) -> Self {
        opcode::AtomicWrite::new(wr_id, remote_addr, rkey, value).build()
    }
    /// FLUSH of `length` bytes at `remote_addr` under `rkey` to `kind`'s
    /// placement ([`opcode::Flush`]; `.whole_mr()` there for the MR).
    pub const fn rdma_flush(
        wr_id: u64,
        remote_addr: u64,
        rkey: u32,
        length: u32,
        kind: FlushType,
    ) -> Self {
        opcode::Flush::new(wr_id, remote_addr, rkey, length, kind).build()
    }
    /// SEND of `sges` with immediate data `imm` (host order). Replaces the
    /// former `SendWr::with_imm`, which accepted an immediate on any
    /// opcode.
    #[doc(alias = "with_imm")]
    pub const fn send_with_imm(wr_id: u64, sges: &'a [Sge], imm: u32) -> Self {
        opcode::Send::new(wr_id, sges).imm(imm).build()
    }
    /// SEND of `sges` that invalidates `rkey` at the receiver
    /// ([`opcode::Send::invalidate`]).
    pub const fn send_with_inv(wr_id: u64, sges: &'a [Sge], rkey: u32) -> Self {
        opcode::Send::new(wr_id, sges).invalidate(rkey).build()
    }
    /// LOCAL_INV of `rkey` ([`opcode::LocalInv`]).
    pub const fn local_inv(wr_id: u64, rkey: u32) -> Self {
        opcode::LocalInv::new(wr_id, rkey).build()
    }
    /// BIND_MW as `bind` says ([`opcode::BindMw`]).
    pub const fn bind_mw_wr(wr_id: u64, bind: MwBindWr) -> Self {
        opcode::BindMw::new(wr_id, bind).build()
    }
    /// SEND of `bufs`, copied inline into the WQE.
    pub const fn send_inline(wr_id: u64, bufs: &'a [IoSlice<'a>]) -> Self {
        opcode::Send::inline(wr_id, bufs).build()
    }
    /// RDMA WRITE of `sges` to `remote_addr` under `rkey` ([`opcode::Write`]).
    pub const fn rdma_write(wr_id: u64, sges: &'a [Sge], remote_addr: u64, rkey: u32) -> Self {
        opcode::Write::new(wr_id, sges, remote_addr, rkey).build()
    }
    /// RDMA WRITE of `sges` with immediate data `imm` (host order), which
    /// consumes a receive at the peer. Replaces the former
    /// `SendWr::with_imm` for WRITEs.
    #[doc(alias = "with_imm")]
    pub const fn rdma_write_with_imm(
        wr_id: u64,
        sges: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> Self {
        opcode::Write::new(wr_id, sges, remote_addr, rkey)
            .imm(imm)
            .build()
    }
    /// RDMA READ from `remote_addr` under `rkey` into `sges` ([`opcode::Read`]).
    pub const fn rdma_read(wr_id: u64, sges: &'a [Sge], remote_addr: u64, rkey: u32) -> Self {
        opcode::Read::new(wr_id, sges, remote_addr, rkey).build()
    }
    /// 64-bit compare-and-swap ([`opcode::CompareSwap`]) at `remote_addr`
    /// (8-byte aligned) under `rkey`: if the remote value equals `compare` it
    /// becomes `swap`; the original value is written to `sge` (exactly 8
    /// bytes). Values are in host order. RC only.
    pub const fn cmp_swap(
        wr_id: u64,
        sge: &'a Sge,
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> Self {
        opcode::CompareSwap::new(wr_id, sge, remote_addr, rkey, compare, swap).build()
    }
    /// 64-bit fetch-and-add ([`opcode::FetchAdd`]) of `add` at `remote_addr`
    /// (8-byte aligned) under `rkey`; the original value is written to `sge`
    /// (exactly 8 bytes). Values are in host order. RC only.
    pub const fn fetch_add(
        wr_id: u64,
        sge: &'a Sge,
        remote_addr: u64,
        rkey: u32,
        add: u64,
    ) -> Self {
        opcode::FetchAdd::new(wr_id, sge, remote_addr, rkey, add).build()
    }

    /// Addresses a UD send to `dest` (in the `rverbs` crate:
    /// `wr.dest(ah.dest(remote_qpn, remote_qkey))`, which carries what
    /// every provider needs, mlx5's address vector included).
    pub const fn dest(mut self, dest: UdDest<'a>) -> Self {
        self.ud = Some(dest);
        self.lone = None;
        self
    }
    /// Addresses a UD send by the provider's raw address-handle number
    /// `ah_num` alone. Enough for rxe only: mlx5 needs the address vector
    /// too, and refuses such a request with
    /// [`PostError::MissingAddress`](crate::PostError::MissingAddress).
    /// Use [`SendWr::dest`] with `Ah::dest` instead.
    #[doc(hidden)]
    pub const fn ud(self, ah_num: u32, remote_qpn: u32, remote_qkey: u32) -> Self {
        self.dest(UdDest {
            ah_num,
            av: None,
            remote_qpn,
            remote_qkey,
            hold: None,
        })
    }
    /// Requests a completion for this request.
    pub const fn signaled(mut self) -> Self {
        self.send_flags = self.send_flags.union(SendFlags::SIGNALED);
        self
    }
    /// Adds `flags` ([`SendFlags::INLINE`] is set or cleared by the payload
    /// when the request is posted, whatever is given here).
    pub const fn flags(mut self, flags: SendFlags) -> Self {
        self.send_flags = self.send_flags.union(flags);
        self
    }

    /// Sets the id returned in the completion (every opcode has one: a
    /// template request can be reused with a new id per post).
    #[inline(always)]
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.wr_id = wr_id;
    }
    /// Replaces the flags (every opcode takes them).
    #[inline(always)]
    pub fn set_send_flags(&mut self, flags: SendFlags) {
        self.send_flags = flags;
    }

    /// Returned in the completion.
    #[inline(always)]
    pub const fn wr_id(&self) -> u64 {
        self.wr_id
    }
    /// The operation.
    #[inline(always)]
    pub const fn opcode(&self) -> WrOpcode {
        self.opcode
    }
    /// The flags as given ([`SendFlags::INLINE`] is implied by
    /// [`Payload::Inline`], whatever this says).
    #[inline(always)]
    pub const fn send_flags(&self) -> SendFlags {
        self.send_flags
    }
    /// Immediate data in host order (sent big-endian) for the `*_WITH_IMM`
    /// opcodes, 0 for the others but LOCAL_INV and SEND_WITH_INV (their
    /// [`SendWr::invalidate_rkey`]) and BIND_MW (its access flags).
    #[inline(always)]
    pub const fn imm_data(&self) -> u32 {
        self.imm_data
    }
    /// The local data.
    #[inline(always)]
    pub const fn payload(&self) -> Payload<'a> {
        self.payload
    }
    /// Remote virtual address (RDMA and atomics; 0 for the others).
    #[inline(always)]
    pub const fn remote_addr(&self) -> u64 {
        self.remote_addr
    }
    /// Remote key (RDMA and atomics; 0 for the others).
    #[inline(always)]
    pub const fn rkey(&self) -> u32 {
        self.rkey
    }
    /// Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    #[inline(always)]
    pub const fn compare_add(&self) -> u64 {
        self.compare_add
    }
    /// Swap value (CMP_AND_SWP).
    #[inline(always)]
    pub const fn swap(&self) -> u64 {
        self.swap
    }
    /// Where a UD send goes: required on UD QPs, refused on connected ones.
    #[inline(always)]
    pub const fn ud_dest(&self) -> Option<UdDest<'a>> {
        self.ud
    }
    /// The rkey a LOCAL_INV or SEND_WITH_INV invalidates (0 for the
    /// others).
    #[inline(always)]
    pub const fn invalidate_rkey(&self) -> u32 {
        invalidate_of(self.opcode, self.imm_data)
    }
    /// What a BIND_MW binds (`None` for the other opcodes). Kept in the
    /// request's general fields (address, key, operands), so that the
    /// request stays the size of the common ones.
    #[inline(always)]
    pub const fn bind_mw(&self) -> Option<MwBindWr> {
        bind_of(
            self.opcode,
            self.imm_data,
            self.remote_addr,
            self.rkey,
            self.compare_add,
            self.swap,
        )
    }

    /// The 8 bytes an ATOMIC_WRITE stores (`None` for the other opcodes),
    /// exactly as they land in remote memory.
    #[inline(always)]
    pub const fn atomic_write_value(&self) -> Option<[u8; 8]> {
        atomic_write_of(self.opcode, self.compare_add)
    }
    /// What a FLUSH asks for (`None` for the other opcodes).
    #[inline(always)]
    pub const fn flush(&self) -> Option<FlushWr> {
        flush_of(
            self.opcode,
            self.remote_addr,
            self.rkey,
            self.compare_add,
            self.swap,
        )
    }

    /// A request of any opcode with any payload, for the tests of the
    /// post-time checks, which must refuse what the builders cannot write
    /// (the `test-util` feature, for the providers' unit tests; not API).
    #[cfg(any(test, feature = "test-util"))]
    #[doc(hidden)]
    pub fn any(wr_id: u64, opcode: WrOpcode, payload: Payload<'a>) -> Self {
        Self::raw(wr_id, opcode, payload)
    }
    /// Sets the remote address and key of any request (`test-util`).
    #[cfg(any(test, feature = "test-util"))]
    #[doc(hidden)]
    pub fn at(mut self, remote_addr: u64, rkey: u32) -> Self {
        self.remote_addr = remote_addr;
        self.rkey = rkey;
        self
    }
}

/// The rkey a LOCAL_INV or SEND_WITH_INV invalidates, from the general
/// fields (0 for the other opcodes).
#[inline(always)]
const fn invalidate_of(opcode: WrOpcode, imm_data: u32) -> u32 {
    match opcode {
        WrOpcode::LocalInv | WrOpcode::SendWithInv => imm_data,
        _ => 0,
    }
}

/// What a BIND_MW binds, from the general fields it is kept in.
#[inline(always)]
const fn bind_of(
    opcode: WrOpcode,
    imm_data: u32,
    remote_addr: u64,
    rkey: u32,
    compare_add: u64,
    swap: u64,
) -> Option<MwBindWr> {
    match opcode {
        WrOpcode::BindMw => Some(MwBindWr {
            mw_rkey: (swap >> 32) as u32,
            rkey,
            mr_lkey: swap as u32,
            addr: remote_addr,
            length: compare_add,
            access: AccessFlags::from_bits_retain(imm_data),
        }),
        _ => None,
    }
}

/// The 8 bytes an ATOMIC_WRITE stores, from the general fields.
#[inline(always)]
const fn atomic_write_of(opcode: WrOpcode, compare_add: u64) -> Option<[u8; 8]> {
    match opcode {
        WrOpcode::AtomicWrite => Some(compare_add.to_ne_bytes()),
        _ => None,
    }
}

/// What a FLUSH asks for, from the general fields.
#[inline(always)]
const fn flush_of(
    opcode: WrOpcode,
    remote_addr: u64,
    rkey: u32,
    compare_add: u64,
    swap: u64,
) -> Option<FlushWr> {
    match opcode {
        WrOpcode::Flush => Some(FlushWr {
            remote_addr,
            length: compare_add as u32,
            rkey,
            kind: FlushType::from_bits_retain(swap as u8),
            level: if (swap >> 8) as u8 == flush_level::MR {
                FlushLevel::Mr
            } else {
                FlushLevel::Range
            },
        }),
        _ => None,
    }
}

/// A send work request as a provider's post path reads it: the general
/// fields of a [`SendWr`], read through methods, so that a request kept in
/// another form (the C ABI's `struct ibv_send_wr`) is written to the ring
/// straight from that form, without being copied into a [`SendWr`] first.
/// [`SendWr`] implements it; so may an adapter of another request format.
///
/// The values need not be well formed: a provider runs every check of
/// [`crate::check`] on them, as on a [`SendWr`] built by hand, before a
/// byte reaches its ring. The derived accessors (`invalidate_rkey`,
/// `bind_mw`, `atomic_write_value`, `flush`) read the general fields as
/// [`SendWr`]'s do.
///
/// # Safety
/// Every method returns the same value each time it is called on the same
/// request: a provider checks the payload and opcode of one call and
/// writes the entry from another, so a request whose payload grew between
/// the two would be written past the room that was checked.
pub unsafe trait SendRequest {
    /// Returned in the completion ([`SendWr::wr_id`]).
    fn wr_id(&self) -> u64;
    /// The operation.
    fn opcode(&self) -> WrOpcode;
    /// The flags ([`SendWr::send_flags`]).
    fn send_flags(&self) -> SendFlags;
    /// Immediate data in host order, or the general field as
    /// [`SendWr::imm_data`] says.
    fn imm_data(&self) -> u32;
    /// The local data.
    fn payload(&self) -> Payload<'_>;
    /// Remote virtual address (RDMA and atomics; 0 for the others).
    fn remote_addr(&self) -> u64;
    /// Remote key (RDMA and atomics; 0 for the others).
    fn rkey(&self) -> u32;
    /// Compare value or addend (atomics).
    fn compare_add(&self) -> u64;
    /// Swap value (CMP_AND_SWP).
    fn swap(&self) -> u64;
    /// Where a UD send goes.
    fn ud_dest(&self) -> Option<UdDest<'_>>;
    /// The payload's one SGE if the payload is exactly one SGE and there
    /// is no UD destination, else `None`: what a provider's fast path for
    /// the common request looks at first. Must agree with
    /// [`SendRequest::payload`] and [`SendRequest::ud_dest`] (the default
    /// derives it from them; [`SendWr`] keeps it).
    #[inline(always)]
    fn lone_sge(&self) -> Option<&Sge> {
        lone_of(self.payload(), &self.ud_dest())
    }

    /// [`SendWr::invalidate_rkey`].
    #[inline(always)]
    fn invalidate_rkey(&self) -> u32 {
        invalidate_of(self.opcode(), self.imm_data())
    }
    /// [`SendWr::bind_mw`].
    #[inline(always)]
    fn bind_mw(&self) -> Option<MwBindWr> {
        bind_of(
            self.opcode(),
            self.imm_data(),
            self.remote_addr(),
            self.rkey(),
            self.compare_add(),
            self.swap(),
        )
    }
    /// [`SendWr::atomic_write_value`].
    #[inline(always)]
    fn atomic_write_value(&self) -> Option<[u8; 8]> {
        atomic_write_of(self.opcode(), self.compare_add())
    }
    /// [`SendWr::flush`].
    #[inline(always)]
    fn flush(&self) -> Option<FlushWr> {
        flush_of(
            self.opcode(),
            self.remote_addr(),
            self.rkey(),
            self.compare_add(),
            self.swap(),
        )
    }
    /// The same request as a [`SendWr`] (for a post path that takes only
    /// those).
    #[inline(always)]
    fn to_send_wr(&self) -> SendWr<'_> {
        SendWr {
            wr_id: self.wr_id(),
            opcode: self.opcode(),
            send_flags: self.send_flags(),
            imm_data: self.imm_data(),
            payload: self.payload(),
            remote_addr: self.remote_addr(),
            rkey: self.rkey(),
            compare_add: self.compare_add(),
            swap: self.swap(),
            ud: self.ud_dest(),
            lone: self.lone_sge(),
        }
    }
}

// SAFETY: forwards to `T`'s methods, which keep the contract.
unsafe impl<T: SendRequest + ?Sized> SendRequest for &T {
    #[inline(always)]
    fn wr_id(&self) -> u64 {
        (**self).wr_id()
    }
    #[inline(always)]
    fn opcode(&self) -> WrOpcode {
        (**self).opcode()
    }
    #[inline(always)]
    fn send_flags(&self) -> SendFlags {
        (**self).send_flags()
    }
    #[inline(always)]
    fn imm_data(&self) -> u32 {
        (**self).imm_data()
    }
    #[inline(always)]
    fn payload(&self) -> Payload<'_> {
        (**self).payload()
    }
    #[inline(always)]
    fn remote_addr(&self) -> u64 {
        (**self).remote_addr()
    }
    #[inline(always)]
    fn rkey(&self) -> u32 {
        (**self).rkey()
    }
    #[inline(always)]
    fn compare_add(&self) -> u64 {
        (**self).compare_add()
    }
    #[inline(always)]
    fn swap(&self) -> u64 {
        (**self).swap()
    }
    #[inline(always)]
    fn ud_dest(&self) -> Option<UdDest<'_>> {
        (**self).ud_dest()
    }
    #[inline(always)]
    fn lone_sge(&self) -> Option<&Sge> {
        (**self).lone_sge()
    }
}

// SAFETY: every method reads a field of the request, which `&self`
// keeps unchanged.
unsafe impl SendRequest for SendWr<'_> {
    #[inline(always)]
    fn wr_id(&self) -> u64 {
        self.wr_id
    }
    #[inline(always)]
    fn opcode(&self) -> WrOpcode {
        self.opcode
    }
    #[inline(always)]
    fn send_flags(&self) -> SendFlags {
        self.send_flags
    }
    #[inline(always)]
    fn imm_data(&self) -> u32 {
        self.imm_data
    }
    #[inline(always)]
    fn payload(&self) -> Payload<'_> {
        self.payload
    }
    #[inline(always)]
    fn remote_addr(&self) -> u64 {
        self.remote_addr
    }
    #[inline(always)]
    fn rkey(&self) -> u32 {
        self.rkey
    }
    #[inline(always)]
    fn compare_add(&self) -> u64 {
        self.compare_add
    }
    #[inline(always)]
    fn swap(&self) -> u64 {
        self.swap
    }
    #[inline(always)]
    fn ud_dest(&self) -> Option<UdDest<'_>> {
        self.ud
    }
    #[inline(always)]
    fn lone_sge(&self) -> Option<&Sge> {
        self.lone
    }
    #[inline(always)]
    fn to_send_wr(&self) -> SendWr<'_> {
        *self
    }
}

/// A request in another form than [`SendWr`] (as the C ABI's
/// `ibv_send_wr` is), read through [`SendRequest`] only: for the
/// providers' tests that the in-place post paths match the [`SendWr`]
/// ones (the `test-util` feature; not API).
#[cfg(any(test, feature = "test-util"))]
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct ForeignWr<'a>(pub SendWr<'a>);

// SAFETY: forwards to the wrapped request's fields, which do not change.
#[cfg(any(test, feature = "test-util"))]
unsafe impl SendRequest for ForeignWr<'_> {
    fn wr_id(&self) -> u64 {
        self.0.wr_id
    }
    fn opcode(&self) -> WrOpcode {
        self.0.opcode
    }
    fn send_flags(&self) -> SendFlags {
        self.0.send_flags
    }
    fn imm_data(&self) -> u32 {
        self.0.imm_data
    }
    fn payload(&self) -> Payload<'_> {
        self.0.payload
    }
    fn remote_addr(&self) -> u64 {
        self.0.remote_addr
    }
    fn rkey(&self) -> u32 {
        self.0.rkey
    }
    fn compare_add(&self) -> u64 {
        self.0.compare_add
    }
    fn swap(&self) -> u64 {
        self.0.swap
    }
    fn ud_dest(&self) -> Option<UdDest<'_>> {
        self.0.ud
    }
}

/// One builder per send operation, each taking exactly what its operation
/// has; `build()` (or `From`) gives the [`SendWr`] the post path takes.
/// Flags and a UD destination are set on the [`SendWr`] afterwards.
pub mod opcode {
    use super::*;

    /// Declares each builder: a `SendWr` under construction, with
    /// `build()` and `From` giving it to the post path. Its constructors
    /// and setters are written beside it.
    macro_rules! builders {
        ($($(#[$doc:meta])* $t:ident;)*) => {$(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy)]
            #[must_use = "an opcode builder does nothing until built and posted"]
            pub struct $t<'a>(SendWr<'a>);

            impl<'a> $t<'a> {
                /// The work request.
                pub const fn build(self) -> SendWr<'a> {
                    self.0
                }
            }

            impl<'a> From<$t<'a>> for SendWr<'a> {
                fn from(b: $t<'a>) -> SendWr<'a> {
                    b.build()
                }
            }
        )*};
    }

    builders! {
        /// ATOMIC_WRITE: stores 8 bytes at an 8-byte aligned remote address as
        /// one atomic write, ordered after the QP's earlier writes (the IBTA's
        /// "atomic write" extension). RC only; the device must offer it.
        AtomicWrite;
        /// RDMA FLUSH: makes the data earlier RDMA WRITEs placed in a remote
        /// range globally visible or persistent, completing once it is. RC
        /// only; the device must offer it, and the remote MR must have been
        /// registered with the matching `FLUSH_*` access.
        Flush;
        /// LOCAL_INV: invalidates the local rkey `rkey` (a type 2 memory
        /// window bound on this QP). RC only; no data.
        LocalInv;
        /// BIND_MW: binds a memory window (type 2 by this request; type 1
        /// through the library's bind verb, which posts the same request).
        /// RC and UC; no data.
        BindMw;
        /// SEND (or SEND_WITH_IMM with [`Send::imm`]) of a gather list or of
        /// inline bytes.
        Send;
        /// RDMA WRITE (or RDMA_WRITE_WITH_IMM with [`Write::imm`]) of a gather
        /// list or of inline bytes to remote memory.
        Write;
        /// RDMA READ of remote memory into a scatter list. RC only.
        Read;
        /// 64-bit compare-and-swap on remote memory. RC only.
        CompareSwap;
        /// 64-bit fetch-and-add on remote memory. RC only.
        FetchAdd;
    }

    impl<'a> AtomicWrite<'a> {
        /// Writes `value` (its bytes as they are: use `to_le_bytes` or
        /// `to_be_bytes` to fix the peer's view of a number) to
        /// `remote_addr` under `rkey`, which needs remote write access.
        pub const fn new(wr_id: u64, remote_addr: u64, rkey: u32, value: [u8; 8]) -> Self {
            let mut wr = SendWr::raw(wr_id, WrOpcode::AtomicWrite, Payload::Sge(&[]));
            wr.remote_addr = remote_addr;
            wr.rkey = rkey;
            wr.compare_add = u64::from_ne_bytes(value);
            AtomicWrite(wr)
        }
    }

    impl<'a> Flush<'a> {
        /// Flushes `length` bytes at `remote_addr` under `rkey` to
        /// `kind`'s placement, for [`FlushLevel::Range`].
        pub const fn new(
            wr_id: u64,
            remote_addr: u64,
            rkey: u32,
            length: u32,
            kind: FlushType,
        ) -> Self {
            let mut wr = SendWr::raw(wr_id, WrOpcode::Flush, Payload::Sge(&[]));
            wr.remote_addr = remote_addr;
            wr.rkey = rkey;
            wr.compare_add = length as u64;
            wr.swap = kind.bits() as u64;
            Flush(wr)
        }
        /// Flushes the whole MR `rkey` names instead of the range
        /// ([`FlushLevel::Mr`]).
        pub const fn whole_mr(mut self) -> Self {
            self.0.swap = (self.0.swap & 0xff) | ((flush_level::MR as u64) << 8);
            self
        }
    }

    impl<'a> LocalInv<'a> {
        /// Invalidates `rkey`.
        pub const fn new(wr_id: u64, rkey: u32) -> Self {
            let mut wr = SendWr::raw(wr_id, WrOpcode::LocalInv, Payload::Sge(&[]));
            wr.imm_data = rkey;
            LocalInv(wr)
        }
    }

    impl<'a> BindMw<'a> {
        /// Binds as `bind` says.
        pub const fn new(wr_id: u64, bind: MwBindWr) -> Self {
            let mut wr = SendWr::raw(wr_id, WrOpcode::BindMw, Payload::Sge(&[]));
            wr.remote_addr = bind.addr;
            wr.compare_add = bind.length;
            wr.rkey = bind.rkey;
            wr.swap = ((bind.mw_rkey as u64) << 32) | bind.mr_lkey as u64;
            wr.imm_data = bind.access.bits();
            BindMw(wr)
        }
    }

    impl<'a> Send<'a> {
        /// SEND of the gather list `sges`.
        pub const fn new(wr_id: u64, sges: &'a [Sge]) -> Self {
            Send(SendWr::raw(wr_id, WrOpcode::Send, Payload::Sge(sges)))
        }
        /// SEND of `bufs`, copied into the WQE at post time.
        pub const fn inline(wr_id: u64, bufs: &'a [IoSlice<'a>]) -> Self {
            Self::with_payload(wr_id, Payload::Inline(bufs))
        }
        /// SEND of `payload`, a gather list or inline bytes.
        pub const fn with_payload(wr_id: u64, payload: Payload<'a>) -> Self {
            Send(SendWr::raw(wr_id, WrOpcode::Send, payload))
        }
        /// Carries immediate data `imm` (host order; sent big-endian):
        /// SEND_WITH_IMM.
        pub const fn imm(mut self, imm: u32) -> Self {
            self.0.opcode = WrOpcode::SendWithImm;
            self.0.imm_data = imm;
            self
        }
        /// Invalidates `rkey` at the receiver (a type 2 memory window bound
        /// on the receiving QP) as the message arrives: SEND_WITH_INV
        /// (replaces an immediate). RC only.
        pub const fn invalidate(mut self, rkey: u32) -> Self {
            self.0.opcode = WrOpcode::SendWithInv;
            self.0.imm_data = rkey;
            self
        }
    }

    impl<'a> Write<'a> {
        /// RDMA WRITE of `sges` to `remote_addr` under `rkey`.
        pub const fn new(wr_id: u64, sges: &'a [Sge], remote_addr: u64, rkey: u32) -> Self {
            Self::with_payload(wr_id, Payload::Sge(sges), remote_addr, rkey)
        }
        /// RDMA WRITE of `bufs`, copied into the WQE at post time.
        pub const fn inline(
            wr_id: u64,
            bufs: &'a [IoSlice<'a>],
            remote_addr: u64,
            rkey: u32,
        ) -> Self {
            Self::with_payload(wr_id, Payload::Inline(bufs), remote_addr, rkey)
        }
        /// RDMA WRITE of `payload`, a gather list or inline bytes.
        pub const fn with_payload(
            wr_id: u64,
            payload: Payload<'a>,
            remote_addr: u64,
            rkey: u32,
        ) -> Self {
            let mut wr = SendWr::raw(wr_id, WrOpcode::RdmaWrite, payload);
            wr.remote_addr = remote_addr;
            wr.rkey = rkey;
            Write(wr)
        }
        /// Carries immediate data `imm` (host order; sent big-endian) and
        /// consumes a receive at the peer: RDMA_WRITE_WITH_IMM.
        pub const fn imm(mut self, imm: u32) -> Self {
            self.0.opcode = WrOpcode::RdmaWriteWithImm;
            self.0.imm_data = imm;
            self
        }
    }

    impl<'a> Read<'a> {
        /// RDMA READ from `remote_addr` under `rkey` into `sges`.
        pub const fn new(wr_id: u64, sges: &'a [Sge], remote_addr: u64, rkey: u32) -> Self {
            let mut wr = SendWr::raw(wr_id, WrOpcode::RdmaRead, Payload::Sge(sges));
            wr.remote_addr = remote_addr;
            wr.rkey = rkey;
            Read(wr)
        }
    }

    const fn atomic<'a>(
        wr_id: u64,
        opcode: WrOpcode,
        sge: &'a Sge,
        remote_addr: u64,
        rkey: u32,
    ) -> SendWr<'a> {
        let mut wr = SendWr::raw(wr_id, opcode, Payload::Sge(core::slice::from_ref(sge)));
        wr.remote_addr = remote_addr;
        wr.rkey = rkey;
        wr
    }

    impl<'a> CompareSwap<'a> {
        /// At `remote_addr` (8-byte aligned) under `rkey`: if the remote
        /// value equals `compare` it becomes `swap`; the original value is
        /// written to `sge` (exactly 8 bytes). Values in host order.
        pub const fn new(
            wr_id: u64,
            sge: &'a Sge,
            remote_addr: u64,
            rkey: u32,
            compare: u64,
            swap: u64,
        ) -> Self {
            let mut wr = atomic(wr_id, WrOpcode::AtomicCmpAndSwp, sge, remote_addr, rkey);
            wr.compare_add = compare;
            wr.swap = swap;
            CompareSwap(wr)
        }
    }

    impl<'a> FetchAdd<'a> {
        /// Adds `add` at `remote_addr` (8-byte aligned) under `rkey`; the
        /// original value is written to `sge` (exactly 8 bytes). Values in
        /// host order.
        pub const fn new(wr_id: u64, sge: &'a Sge, remote_addr: u64, rkey: u32, add: u64) -> Self {
            let mut wr = atomic(wr_id, WrOpcode::AtomicFetchAndAdd, sge, remote_addr, rkey);
            wr.compare_add = add;
            FetchAdd(wr)
        }
    }
}

#[cfg(test)]
mod lone_tests;
