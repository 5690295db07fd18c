// Nor can a discovered `Device` be copied with another node path.
fn main() {
    let real = rverbs::devices().unwrap().remove(0);
    let _forged = rverbs::Device {
        dev_path: "/dev/null".into(),
        ..real
    };
}
