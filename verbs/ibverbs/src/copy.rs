//! libibverbs' copy helpers, which librdmacm calls to turn the rdma_cm's
//! kernel answers into verbs structs: `ibv_copy_qp_attr_from_kern`,
//! `ibv_copy_ah_attr_from_kern` and `ibv_copy_path_rec_from_kern`, and
//! the other way `ibv_copy_path_rec_to_kern`. This
//! module owns those C structs (checked against `verbs.h`, `sa.h` and the
//! kernel's uapi by `tests/layout.rs`) and the `unsafe` of reading and
//! writing them; the conversions themselves are safe functions.

use std::ffi::c_int;

use rverbs_abi::ah::AhAttr as KernAhAttr;
use rverbs_abi::qp::QpAttr as KernQpAttr;
use rverbs_abi::ucma::UserPathRec as KernPathRec;

/// `struct ibv_global_route` (8-aligned: `union ibv_gid` holds two
/// `__be64`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct IbvGlobalRoute {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct IbvAhAttr {
    pub grh: IbvGlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct IbvQpAttr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: IbvQpCap,
    pub ah_attr: IbvAhAttr,
    pub alt_ah_attr: IbvAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`; 8-aligned by its
/// `union ibv_gid`s).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct IbvSaPathRec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// The kernel's address vector as `struct ibv_ah_attr`.
pub fn ah_attr(src: &KernAhAttr) -> IbvAhAttr {
    IbvAhAttr {
        grh: IbvGlobalRoute {
            dgid: src.grh.dgid,
            flow_label: src.grh.flow_label,
            sgid_index: src.grh.sgid_index,
            hop_limit: src.grh.hop_limit,
            traffic_class: src.grh.traffic_class,
        },
        dlid: src.dlid,
        sl: src.sl,
        src_path_bits: src.src_path_bits,
        static_rate: src.static_rate,
        is_global: src.is_global,
        port_num: src.port_num,
    }
}

/// The kernel's QP attributes into `dst`, every field but `rate_limit`
/// (which the kernel's struct does not carry), as libibverbs copies them.
pub fn qp_attr(dst: &mut IbvQpAttr, src: &KernQpAttr) {
    let e = |v: u32| c_int::try_from(v).unwrap_or(c_int::MAX);
    dst.qp_state = e(src.qp_state);
    dst.cur_qp_state = e(src.cur_qp_state);
    dst.path_mtu = e(src.path_mtu);
    dst.path_mig_state = e(src.path_mig_state);
    dst.qkey = src.qkey;
    dst.rq_psn = src.rq_psn;
    dst.sq_psn = src.sq_psn;
    dst.dest_qp_num = src.dest_qp_num;
    dst.qp_access_flags = src.qp_access_flags;
    dst.cap = IbvQpCap {
        max_send_wr: src.max_send_wr,
        max_recv_wr: src.max_recv_wr,
        max_send_sge: src.max_send_sge,
        max_recv_sge: src.max_recv_sge,
        max_inline_data: src.max_inline_data,
    };
    dst.ah_attr = ah_attr(&src.ah_attr);
    dst.alt_ah_attr = ah_attr(&src.alt_ah_attr);
    dst.pkey_index = src.pkey_index;
    dst.alt_pkey_index = src.alt_pkey_index;
    dst.en_sqd_async_notify = src.en_sqd_async_notify;
    dst.sq_draining = src.sq_draining;
    dst.max_rd_atomic = src.max_rd_atomic;
    dst.max_dest_rd_atomic = src.max_dest_rd_atomic;
    dst.min_rnr_timer = src.min_rnr_timer;
    dst.port_num = src.port_num;
    dst.timeout = src.timeout;
    dst.retry_cnt = src.retry_cnt;
    dst.rnr_retry = src.rnr_retry;
    dst.alt_port_num = src.alt_port_num;
    dst.alt_timeout = src.alt_timeout;
}

/// The kernel's path record (`struct ib_user_path_rec`, rverbs-abi's
/// `ucma::UserPathRec`) as `struct ibv_sa_path_rec`: network-order fields
/// stay in network order (`__be16`/`__be32` on both sides); the kernel's
/// `__u32`s become the C struct's `int`s and MTU byte as a C assignment
/// converts them, as libibverbs copies them (a value above `INT_MAX`
/// wraps; the MTU, an `enum ibv_mtu` value, keeps its low byte).
pub fn path_rec(src: &KernPathRec) -> IbvSaPathRec {
    IbvSaPathRec {
        dgid: src.dgid,
        sgid: src.sgid,
        dlid: src.dlid.get().to_be(),
        slid: src.slid.get().to_be(),
        raw_traffic: c_int::from_ne_bytes(src.raw_traffic.to_ne_bytes()),
        flow_label: src.flow_label.get().to_be(),
        hop_limit: src.hop_limit,
        traffic_class: src.traffic_class,
        reversible: c_int::from_ne_bytes(src.reversible.to_ne_bytes()),
        numb_path: src.numb_path,
        pkey: src.pkey.get().to_be(),
        sl: src.sl,
        mtu_selector: src.mtu_selector,
        mtu: src.mtu.to_le_bytes()[0],
        rate_selector: src.rate_selector,
        rate: src.rate,
        packet_life_time_selector: src.packet_life_time_selector,
        packet_life_time: src.packet_life_time,
        preference: src.preference,
    }
}

/// A `struct ibv_sa_path_rec` as the kernel's `struct ib_user_path_rec`
/// (the inverse of [`path_rec`]): network-order fields copied as they
/// are; the C `int`s (`raw_traffic`, `reversible`) and the MTU byte
/// converted to the kernel's `__u32`s as a C assignment converts them
/// (a negative `int` wraps).
pub fn kern_path_rec(src: &IbvSaPathRec) -> KernPathRec {
    use zerocopy::byteorder::big_endian::{U16, U32};
    let be16 = |v: u16| U16::from_bytes(v.to_ne_bytes());
    KernPathRec {
        dgid: src.dgid,
        sgid: src.sgid,
        dlid: be16(src.dlid),
        slid: be16(src.slid),
        raw_traffic: u32::from_ne_bytes(src.raw_traffic.to_ne_bytes()),
        flow_label: U32::from_bytes(src.flow_label.to_ne_bytes()),
        reversible: u32::from_ne_bytes(src.reversible.to_ne_bytes()),
        mtu: u32::from(src.mtu),
        pkey: be16(src.pkey),
        hop_limit: src.hop_limit,
        traffic_class: src.traffic_class,
        numb_path: src.numb_path,
        sl: src.sl,
        mtu_selector: src.mtu_selector,
        rate_selector: src.rate_selector,
        rate: src.rate,
        packet_life_time_selector: src.packet_life_time_selector,
        packet_life_time: src.packet_life_time,
        preference: src.preference,
    }
}

/// `ibv_copy_qp_attr_from_kern`.
///
/// # Safety
/// `dst` points to a writable `struct ibv_qp_attr` and `src` to a
/// readable `struct ib_uverbs_qp_attr`, or either is null (then nothing
/// is done).
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_qp_attr_from_kern(dst: *mut IbvQpAttr, src: *const KernQpAttr) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller passes a readable ib_uverbs_qp_attr and a
    // writable ibv_qp_attr (non-null); unaligned accesses ask nothing of
    // their alignment; every bit pattern is a valid value of both
    // (integers only).
    unsafe {
        let s = src.read_unaligned();
        let mut d = dst.read_unaligned();
        qp_attr(&mut d, &s);
        dst.write_unaligned(d);
    }
}

/// `ibv_copy_ah_attr_from_kern`.
///
/// # Safety
/// `dst` points to a writable `struct ibv_ah_attr` and `src` to a
/// readable `struct ib_uverbs_ah_attr`, or either is null.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_ah_attr_from_kern(dst: *mut IbvAhAttr, src: *const KernAhAttr) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: as in ibv_copy_qp_attr_from_kern: valid pointers from the
    // caller, unaligned accesses, integer-only structs.
    unsafe { dst.write_unaligned(ah_attr(&src.read_unaligned())) }
}

/// `ibv_copy_path_rec_from_kern`.
///
/// # Safety
/// `dst` points to a writable `struct ibv_sa_path_rec` and `src` to a
/// readable `struct ib_user_path_rec`, or either is null.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_from_kern(
    dst: *mut IbvSaPathRec,
    src: *const KernPathRec,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: as in ibv_copy_qp_attr_from_kern.
    unsafe { dst.write_unaligned(path_rec(&src.read_unaligned())) }
}

/// `ibv_copy_path_rec_to_kern` (`IBVERBS_1.0`, which librdmacm calls to
/// hand the rdma_cm a path record): `src` into the kernel's struct.
///
/// # Safety
/// `dst` points to a writable `struct ib_user_path_rec` and `src` to a
/// readable `struct ibv_sa_path_rec`, or either is null (then nothing is
/// done).
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_to_kern(
    dst: *mut KernPathRec,
    src: *const IbvSaPathRec,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    crate::ffi::guard((), || {
        // SAFETY: as in ibv_copy_qp_attr_from_kern: valid pointers from
        // the caller, unaligned accesses, integer-only structs.
        unsafe { dst.write_unaligned(kern_path_rec(&src.read_unaligned())) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_attributes_are_copied_field_by_field_and_rate_limit_kept() {
        let mut k = KernQpAttr {
            qp_state: 3,
            path_mtu: 5,
            qkey: 0x1111_2222,
            dest_qp_num: 0x12,
            max_send_wr: 64,
            timeout: 14,
            rnr_retry: 7,
            ..Default::default()
        };
        k.ah_attr.grh.dgid[15] = 9;
        k.ah_attr.grh.sgid_index = 1;
        k.ah_attr.is_global = 1;
        k.alt_ah_attr.port_num = 2;
        let mut d = IbvQpAttr {
            rate_limit: 77,
            ..Default::default()
        };
        // SAFETY: both point to live values of the right types.
        unsafe { ibv_copy_qp_attr_from_kern(&mut d, &k) };
        assert_eq!(
            (d.qp_state, d.path_mtu, d.qkey, d.dest_qp_num),
            (3, 5, 0x1111_2222, 0x12)
        );
        assert_eq!((d.cap.max_send_wr, d.timeout, d.rnr_retry), (64, 14, 7));
        assert_eq!(d.ah_attr.grh.dgid[15], 9);
        assert_eq!((d.ah_attr.grh.sgid_index, d.ah_attr.is_global), (1, 1));
        assert_eq!(d.alt_ah_attr.port_num, 2);
        assert_eq!(d.rate_limit, 77);
        // Null pointers do nothing.
        // SAFETY: null is allowed.
        unsafe { ibv_copy_qp_attr_from_kern(std::ptr::null_mut(), &k) };
    }

    #[test]
    fn path_records_keep_network_order_fields_in_network_order() {
        use zerocopy::byteorder::big_endian::{U16, U32};
        let k = KernPathRec {
            dlid: U16::new(0x1234),
            pkey: U16::new(0xffff),
            flow_label: U32::new(0x0001_2345),
            mtu: 3,
            reversible: 1,
            ..Default::default()
        };
        let p = path_rec(&k);
        // The C fields hold the bytes as they were on the wire.
        assert_eq!(p.dlid.to_ne_bytes(), [0x12, 0x34]);
        assert_eq!(p.flow_label.to_ne_bytes(), [0, 1, 0x23, 0x45]);
        assert_eq!((p.pkey, p.mtu, p.reversible), (0xffff, 3, 1));
    }

    #[test]
    fn path_records_go_to_the_kernel_and_back_unchanged() {
        let mut p = IbvSaPathRec {
            dlid: u16::from_ne_bytes([0x12, 0x34]),
            slid: 7,
            raw_traffic: -1,
            flow_label: u32::from_ne_bytes([0, 1, 0x23, 0x45]),
            hop_limit: 64,
            traffic_class: 3,
            reversible: 1,
            numb_path: 1,
            pkey: 0xffff,
            sl: 2,
            mtu_selector: 2,
            mtu: 5,
            rate_selector: 2,
            rate: 16,
            packet_life_time_selector: 2,
            packet_life_time: 18,
            preference: 1,
            ..Default::default()
        };
        p.dgid[0] = 0xfe;
        p.sgid[15] = 9;
        let mut k = KernPathRec::default();
        // SAFETY: both point to live values of the right types.
        unsafe { ibv_copy_path_rec_to_kern(&mut k, &p) };
        assert_eq!(k.dlid.get(), 0x1234, "network order kept");
        assert_eq!(k.flow_label.get(), 0x0001_2345);
        assert_eq!((k.raw_traffic, k.reversible, k.mtu), (u32::MAX, 1, 5));
        assert_eq!(
            (k.dgid[0], k.sgid[15], k.rate, k.preference),
            (0xfe, 9, 16, 1)
        );
        let mut back = IbvSaPathRec::default();
        // SAFETY: as above.
        unsafe { ibv_copy_path_rec_from_kern(&mut back, &k) };
        // Every field round-trips, the negative int too (C's conversions).
        assert_eq!(back, p);
        let big = KernPathRec { mtu: 0x105, ..k };
        assert_eq!(path_rec(&big).mtu, 5, "the low byte, as C truncates");
    }
}
