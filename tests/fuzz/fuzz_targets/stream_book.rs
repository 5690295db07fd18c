//! The rsockets receive bookkeeping (`rverbs_cm::stream::book::RecvBook`)
//! driven by a hostile peer and reader: each 5-byte step is a data message
//! of any length, a read of any size, or a grant. A message the grants or
//! credits did not allow is refused without a change; every span handed
//! out for copying lies inside the buffer and the reader's slice, and
//! every byte stays unread, granted or free.
#![no_main]

use rverbs_cm::stream::book::RecvBook;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((head, steps)) = data.split_first_chunk::<3>() else {
        return;
    };
    // Buffers from 2 bytes to 128 KiB (even), queues from 1 to 64.
    let rbuf = ((u32::from(u16::from_le_bytes([head[0], head[1]])) % 65536) + 1) * 2;
    let rq = u32::from(head[2] % 64) + 1;
    let mut b = RecvBook::new(rbuf, rq);
    for step in steps.chunks_exact(5) {
        let arg = u32::from_le_bytes([step[1], step[2], step[3], step[4]]);
        match step[0] % 3 {
            0 => {
                let before = (b.unread(), b.has_data());
                if b.on_data(arg % (2 * rbuf + 1)).is_err() {
                    assert_eq!((b.unread(), b.has_data()), before, "a refusal changes nothing");
                }
            }
            1 => {
                let want = (arg % (2 * rbuf + 1)) as usize;
                let unread = b.unread();
                let mut total = 0usize;
                let n = b.consume(want, |at, to, len| {
                    assert!(u64::from(at) + u64::from(len) <= u64::from(rbuf), "span past the buffer");
                    assert!(to + len as usize <= want, "span past the reader's slice");
                    assert_eq!(to, total, "spans in order");
                    total += len as usize;
                });
                assert_eq!(n, total);
                // A read takes all it asked for, or all there was.
                assert_eq!(n as u64, u64::from(unread).min(want as u64));
            }
            _ => {
                if b.credits_due() {
                    let g = b.grant();
                    if let Some((at, len)) = g.buf {
                        assert!(u64::from(at) + u64::from(len) <= u64::from(rbuf));
                    }
                }
            }
        }
        assert!(b.is_consistent());
    }
});
