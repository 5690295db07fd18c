// Only commands that carry no user address can be sent safely: REG_MR names
// memory the device will write, so `exec` does not take it.
use std::os::fd::AsFd;

fn main() {
    let f = std::fs::File::options()
        .write(true)
        .open("/dev/null")
        .unwrap();
    static RODATA: [u8; 4096] = [0; 4096];
    let cmd = rverbs_abi::mr::RegMr {
        response: 0,
        start: RODATA.as_ptr() as u64,
        length: 4096,
        hca_va: RODATA.as_ptr() as u64,
        pd_handle: 0,
        access_flags: 1,
    };
    let _ = rverbs_abi::cmd::exec(f.as_fd(), &cmd, &mut []);
}
