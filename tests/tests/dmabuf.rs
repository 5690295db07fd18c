//! dmabuf memory registration on rxe: rxe has none (its kernel driver has
//! no `reg_user_mr_dmabuf`, so `UVERBS_METHOD_REG_DMABUF_MR` would answer
//! `EOPNOTSUPP`), and the library refuses it before the kernel is asked,
//! with an error that names dmabuf. The registration itself is proven on
//! the emulated mlx5 (`cargo xtask mlx5`: tests/mlx5-emu/c/dmabuf.c and
//! tests/src/bin/mlx5_dmabuf.rs).

#![forbid(unsafe_code)]

use std::os::fd::AsFd;

use rverbs::{AccessFlags, Error, Feature};
use verbs_tests::open_rxe;

#[test]
fn reg_dmabuf_mr_is_refused_on_rxe() {
    let ctx = open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    // Any open descriptor: the refusal comes before it is looked at.
    let file = std::fs::File::open("/dev/null").unwrap();
    let err = pd
        .reg_dmabuf_mr(file.as_fd(), 0, 4096, 0, AccessFlags::LOCAL_WRITE)
        .unwrap_err();
    match &err {
        Error::Unsupported {
            provider: "rxe",
            feature: Feature::DmabufMr,
        } => {}
        other => panic!("not the clear refusal: {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("rxe") && msg.contains("dmabuf"), "{msg}");
    // The PD is intact: an ordinary registration still works.
    let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    assert_ne!(mr.lkey(), 0);
}
