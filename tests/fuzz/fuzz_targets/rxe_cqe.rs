//! The rxe completion decode: provider-rxe copies each 48-byte
//! `ib_uverbs_wc` the kernel wrote in the CQ ring as is; `rverbs::Wc` then
//! decodes it (`Wc::from_bytes` and every accessor). Any bytes must give
//! a completion, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for b in data.chunks_exact(48) {
        let wc = rverbs::Wc::from_bytes(b.try_into().unwrap());
        let _ = (
            wc.wr_id(),
            wc.status().as_str(),
            wc.is_success(),
            wc.opcode(),
            wc.byte_len(),
            wc.imm_data(),
            wc.invalidated_rkey(),
            wc.has_grh(),
            wc.qp_num(),
            wc.src_qp(),
            wc.wc_flags(),
            wc.vendor_err(),
            wc.slid(),
            wc.sl(),
            wc.pkey_index(),
        );
        let _ = format!("{wc:?} {} {:?}", wc.status(), wc.opcode());
    }
});
