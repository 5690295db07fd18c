// The uverbs command functions send user addresses the kernel and device
// act on: calling one from safe code does not compile.
use std::os::fd::AsFd;

fn main() {
    let f = std::fs::File::options()
        .write(true)
        .open("/dev/null")
        .unwrap();
    // A REG_MR-shaped command whose `start` points at read-only memory.
    static RODATA: [u8; 4096] = [0; 4096];
    let cmd = [0u64, RODATA.as_ptr() as u64, 4096, RODATA.as_ptr() as u64, 0];
    let _ = rverbs_abi::cmd::write_cmd::<_, rverbs_abi::cmd::NoResp>(
        f.as_fd(),
        rverbs_abi::cmd::nr::REG_MR,
        &cmd,
        &[],
        &mut [],
    );
}
