// `SendWr` is `Copy` and its builders return a new request: calling one
// for its effect alone does nothing. The result must be used (here the
// warning is made an error, as a crate with `deny(warnings)` would see it).
#![deny(unused_must_use)]

fn main() {
    let wr = rverbs::SendWr::send(1, &[]);
    wr.signaled();
    rverbs::RecvWr::new(2, &[]);
    let _posted_later = wr;
}
