//! The RDMA netlink reply parser (`rverbs-netlink`): a datagram as the
//! kernel would send it, walked message by message (sequence numbers,
//! NLMSG_ERROR/DONE), each data message parsed as a device, a char device
//! and every resource-dump table.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rverbs_netlink::fuzz::reply(data);
});
