//! The rdma_cm decoders (`rverbs_abi::ucma`): what the kernel writes for
//! GET_EVENT (an event with its connection or UD parameters and private
//! data), QUERY's address and path answers, and the socket addresses in
//! them. Any bytes must give a value or an error, never a panic.
#![no_main]

use rverbs_abi::ucma::{decode_sockaddr, EventResp, QueryAddrResp, QueryPathResp};
use zerocopy::FromBytes;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(ev) = EventResp::parse(data) {
        let conn = ev.conn();
        let ud = ev.ud();
        let _ = (conn.private_data().len(), ud.private_data().len());
        let _ = format!("{ev:?}");
    }
    if let Some((hdr, paths)) = QueryPathResp::parse(data) {
        let _ = (hdr, paths.count());
    }
    if let Ok((q, _)) = QueryAddrResp::read_from_prefix(data) {
        let _ = q.src_addr.to_socket_addr(usize::from(q.src_size));
        let _ = q.dst_addr.to_socket_addr(usize::from(q.dst_size));
    }
    let _ = decode_sockaddr(data);
});
