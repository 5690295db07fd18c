//! Completion queues: CREATE_CQ (legacy and extended), RESIZE_CQ,
//! REQ_NOTIFY_CQ, DESTROY_CQ.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `struct ib_uverbs_create_cq`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateCq {
    /// Response pointer.
    pub response: u64,
    /// Opaque value returned in events.
    pub user_handle: u64,
    /// Requested number of entries.
    pub cqe: u32,
    /// Completion vector.
    pub comp_vector: u32,
    /// Completion channel fd, or -1.
    pub comp_channel: i32,
    /// Must be zero.
    pub reserved: u32,
}

/// `struct ib_uverbs_ex_create_cq`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct ExCreateCq {
    pub user_handle: u64,
    pub cqe: u32,
    pub comp_vector: u32,
    pub comp_channel: i32,
    pub comp_mask: u32,
    /// `IB_UVERBS_CQ_FLAGS_*`.
    pub flags: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_create_cq_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateCqResp {
    /// Kernel handle.
    pub cq_handle: u32,
    /// Actual number of entries.
    pub cqe: u32,
}

/// `struct ib_uverbs_ex_create_cq_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct ExCreateCqResp {
    pub base: CreateCqResp,
    pub comp_mask: u32,
    pub response_length: u32,
}

/// `struct ib_uverbs_resize_cq`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct ResizeCq {
    pub response: u64,
    pub cq_handle: u32,
    pub cqe: u32,
}

/// `struct ib_uverbs_resize_cq_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct ResizeCqResp {
    pub cqe: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_req_notify_cq`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ReqNotifyCq {
    /// The CQ to arm.
    pub cq_handle: u32,
    /// Non-zero: only solicited completions raise an event.
    pub solicited_only: u32,
}

/// `struct ib_uverbs_destroy_cq`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct DestroyCq {
    pub response: u64,
    pub cq_handle: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_destroy_cq_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct DestroyCqResp {
    pub comp_events_reported: u32,
    pub async_events_reported: u32,
}

/// `struct ib_uverbs_comp_event_desc`: what a completion channel fd yields.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CompEventDesc {
    /// The `user_handle` of the CQ that fired.
    pub cq_handle: u64,
}

/// `struct ib_uverbs_async_event_desc`: what the async event fd yields.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AsyncEventDesc {
    /// The `user_handle` of the object, or the port number.
    pub element: u64,
    /// `enum ib_event_type`.
    pub event_type: u32,
    /// Zero.
    pub reserved: u32,
}

/// `struct ib_uverbs_create_comp_channel`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateCompChannel {
    /// Response pointer.
    pub response: u64,
}

/// `struct ib_uverbs_create_comp_channel_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateCompChannelResp {
    /// The new channel's file descriptor.
    pub fd: u32,
}
