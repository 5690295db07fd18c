// A `Device` comes from discovery only: building one by hand (pointing it
// at `/dev/null`, say) does not compile.
use std::path::PathBuf;

fn main() {
    let _forged = rverbs::Device {
        name: "rxe0".into(),
        uverbs: "uverbs0".into(),
        dev_path: PathBuf::from("/dev/null"),
        node_guid: rverbs::Guid::default(),
        driver: rverbs::Driver::Rxe,
        abi_version: 6,
        driver_abi_version: 2,
    };
}
