//! Unit tests of `mr`.

use super::*;

/// A descriptor near the top of the address space: every check the
/// docs promise refuses a range whose end would wrap.
#[test]
fn ranges_that_wrap_the_address_space_are_refused() {
    let top = RemoteMr {
        addr: u64::MAX,
        len: 4096,
        rkey: 1,
    };
    assert!(top.slice(0, 4096).is_err());
    let e = top.at(0, 2).unwrap_err();
    assert_eq!(
        e.invalid_kind(),
        Some(crate::InvalidKind::OutOfRange),
        "{e}"
    );
    assert_eq!(top.at(0, 1).unwrap(), u64::MAX, "the last byte itself");
    let sge = [Sge {
        addr: 0,
        length: 16,
        lkey: 0,
    }];
    assert!(top.rdma_write(1, &sge).is_err());
    assert!(top.rdma_read(1, &sge).is_err());
    let aligned = RemoteMr {
        addr: u64::MAX - 7,
        len: 64,
        rkey: 1,
    };
    assert!(aligned.fetch_add(1, &sge[0], 1).is_ok(), "the last 8 bytes");
    assert!(aligned.slice(0, 9).is_err());
    let ok = RemoteMr {
        addr: u64::MAX - 4095,
        len: 4096,
        rkey: 1,
    };
    assert_eq!(ok.at(4095, 1).unwrap(), u64::MAX);
    assert!(ok.slice(0, 4096).is_ok());
    assert!(ok.rdma_write(1, &sge).is_ok());
}

/// Optional flags are sent as asked; dropped and retried once only
/// when the kernel answers EINVAL to a request that had some.
#[test]
fn optional_flags_fall_back_on_einval() {
    let ro = AccessFlags::LOCAL_WRITE | AccessFlags::RELAXED_ORDERING;
    let mut seen = vec![];
    // A kernel that takes them (5.9 on).
    let (r, used) = with_optional_fallback(ro, |a| {
        seen.push(a);
        Ok(1)
    });
    assert_eq!((r, used, seen.len()), (Ok(1), ro, 1));
    // One that refuses unknown flags.
    seen.clear();
    let (r, used) = with_optional_fallback(ro, |a| {
        seen.push(a);
        if a.intersects(AccessFlags::OPTIONAL_RANGE) {
            Err(Errno::EINVAL)
        } else {
            Ok(2)
        }
    });
    assert_eq!((r, used), (Ok(2), AccessFlags::LOCAL_WRITE));
    assert_eq!(seen, [ro, AccessFlags::LOCAL_WRITE]);
    // No optional flags, or another errno: one try, the error as is.
    let (r, _) = with_optional_fallback(AccessFlags::LOCAL_WRITE, |_| Err::<(), _>(Errno::EINVAL));
    assert_eq!(r, Err(Errno::EINVAL));
    let mut n = 0;
    let (r, _) = with_optional_fallback(ro, |_| {
        n += 1;
        Err::<(), _>(Errno::ENOMEM)
    });
    assert_eq!((r, n), (Err(Errno::ENOMEM), 1));
}

/// FLUSH access needs the device's capability of the same type; the
/// capabilities are not even asked for otherwise.
#[test]
fn flush_access_needs_the_capability() {
    let none = || Caps::default();
    assert!(check_offered(AccessFlags::LOCAL_WRITE, || unreachable!()).is_ok());
    assert!(matches!(
        check_offered(AccessFlags::FLUSH_GLOBAL, none),
        Err(Error::NotOffered { .. })
    ));
    let global = || Caps {
        cap_flags_ex: device_cap_ex::FLUSH_GLOBAL,
        ..Caps::default()
    };
    assert!(check_offered(AccessFlags::FLUSH_GLOBAL, global).is_ok());
    assert!(check_offered(AccessFlags::FLUSH_PERSISTENT, global).is_err());
}

#[test]
fn iova_is_checked() {
    assert_eq!(check_iova(0x1000, 10, None).unwrap(), 0x1000);
    assert_eq!(check_iova(0x1234, 10, Some(0x5234)).unwrap(), 0x5234);
    assert!(check_iova(0x1234, 10, Some(0x5235)).is_err(), "page offset");
    assert!(check_iova(0x1000, 0x2000, Some(!0xfff)).is_err());
}

#[test]
fn remote_slices_and_requests_are_checked() {
    let r = RemoteMr {
        addr: 0x1000,
        len: 4096,
        rkey: 7,
    };
    let s = r.slice(1024, 512).unwrap();
    assert_eq!((s.addr, s.len, s.rkey), (0x1400, 512, 7));
    assert!(r.slice(4000, 97).is_err());
    assert!(r.slice(u64::MAX, 1).is_err());
    let big = RemoteMr {
        addr: u64::MAX - 1,
        len: u64::MAX,
        rkey: 1,
    };
    assert!(big.slice(8, 1).is_err(), "address overflow");
    let sge = Sge {
        addr: 0x9000,
        length: 512,
        lkey: 3,
    };
    let sges = [sge, sge];
    let wr = s.rdma_write(5, &sges[..1]).unwrap();
    assert_eq!((wr.remote_addr(), wr.rkey(), wr.wr_id()), (0x1400, 7, 5));
    assert!(s.rdma_write(5, &sges).is_err(), "1024 bytes into 512");
    assert!(s.rdma_read(6, &sges).is_err());
    let eight = Sge { length: 8, ..sge };
    assert!(r.slice(8, 8).unwrap().fetch_add(1, &eight, 1).is_ok());
    assert!(
        r.slice(4, 8).unwrap().cmp_swap(1, &eight, 0, 1).is_err(),
        "unaligned"
    );
    assert!(
        r.slice(8, 4).unwrap().fetch_add(1, &eight, 1).is_err(),
        "short"
    );
}
