//! `rverbs::RemoteMr::from_bytes` (a peer's MR descriptor) and `at`, with
//! an offset and length as a caller would take them from the peer too:
//! `at` and `slice` are an error or a range inside the MR whose end does
//! not wrap the address space, never a panic.
#![no_main]

use rverbs::RemoteMr;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((b, rest)) = data.split_first_chunk::<20>() else {
        return;
    };
    let mr = RemoteMr::from_bytes(b);
    assert_eq!(&mr.to_bytes(), b);
    let word = |i: usize| {
        rest.get(i..i + 8)
            .map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap()))
    };
    let (offset, len) = (word(0), word(8));
    if let Ok(a) = mr.at(offset, len) {
        assert_eq!(u128::from(a), u128::from(mr.addr) + u128::from(offset));
        assert!(u128::from(offset) + u128::from(len) <= u128::from(mr.len));
        // The range's end does not wrap the address space.
        assert!(u128::from(mr.addr) + u128::from(offset) + u128::from(len) <= 1 << 64);
        let s = mr.slice(offset, len).expect("slice agrees with at");
        assert_eq!((s.addr, s.len), (a, len));
    } else {
        assert!(mr.slice(offset, len).is_err(), "slice agrees with at");
    }
});
