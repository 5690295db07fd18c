//! rsockets' wire formats from a peer (`rverbs_cm::stream::wire`): the
//! connection data of a request or an accept (`ConnData::decode`), the
//! immediate of every message (`Msg::from_imm`) and a buffer descriptor
//! the peer wrote into the target list (`RsSge::from_bytes`), and a
//! direct-placement descriptor it wrote (`Iomap::from_bytes`, then
//! `Iomap::locate` of an offset it also chose). Each is a value or an
//! error, never a panic; what decodes encodes back to the same bytes.
#![no_main]

use rverbs_cm::stream::wire::{
    ConnData, Iomap, Msg, RsSge, CONN_DATA_LEN, IOMAP_LEN, SGE_LEN, SGL_SIZE,
};

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
    if let Some(b) = data.first_chunk::<IOMAP_LEN>() {
        let at = data
            .get(IOMAP_LEN..IOMAP_LEN + 8)
            .and_then(|t| t.try_into().ok())
            .map_or(0, u64::from_le_bytes);
        for be in [false, true] {
            let m = Iomap::from_bytes(b, be);
            assert_eq!(&m.to_bytes(be), b);
            if let Some((addr, left)) = m.locate(at) {
                // Inside the region, and what is left of it.
                assert!(left >= 1 && left <= m.sge.length);
                assert_eq!(addr - m.sge.addr, at - m.offset);
                assert_eq!(u64::from(m.sge.length) - u64::from(left), at - m.offset);
            }
        }
    }
});
