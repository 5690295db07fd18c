//! Unit tests of `wr`.

use super::*;

/// [`SendWr`] keeps [`SendRequest::lone_sge`] as its payload and UD
/// destination say, through every builder that sets them, and as the
/// trait's default derives it.
#[test]
fn lone_sge_follows_payload_and_destination() {
    let a = Sge {
        addr: 0x1000,
        length: 64,
        lkey: 7,
    };
    let two = [a, a];
    let one = [a];
    let bytes = [IoSlice::new(b"hi")];
    let dest = UdDest {
        ah_num: 1,
        av: None,
        remote_qpn: 2,
        remote_qkey: 3,
        hold: None,
    };
    let cases = [
        (SendWr::send(1, &one), true),
        (SendWr::rdma_write(2, &one, 0x2000, 9), true),
        (
            SendWr::rdma_write_with_imm(3, &one, 0x2000, 9, 5).signaled(),
            true,
        ),
        (SendWr::send(4, &two), false),
        (SendWr::send(5, &[]), false),
        (SendWr::send_inline(6, &bytes), false),
        (SendWr::send(7, &one).dest(dest), false),
    ];
    for (wr, lone) in cases {
        let got = wr.lone_sge().map(|s| s as *const Sge);
        let want = lone.then(|| &one[0] as *const Sge);
        assert_eq!(got, want, "wr_id {}", wr.wr_id());
        // The trait's default, from the payload and destination.
        assert_eq!(
            lone_of(wr.payload(), &wr.ud_dest()).map(|s| s as *const Sge),
            want
        );
        assert_eq!(wr.to_send_wr().lone_sge().map(|s| s as *const Sge), want);
    }
}
