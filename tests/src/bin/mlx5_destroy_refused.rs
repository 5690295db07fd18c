//! A QP and its CQ whose destruction the kernel refuses keep their rings:
//! the device may still use them, so the library must leak that memory
//! rather than free it (as it does for an MR it cannot deregister). Run by
//! `cargo xtask mlx5` with the emulator preloaded, whose test knob
//! `mlx5_emu_refuse_destroys` makes DESTROY_QP/CQ/SRQ fail with EBUSY while
//! the emulated HCA keeps using the objects. With the rings freed (unmapped)
//! the HCA's next receive on the refused QP would read and write memory
//! that is gone: the program would crash or the data would not arrive.
//! Prints `PASS <step>` per step and `FAIL <step>: <why>` on the first
//! failure (exit status 1). Opens the device named by the first argument,
//! else the first mlx5 device.

use std::process::ExitCode;

use rverbs::{RecvWr, SendWr};
use verbs_tests::step::{expect, fail, main_with, pass, At, Fail, R};
use verbs_tests::{all_access, pattern, wait, Pair, PairOpts};

/// The emulator's knob: `mlx5_emu_refuse_destroys(on)`.
type Knob = extern "C" fn(std::ffi::c_int);

/// The emulator's knob, if the emulator is preloaded.
fn knob() -> Option<Knob> {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the
    // loaded objects, the preloaded emulator among them.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mlx5_emu_refuse_destroys".as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: the emulator defines the symbol as `extern "C" fn(c_int)`.
    Some(unsafe { std::mem::transmute::<*mut libc::c_void, Knob>(p) })
}

fn run() -> R {
    let dev = verbs_tests::mlx5_device(std::env::args().nth(1).as_deref())
        .map_err(|e| Fail("setup".into(), e))?;
    let Some(refuse) = knob() else {
        return fail(
            "setup",
            "the emulator's mlx5_emu_refuse_destroys is not loaded",
        );
    };
    let ctx = dev.open().at("open")?;
    let Pair {
        pd,
        mut cq_a,
        cq_b,
        mut a,
        mut b,
        ..
    } = Pair::with_context(ctx, PairOpts::default());
    let mut src = pd.alloc_mr(4096, all_access()).at("setup")?;
    let dst = pd.alloc_mr(4096, all_access()).at("setup")?;
    let data = pattern(256, 5);
    src.write_at(0, &data).at("setup")?;
    let r = [dst.sge(..256).at("setup")?];
    b.post_recv(&[RecvWr::new(7, &r)]).at("setup")?;
    b.post_recv(&[RecvWr::new(8, &r)]).at("setup")?;

    // The kernel refuses to destroy b and its CQ: they live on in the
    // device, their receive posted.
    refuse(1);
    drop(b);
    drop(cq_b);
    refuse(0);
    pass("destroy_refused");

    // a's SEND consumes b's receive: the device reads the receive WQE from
    // b's ring and writes the completion to b's CQ ring, both leaked.
    let s = [src.sge(..256).at("send")?];
    a.post_send(&[SendWr::send(1, &s).signaled()]).at("send")?;
    let wc = wait(&mut cq_a, 1)[0];
    expect("send", wc.is_success(), &format!("{wc:?}"))?;
    let mut got = vec![0u8; 256];
    dst.read_at(0, &mut got).at("send")?;
    expect("send", got == data, "the SEND did not land in b's receive")?;
    pass("device_kept_using_them");
    Ok(())
}

fn main() -> ExitCode {
    main_with(run)
}
