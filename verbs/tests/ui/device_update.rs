// Nor can a discovered `Device` be copied with another node path.
fn main() {
    let real = verbs::devices().unwrap().remove(0);
    let _forged = verbs::Device {
        dev_path: "/dev/null".into(),
        ..real
    };
}
