//! Bytes a peer sends (an MR descriptor, a QP endpoint) decoded through
//! the public API: anything is an error or a value, never a panic.

use rverbs::{Endpoint, RemoteMr};

#[test]
fn remote_mr_at_near_the_end_of_the_address_space_is_an_error() {
    // addr = len = 2^64 - 1: offset 1 is inside the MR's length, but
    // addr + offset overflows.
    let mr = RemoteMr::from_bytes(&[0xff; 20]);
    assert!(mr.at(1, 1).is_err());
    assert!(mr.at(u64::MAX, 0).is_err());
    assert!(mr.at(u64::MAX - 1, 1).is_err());
}

#[test]
fn remote_mr_at_checks_the_range() {
    let mut b = [0u8; 20];
    b[..8].copy_from_slice(&0x1000u64.to_be_bytes());
    b[8..16].copy_from_slice(&0x100u64.to_be_bytes());
    let mr = RemoteMr::from_bytes(&b);
    assert_eq!(mr.at(0x10, 0xf0).ok(), Some(0x1010));
    assert!(mr.at(0x10, 0xf1).is_err());
    assert!(mr.at(u64::MAX, 2).is_err());
}

#[test]
fn endpoint_round_trips_any_bytes() {
    let b: [u8; Endpoint::WIRE_LEN] = std::array::from_fn(|i| (i * 37) as u8);
    assert_eq!(Endpoint::from_bytes(&b).to_bytes(), b);
    let ff = [0xff; Endpoint::WIRE_LEN];
    assert_eq!(Endpoint::from_bytes(&ff).to_bytes(), ff);
}
