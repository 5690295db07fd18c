//! `netlink::devices()` against this host's kernel.
//!
//! The host has no RDMA devices and may lack RDMA netlink altogether, so
//! this only checks that the call answers cleanly: an empty list, or an
//! errno meaning "no RDMA here". The real check (rxe0 listed with
//! `driver_id == RDMA_DRIVER_RXE`) runs in the soft-RoCE VM, e.g.
//! `cargo build -p rverbs-abi --example nldev &&
//! cargo xtask vm -- target/debug/examples/nldev --expect-rxe`.

use rverbs_abi::Errno;
use rverbs_netlink::{self as netlink, NlSocket};

/// Errnos that mean the kernel has no (usable) RDMA netlink here.
const NO_RDMA: &[Errno] = &[
    Errno::EPROTONOSUPPORT,
    Errno::EAFNOSUPPORT,
    Errno::ENOENT,
    Errno::EOPNOTSUPP,
    Errno::EACCES,
    Errno::EPERM,
];

#[test]
fn devices_answers_cleanly() {
    match netlink::devices() {
        Ok(devs) => {
            for d in &devs {
                assert!(!d.name.is_empty(), "{d:?}");
            }
            // With devices present (not expected on the host) each has a
            // distinct index.
            let mut idx: Vec<u32> = devs.iter().map(|d| d.index).collect();
            idx.sort_unstable();
            idx.dedup();
            assert_eq!(idx.len(), devs.len(), "{devs:?}");
            eprintln!("devices(): {devs:?}");
        }
        Err(e) => {
            assert!(NO_RDMA.contains(&e), "devices() failed with {e:?}");
            eprintln!("devices(): no RDMA netlink here ({e:?})");
        }
    }
}

#[test]
fn socket_dumps_twice() {
    // The socket survives a finished dump: sequence numbers move on and
    // a second dump on the same socket works.
    let mut sock = match NlSocket::open() {
        Ok(s) => s,
        Err(e) => {
            assert!(NO_RDMA.contains(&e), "open failed with {e:?}");
            return;
        }
    };
    let mut counts = Vec::new();
    for _ in 0..2 {
        let mut n = 0;
        sock.dump(netlink::nldev_type(netlink::cmd::GET), &[], |attrs| {
            netlink::Attrs::new(attrs).try_for_each(|a| a.map(drop))?;
            n += 1;
            Ok(())
        })
        .expect("RDMA_NLDEV_CMD_GET dump");
        counts.push(n);
    }
    assert_eq!(counts[0], counts[1]);
}

#[test]
fn chardev_of_missing_device_is_an_errno() {
    let mut sock = match NlSocket::open() {
        Ok(s) => s,
        Err(e) => {
            assert!(NO_RDMA.contains(&e), "open failed with {e:?}");
            return;
        }
    };
    // No device has this index: the kernel answers with an error (EINVAL),
    // not a hang or a panic; the socket stays usable afterwards.
    let r = netlink::chardev(&mut sock, u32::MAX - 1, "uverbs");
    assert!(r.is_err(), "{r:?}");
    sock.dump(netlink::nldev_type(netlink::cmd::GET), &[], |_| Ok(()))
        .expect("dump after a failed request");
}
