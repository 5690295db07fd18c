//! Test-only: `tests/efa-emu/c/cmd_seq.c`'s fixed sequence of verbs
//! through rverbs on the emulated EFA device, call for call, for `cargo
//! xtask efa` to compare the commands and descriptors the device saw
//! with libefa's. Prints `PASS <step>` per step, `FAIL <step>: <why>` on
//! the first failure (exit 1).

use std::io::IoSlice;
use std::process::ExitCode;

use std::time::{Duration, Instant};
use verbs_tests::step::{fail, main_with, pass, At, R};

use rverbs::{
    opcode, AccessFlags, AhAttr, Cq, Driver, GlobalRoute, QpAttr, QpCap, QpInitAttr, QpType,
    RecvWr, SendWr, Sge, UdSendWr, Wc, WcStatus,
};

const QKEY: u32 = 0x1111_1111;

fn wait_n(step: &str, cq: &mut Cq, mut n: usize) -> R {
    let mut wc = [Wc::default(); 1];
    let end = Instant::now() + Duration::from_secs(5);
    while n > 0 {
        if cq.poll(&mut wc).at(step)? == 1 {
            if wc[0].status() != WcStatus::SUCCESS {
                return fail(step, format!("{}", wc[0].status()));
            }
            n -= 1;
        } else if Instant::now() > end {
            return fail(step, "no completion within 5 s");
        }
    }
    Ok(())
}

fn run() -> R {
    let devs = rverbs::devices().at("open")?;
    let dev = devs
        .iter()
        .find(|d| *d.driver() == Driver::Efa)
        .ok_or("no EFA device")
        .at("open")?;
    let ctx = dev.open().at("open")?;
    pass("open");
    let s = "objects";
    let pd = ctx.alloc_pd().at(s)?;
    let mut mr = pd
        .alloc_mr(65536, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
        .at(s)?;
    let mut cq = ctx.create_cq(64).at(s)?;
    let attr = |qp_type| QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        qp_type,
        cap: QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 32,
        },
        sq_sig_all: false,
    };
    let mut ud = pd.create_qp(&attr(QpType::Ud)).at(s)?;
    let mut srd = pd.create_qp(&attr(QpType::Srd)).at(s)?;
    ud.ready_ud(1, QKEY, 0).at(s)?;
    srd.ready_ud(1, QKEY, 0).at(s)?;
    srd.modify(&QpAttr {
        rnr_retry: Some(7),
        ..Default::default()
    })
    .at(s)?;
    let gid = ctx.query_gid(1, 0).at(s)?;
    let ah = pd
        .create_ah(&AhAttr {
            port_num: 1,
            grh: Some(GlobalRoute {
                dgid: gid,
                hop_limit: 1,
                ..Default::default()
            }),
            ..Default::default()
        })
        .at(s)?;
    pass("objects");

    let s = "srd";
    let (base, lkey, rkey) = (mr.addr(), mr.lkey(), mr.rkey());
    let sge = |off: u64, len: u32| Sge {
        addr: base + off,
        length: len,
        lkey,
    };
    let rs = [sge(8192, 1024)];
    srd.post_recv(&[RecvWr::new(1, &rs)]).at(s)?;
    srd.post_recv(&[RecvWr::new(2, &rs)]).at(s)?;
    mr.write_at(0, b"two buffers\0").at(s)?;
    let two = [sge(0, 4), sge(4, 8)];
    srd.post_send(&[SendWr::send(10, &two)
        .signaled()
        .to(&ah, srd.qp_num(), QKEY)])
        .at(s)?;
    let bufs = [IoSlice::new(b"inline!\0")];
    srd.post_send(&[opcode::Send::inline(11, &bufs)
        .imm(0x1234)
        .build()
        .signaled()
        .to(&ah, srd.qp_num(), QKEY)])
        .at(s)?;
    wait_n(s, &mut cq, 4)?;
    let dst = [sge(12288, 256)];
    srd.post_send(&[SendWr::rdma_read(12, &dst, base + 4096, rkey)
        .signaled()
        .to(&ah, srd.qp_num(), QKEY)])
        .at(s)?;
    wait_n(s, &mut cq, 1)?;
    pass("srd");

    let s = "ud";
    ud.post_recv(&[RecvWr::new(3, &rs)]).at(s)?;
    let one = [sge(0, 4)];
    ud.post_send(&[SendWr::send_with_imm(13, &one, 0x1234)
        .signaled()
        .to(&ah, ud.qp_num(), QKEY)])
        .at(s)?;
    wait_n(s, &mut cq, 2)?;
    pass("ud");

    drop(ah);
    drop(srd);
    drop(ud);
    drop(cq);
    drop(mr);
    drop(pd);
    drop(ctx);
    pass("teardown");
    Ok(())
}

fn main() -> ExitCode {
    main_with(run)
}
