//! What a context is asked about its device: `ibv_query_device` (and the
//! extended query behind `ibv_query_device_ex`), `ibv_query_port`,
//! `ibv_query_gid`, `ibv_query_gid_type`, `ibv_query_pkey`,
//! `ibv_get_pkey_index`, `_ibv_query_gid_ex` and `_ibv_query_gid_table`,
//! with the C structs they fill.

use super::*;

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvDeviceAttr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: u32,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// The part of `struct ibv_port_attr` that the exported `ibv_query_port`
/// writes: everything up to `flags`. `verbs.h`'s inline wrapper zeroes
/// the whole (newer, larger) struct and passes it here; programs built
/// against older headers pass this smaller one, so nothing past it may be
/// written.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvPortAttrCompat {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
}

/// `struct ibv_port_attr` as `verbs.h` (rdma-core 44) has it: the compat
/// part and `port_cap_flags2`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvPortAttr {
    /// Everything up to `flags`.
    pub compat: IbvPortAttrCompat,
    /// The second capability word.
    pub port_cap_flags2: u16,
}

/// `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct OdpCaps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ibv_tso_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct TsoCaps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct RssCaps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct PacketPacingCaps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct TmCaps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct CqModerationCaps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct PciAtomicCaps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

/// `struct ibv_device_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvDeviceAttrEx {
    pub orig_attr: IbvDeviceAttr,
    pub comp_mask: u32,
    pub odp_caps: OdpCaps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: TsoCaps,
    pub rss_caps: RssCaps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: PacketPacingCaps,
    pub raw_packet_caps: u32,
    pub tm_caps: TmCaps,
    pub cq_mod_caps: CqModerationCaps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: PciAtomicCaps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// The device attributes of `ctx`, as `struct ibv_device_attr`.
fn device_attr_of(ctx: &Context) -> Result<IbvDeviceAttr, c_int> {
    let a = ctx.query_device().map_err(|e| errno_of(&e))?;
    Ok(orig_attr(&a))
}

/// `struct ibv_device_attr` of an answer of the device query.
fn orig_attr(a: &rverbs::DeviceAttr) -> IbvDeviceAttr {
    let i = |v: u32| c_int::try_from(v).unwrap_or(c_int::MAX);
    let mut out = IbvDeviceAttr {
        fw_ver: [0; 64],
        node_guid: a.node_guid,
        sys_image_guid: a.sys_image_guid,
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: i(a.max_qp),
        max_qp_wr: i(a.max_qp_wr),
        device_cap_flags: a.device_cap_flags,
        max_sge: i(a.max_sge),
        max_sge_rd: i(a.max_sge_rd),
        max_cq: i(a.max_cq),
        max_cqe: i(a.max_cqe),
        max_mr: i(a.max_mr),
        max_pd: i(a.max_pd),
        max_qp_rd_atom: i(a.max_qp_rd_atom),
        max_ee_rd_atom: i(a.max_ee_rd_atom),
        max_res_rd_atom: i(a.max_res_rd_atom),
        max_qp_init_rd_atom: i(a.max_qp_init_rd_atom),
        max_ee_init_rd_atom: i(a.max_ee_init_rd_atom),
        atomic_cap: i(a.atomic_cap),
        max_ee: i(a.max_ee),
        max_rdd: i(a.max_rdd),
        max_mw: i(a.max_mw),
        max_raw_ipv6_qp: i(a.max_raw_ipv6_qp),
        max_raw_ethy_qp: i(a.max_raw_ethy_qp),
        max_mcast_grp: i(a.max_mcast_grp),
        max_mcast_qp_attach: i(a.max_mcast_qp_attach),
        max_total_mcast_qp_attach: i(a.max_total_mcast_qp_attach),
        max_ah: i(a.max_ah),
        max_fmr: i(a.max_fmr),
        max_map_per_fmr: i(a.max_map_per_fmr),
        max_srq: i(a.max_srq),
        max_srq_wr: i(a.max_srq_wr),
        max_srq_sge: i(a.max_srq_sge),
        max_pkeys: a.max_pkeys,
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
    };
    copy_str(&mut out.fw_ver, &a.fw_ver());
    out
}

/// The extended device attributes of `ctx`: the kernel's extended answer
/// where it gave one (zero past what it filled), the provider-only
/// capabilities (TSO, RSS hashing, packet pacing, PCI atomics) zero, and
/// the port count from sysfs.
fn device_attr_ex(ctx: &Context) -> Result<IbvDeviceAttrEx, c_int> {
    let a = ctx.query_device().map_err(|e| errno_of(&e))?;
    let orig_attr = orig_attr(&a);
    let ex = a.ex().copied().unwrap_or_default();
    let ports = std::fs::read_dir(ctx.device().sysfs_dir().join("ports"))
        .map(|d| d.count())
        .unwrap_or(0);
    Ok(IbvDeviceAttrEx {
        orig_attr,
        comp_mask: 0,
        odp_caps: OdpCaps {
            general_caps: ex.odp_caps.general_caps,
            rc_odp_caps: ex.odp_caps.rc_odp_caps,
            uc_odp_caps: ex.odp_caps.uc_odp_caps,
            ud_odp_caps: ex.odp_caps.ud_odp_caps,
        },
        completion_timestamp_mask: ex.timestamp_mask,
        hca_core_clock: ex.hca_core_clock,
        device_cap_flags_ex: ex.device_cap_flags_ex,
        tso_caps: TsoCaps::default(),
        rss_caps: RssCaps {
            supported_qpts: ex.rss_caps.supported_qpts,
            max_rwq_indirection_tables: ex.rss_caps.max_rwq_indirection_tables,
            max_rwq_indirection_table_size: ex.rss_caps.max_rwq_indirection_table_size,
            rx_hash_fields_mask: 0,
            rx_hash_function: 0,
        },
        max_wq_type_rq: ex.max_wq_type_rq,
        packet_pacing_caps: PacketPacingCaps::default(),
        raw_packet_caps: ex.raw_packet_caps,
        tm_caps: TmCaps {
            max_rndv_hdr_size: ex.tm_caps.max_rndv_hdr_size,
            max_num_tags: ex.tm_caps.max_num_tags,
            flags: ex.tm_caps.flags,
            max_ops: ex.tm_caps.max_ops,
            max_sge: ex.tm_caps.max_sge,
        },
        cq_mod_caps: CqModerationCaps {
            max_cq_count: ex.cq_moderation_caps.max_cq_moderation_count,
            max_cq_period: ex.cq_moderation_caps.max_cq_moderation_period,
        },
        max_dm_size: ex.max_dm_size,
        pci_atomic_caps: PciAtomicCaps::default(),
        xrc_odp_caps: ex.xrc_odp_caps,
        phys_port_cnt_ex: if ports > 0 {
            u32::try_from(ports).unwrap_or(u32::MAX)
        } else {
            u32::from(orig_attr.phys_port_cnt)
        },
    })
}

/// The attributes of `port`, as `struct ibv_port_attr`.
fn port_attr_of(ctx: &Context, port: u8) -> Result<IbvPortAttr, c_int> {
    let p = ctx.query_port(port).map_err(|e| errno_of(&e))?;
    Ok(IbvPortAttr {
        compat: IbvPortAttrCompat {
            state: c_int::from(p.state),
            max_mtu: c_int::from(p.max_mtu),
            active_mtu: c_int::from(p.active_mtu),
            gid_tbl_len: c_int::try_from(p.gid_tbl_len).unwrap_or(c_int::MAX),
            port_cap_flags: p.port_cap_flags,
            max_msg_sz: p.max_msg_sz,
            bad_pkey_cntr: p.bad_pkey_cntr,
            qkey_viol_cntr: p.qkey_viol_cntr,
            pkey_tbl_len: p.pkey_tbl_len,
            lid: p.lid,
            sm_lid: p.sm_lid,
            lmc: p.lmc,
            max_vl_num: p.max_vl_num,
            sm_sl: p.sm_sl,
            subnet_timeout: p.subnet_timeout,
            init_type_reply: p.init_type_reply,
            active_width: p.active_width,
            active_speed: p.active_speed,
            phys_state: p.phys_state,
            link_layer: p.link_layer,
            flags: p.flags,
        },
        // 0 where the kernel lacks the ioctl, as libibverbs leaves it.
        port_cap_flags2: p.port_cap_flags2(),
    })
}

/// Writes `value` over the first `len` bytes at `dst` (all of it if `len`
/// is larger, zeroing the rest of `len`).
///
/// # Safety
/// `dst` points to `len` writable bytes.
unsafe fn write_sized<T: Copy>(dst: *mut u8, len: usize, value: &T) {
    let n = len.min(size_of::<T>());
    // SAFETY: the caller passes `len` writable bytes at `dst`; `value` is
    // a live T of size_of::<T>() >= n bytes; they do not overlap (value is
    // ours). Padding bytes are copied as bytes, never read as values.
    unsafe {
        ptr::write_bytes(dst, 0, len);
        ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), dst, n);
    }
}

/// A value of `T` with every byte zero, padding included, so that what
/// [`write_sized`] copies holds no stale bytes.
fn zeroed<T: Copy>(v: T) -> T {
    let mut out = std::mem::MaybeUninit::<T>::zeroed();
    // SAFETY: `out` is valid for a write of T; writing a T over the
    // zeroed bytes keeps padding zero in practice, and `v` is a valid T.
    unsafe {
        out.as_mut_ptr().write(v);
        out.assume_init()
    }
}

/// `ibv_query_device`: 0, or the errno (as libibverbs returns it).
///
/// # Safety
/// `device_attr` points to a writable `struct ibv_device_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    context: *mut IbvContext,
    device_attr: *mut IbvDeviceAttr,
) -> c_int {
    errno_verb(context, !device_attr.is_null(), |ctx| {
        let a = zeroed(device_attr_of(ctx)?);
        // SAFETY: the caller passes a writable ibv_device_attr (non-null).
        unsafe { write_sized(device_attr.cast(), size_of::<IbvDeviceAttr>(), &a) };
        Ok(())
    })
}

/// `verbs_context.query_device_ex`, which `verbs.h`'s inline
/// `ibv_query_device_ex` calls: fills `attr_size` bytes of `attr`; 0, or
/// the errno (`EINVAL` for a non-zero input `comp_mask` or an `attr_size`
/// below `struct ibv_device_attr`).
///
/// # Safety
/// `input` is null or points to a `struct ibv_query_device_ex_input`;
/// `attr` points to `attr_size` writable bytes.
pub(super) unsafe extern "C" fn query_device_ex(
    context: *mut IbvContext,
    input: *const QueryDeviceExInput,
    attr: *mut IbvDeviceAttrEx,
    attr_size: usize,
) -> c_int {
    // SAFETY: the caller passes null or a readable input struct.
    let input_ok = input.is_null() || unsafe { (*input).comp_mask } == 0;
    let args_ok = input_ok && !attr.is_null() && attr_size >= size_of::<IbvDeviceAttr>();
    errno_verb(context, args_ok, |ctx| {
        let a = zeroed(device_attr_ex(ctx)?);
        // SAFETY: the caller passes `attr_size` writable bytes (non-null).
        unsafe { write_sized(attr.cast(), attr_size, &a) };
        Ok(())
    })
}

/// `ibv_query_port` (the exported function `verbs.h`'s inline wrapper
/// calls for a legacy context): fills the fields up to `flags`; 0, or the
/// errno.
///
/// # Safety
/// `port_attr` points to a writable struct of at least
/// `size_of::<IbvPortAttrCompat>()` bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    context: *mut IbvContext,
    port_num: u8,
    port_attr: *mut IbvPortAttrCompat,
) -> c_int {
    errno_verb(context, !port_attr.is_null(), |ctx| {
        let p = zeroed(port_attr_of(ctx, port_num)?.compat);
        let len = size_of::<IbvPortAttrCompat>();
        // SAFETY: the caller passes a writable struct this large (non-null).
        unsafe { write_sized(port_attr.cast(), len, &p) };
        Ok(())
    })
}

/// `verbs_context.query_port`, which `verbs.h`'s inline `ibv_query_port`
/// calls for an extended context: fills `port_attr_len` bytes; 0, or the
/// errno.
///
/// # Safety
/// `port_attr` points to `port_attr_len` writable bytes.
pub(super) unsafe extern "C" fn query_port_ex(
    context: *mut IbvContext,
    port_num: u8,
    port_attr: *mut IbvPortAttr,
    port_attr_len: usize,
) -> c_int {
    errno_verb(context, !port_attr.is_null(), |ctx| {
        let p = zeroed(port_attr_of(ctx, port_num)?);
        // SAFETY: the caller passes `port_attr_len` writable bytes (non-null).
        unsafe { write_sized(port_attr.cast(), port_attr_len, &p) };
        Ok(())
    })
}

/// What a GID slot holds, libibverbs' way: a missing entry in a slot that
/// exists is the zero GID of type IB/RoCE v1; a slot past the table or a
/// port the device lacks is an error.
fn gid_slot(ctx: &Context, port: u8, index: c_int) -> Result<Option<rverbs::GidEntry>, c_int> {
    let index = u32::try_from(index).map_err(|_| libc::EINVAL)?;
    let len = ctx.query_port(port).map_err(|e| errno_of(&e))?.gid_tbl_len;
    if index >= len {
        return Err(libc::EINVAL);
    }
    match ctx.query_gid_entry(port, index) {
        Ok(e) => Ok(Some(e)),
        Err(e) if e.invalid_kind() == Some(rverbs::InvalidKind::NotPresent) => Ok(None),
        Err(e) => Err(errno_of(&e)),
    }
}

/// `ibv_query_gid`: the GID at `index` of `port` (zero for an empty
/// slot); 0, or -1 with errno.
///
/// # Safety
/// `gid` points to 16 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut IbvContext,
    port_num: u8,
    index: c_int,
    gid: *mut [u8; 16],
) -> c_int {
    minus_one_verb(context, !gid.is_null(), |ctx| {
        let raw = gid_slot(ctx, port_num, index)?.map_or([0; 16], |e| e.gid.0);
        // SAFETY: the caller passes 16 writable bytes (non-null).
        unsafe { ptr::write_unaligned(gid, raw) };
        Ok(0)
    })
}

/// `ibv_query_gid_type` (rdma-core's private symbol that `ibv_devinfo`
/// imports): 0 (IB or RoCE v1, and empty slots) or 1 (RoCE v2) into
/// `type_`; 0, or -1 with errno.
///
/// # Safety
/// `type_` points to a writable `int`-sized enum.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut IbvContext,
    port_num: u8,
    index: u32,
    type_: *mut c_int,
) -> c_int {
    minus_one_verb(context, !type_.is_null(), |ctx| {
        let index = c_int::try_from(index).unwrap_or(c_int::MAX);
        let e = gid_slot(ctx, port_num, index)?;
        let v2 = e.is_some_and(|e| e.gid_type == rverbs::GidType::RoceV2);
        // SAFETY: the caller passes a writable int (non-null).
        unsafe { ptr::write_unaligned(type_, c_int::from(v2)) };
        Ok(0)
    })
}

/// `ibv_query_pkey`: the P_Key at `index` of `port` in network byte
/// order; 0, or -1 with errno.
///
/// # Safety
/// `pkey` points to a writable `__be16`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut IbvContext,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    minus_one_verb(context, !pkey.is_null(), |ctx| {
        let v = crate::sysfs::pkey(&ctx.device().sysfs_dir(), port_num, index)?;
        // SAFETY: the caller passes a writable __be16 (non-null).
        unsafe { ptr::write_unaligned(pkey, v.to_be()) };
        Ok(0)
    })
}

/// `ibv_get_pkey_index`: the index of `pkey` (network order) in `port`'s
/// table, or -1 with errno if it is not there.
///
/// # Safety
/// None beyond passing any pointer: it is checked before use.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut IbvContext,
    port_num: u8,
    pkey: u16,
) -> c_int {
    minus_one_verb(context, true, |ctx| {
        let dir = ctx.device().sysfs_dir();
        let mut i: c_int = 0;
        loop {
            if crate::sysfs::pkey(&dir, port_num, i)?.to_be() == pkey {
                return Ok(i);
            }
            i = i.checked_add(1).ok_or(libc::ENOENT)?;
        }
    })
}

/// `struct ibv_gid_entry` (the kernel's `struct ib_uverbs_gid_entry`;
/// 8-aligned by its `union ibv_gid`).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvGidEntry {
    pub gid: [u8; 16],
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ibv_gid_type`: 0 IB, 1 RoCE v1, 2 RoCE v2.
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

fn gid_entry_c(e: &rverbs::GidEntry) -> IbvGidEntry {
    IbvGidEntry {
        gid: e.gid.0,
        gid_index: e.index,
        port_num: e.port,
        gid_type: match e.gid_type {
            rverbs::GidType::Ib => 0,
            rverbs::GidType::RoceV1 => 1,
            rverbs::GidType::RoceV2 => 2,
            rverbs::GidType::Other(v) => v,
        },
        ndev_ifindex: e.netdev_ifindex,
    }
}

/// `_ibv_query_gid_ex` (behind `verbs.h`'s inline `ibv_query_gid_ex`):
/// the entry at `gid_index` of `port_num` into `entry_size` bytes; 0, or
/// the errno (`ENODATA` for an empty slot, `EINVAL` for flags, a short
/// entry or a slot past the table).
///
/// # Safety
/// `entry` points to `entry_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut IbvContext,
    port_num: u32,
    gid_index: u32,
    entry: *mut IbvGidEntry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    let args_ok = flags == 0 && !entry.is_null() && entry_size >= size_of::<IbvGidEntry>();
    errno_verb(context, args_ok, |ctx| {
        let port = u8::try_from(port_num).map_err(|_| libc::EINVAL)?;
        let index = c_int::try_from(gid_index).map_err(|_| libc::EINVAL)?;
        let e = gid_slot(ctx, port, index)?.ok_or(libc::ENODATA)?;
        // SAFETY: the caller passes `entry_size` writable bytes (non-null).
        unsafe { write_sized(entry.cast(), entry_size, &gid_entry_c(&e)) };
        Ok(())
    })
}

/// `_ibv_query_gid_table` (behind `ibv_query_gid_table`): every valid GID
/// of every port into `entries` (`max_entries` of `entry_size` bytes);
/// the count, or a negative errno (`-EINVAL` if they do not fit).
///
/// # Safety
/// `entries` points to `max_entries * entry_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut IbvContext,
    entries: *mut IbvGidEntry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    guard(-(libc::EIO as isize), || {
        let einval = -(libc::EINVAL as isize);
        let Some(rec) = context_rec(context) else {
            return einval;
        };
        if flags != 0 || entries.is_null() || entry_size < size_of::<IbvGidEntry>() {
            return einval;
        }
        let table = match rec.ctx.query_gid_table() {
            Ok(t) => t,
            Err(e) => return -(errno_of(&e) as isize),
        };
        if table.len() > max_entries || max_entries.checked_mul(entry_size).is_none() {
            return einval;
        }
        for (i, e) in table.iter().enumerate() {
            // SAFETY: i < table.len() <= max_entries, so entry i lies
            // within the caller's max_entries * entry_size bytes (the
            // product does not overflow, checked above).
            unsafe {
                let dst = entries.cast::<u8>().add(i * entry_size);
                write_sized(dst, entry_size, &gid_entry_c(e));
            }
        }
        isize::try_from(table.len()).unwrap_or(isize::MAX)
    })
}
