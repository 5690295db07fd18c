//! rsockets' wire formats from a peer (`rverbs::stream::wire`): the
//! connection data of a request or an accept (`ConnData::decode`), the
//! immediate of every message (`Msg::from_imm`) and a buffer descriptor
//! the peer wrote into the target list (`RsSge::from_bytes`). Each is a
//! value or an error, never a panic; what decodes encodes back to the same
//! bytes.
#![no_main]

use rverbs::stream::wire::{ConnData, Msg, RsSge, CONN_DATA_LEN, SGE_LEN, SGL_SIZE};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(d) = ConnData::decode(data) {
        assert!((1..=SGL_SIZE).contains(&d.target_sgl.length));
        let again = d.encode();
        // Byte for byte but the reserved bytes, which are not kept.
        assert_eq!(&again[..4], &data[..4]);
        assert_eq!(&again[7..], &data[7..CONN_DATA_LEN]);
        assert_eq!(ConnData::decode(&again), Ok(d));
    }
    if let Some(b) = data.first_chunk::<4>() {
        let imm = u32::from_le_bytes(*b);
        let m = Msg::from_imm(imm);
        assert_eq!(m.imm(), imm);
        let _ = m.ctrl();
    }
    if let Some(b) = data.first_chunk::<SGE_LEN>() {
        for be in [false, true] {
            assert_eq!(&RsSge::from_bytes(b, be).to_bytes(be), b);
        }
    }
});
