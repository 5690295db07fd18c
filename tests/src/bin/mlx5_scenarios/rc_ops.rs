//! The main RC pair's operations: SEND (plain, with immediate data,
//! inline, three SGEs into two), RDMA WRITE (plain and with immediate
//! data), RDMA READ and the atomics.

use std::io::IoSlice;

use rverbs::{RecvWr, SendWr, WcOpcode, WcStatus};

use crate::datapath::{
    expect_bytes, expect_quiet, expect_wc, pattern, poll_one, Dp, ATOM, AUX, DST, SRC,
};
use crate::report::{expect, Ctx, Report, R};

impl Dp {
    pub(crate) fn send_recv(&mut self) -> R {
        let s = "send_recv";
        self.put(s, SRC, &pattern(1000, 1))?;
        let r = [self.sge(DST, 4096)];
        self.qb.post_recv(&[RecvWr::new(11, &r)]).at(s)?;
        let sg = [self.sge(SRC, 1000)];
        self.qa
            .post_send(&[SendWr::send(10, &sg).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 10)?;
        expect(
            s,
            wc.opcode() == WcOpcode::SEND,
            "requester opcode is not SEND",
        )?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 11)?;
        expect(
            s,
            wc.opcode() == WcOpcode::RECV,
            "responder opcode is not RECV",
        )?;
        expect(s, wc.byte_len() == 1000, "byte_len is not 1000")?;
        expect(
            s,
            wc.qp_num() == self.qb.qp_num(),
            "qp_num is not the receiver's",
        )?;
        expect(s, wc.imm_data().is_none(), "WITH_IMM set")?;
        expect_bytes(s, &self.get(DST, 1000), &self.get(SRC, 1000))
    }

    pub(crate) fn send_imm(&mut self) -> R {
        let s = "send_imm";
        self.put(s, SRC, &pattern(64, 2))?;
        let r = [self.sge(DST, 4096)];
        self.qb.post_recv(&[RecvWr::new(21, &r)]).at(s)?;
        let sg = [self.sge(SRC, 64)];
        self.qa
            .post_send(&[SendWr::send_with_imm(20, &sg, 0x1234_5678).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 20)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 21)?;
        expect(s, wc.opcode() == WcOpcode::RECV, "opcode is not RECV")?;
        expect(s, wc.imm_data().is_some(), "WITH_IMM not set")?;
        expect(s, wc.imm_data() == Some(0x1234_5678), "wrong imm_data")?;
        expect(s, wc.byte_len() == 64, "byte_len is not 64")?;
        expect_bytes(s, &self.get(DST, 64), &self.get(SRC, 64))
    }

    pub(crate) fn send_inline(&mut self) -> R {
        let s = "send_inline";
        let mut inl = pattern(48, 3);
        let r = [self.sge(DST, 4096)];
        self.qb.post_recv(&[RecvWr::new(31, &r)]).at(s)?;
        {
            let bufs = [IoSlice::new(&inl)];
            self.qa
                .post_send(&[SendWr::send_inline(30, &bufs).signaled()])
                .at(s)?;
        }
        // Inline data is copied at post time: the buffer may change now.
        inl.fill(0);
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 30)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 31)?;
        expect(s, wc.byte_len() == 48, "byte_len is not 48")?;
        expect_bytes(s, &self.get(DST, 48), &pattern(48, 3))
    }

    pub(crate) fn send_3_sges_to_2(&mut self) -> R {
        let s = "send_3_sges_to_2";
        self.put(s, SRC, &pattern(600, 4))?;
        self.mr.fill(DST..DST + 8192, 0).at(s)?;
        let r = [self.sge(DST, 250), self.sge(DST + 4096, 400)];
        self.qb.post_recv(&[RecvWr::new(41, &r)]).at(s)?;
        let sg = [
            self.sge(SRC, 100),
            self.sge(SRC + 100, 200),
            self.sge(SRC + 300, 300),
        ];
        self.qa
            .post_send(&[SendWr::send(40, &sg).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 40)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 41)?;
        expect(s, wc.byte_len() == 600, "byte_len is not 600")?;
        expect_bytes(s, &self.get(DST, 250), &self.get(SRC, 250))?;
        expect_bytes(s, &self.get(DST + 4096, 350), &self.get(SRC + 250, 350))?;
        expect(
            s,
            self.get(DST + 4096 + 350, 1)[0] == 0,
            "wrote past the message",
        )
    }

    pub(crate) fn rdma_write(&mut self) -> R {
        let s = "rdma_write";
        self.put(s, SRC, &pattern(4096, 5))?;
        let sg = [self.sge(SRC, 4096)];
        let wr = SendWr::rdma_write(50, &sg, self.remote(DST), self.mr.rkey()).signaled();
        self.qa.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 50)?;
        expect(
            s,
            wc.opcode() == WcOpcode::RDMA_WRITE,
            "opcode is not RDMA_WRITE",
        )?;
        expect_bytes(s, &self.get(DST, 4096), &self.get(SRC, 4096))?;
        expect_quiet(s, &mut self.cqb)
    }

    pub(crate) fn rdma_write_imm(&mut self) -> R {
        let s = "rdma_write_imm";
        self.put(s, SRC, &pattern(512, 6))?;
        let r = [self.sge(AUX, 16)];
        self.qb.post_recv(&[RecvWr::new(61, &r)]).at(s)?;
        let sg = [self.sge(SRC, 512)];
        let wr = SendWr::rdma_write_with_imm(60, &sg, self.remote(DST), self.mr.rkey(), 0xcafe)
            .signaled();
        self.qa.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 60)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 61)?;
        expect(
            s,
            wc.opcode() == WcOpcode::RECV_RDMA_WITH_IMM,
            "opcode is not RECV_RDMA_WITH_IMM",
        )?;
        expect(s, wc.imm_data() == Some(0xcafe), "wrong imm_data")?;
        expect(s, wc.byte_len() == 512, "byte_len is not 512")?;
        expect_bytes(s, &self.get(DST, 512), &self.get(SRC, 512))
    }

    pub(crate) fn rdma_read(&mut self) -> R {
        let s = "rdma_read";
        self.put(s, DST, &pattern(2048, 7))?;
        self.mr.fill(SRC..SRC + 2048, 0).at(s)?;
        let sg = [self.sge(SRC, 2048)];
        let wr = SendWr::rdma_read(70, &sg, self.remote(DST), self.mr.rkey()).signaled();
        self.qa.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 70)?;
        expect(
            s,
            wc.opcode() == WcOpcode::RDMA_READ,
            "opcode is not RDMA_READ",
        )?;
        expect(s, wc.byte_len() == 2048, "byte_len is not 2048")?;
        expect_bytes(s, &self.get(SRC, 2048), &self.get(DST, 2048))
    }

    fn u64_at(&self, off: usize) -> u64 {
        let b = self.get(off, 8);
        u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]))
    }

    /// cmp_swap, cmp_swap_no_swap and fetch_add.
    pub(crate) fn atomics(&mut self, rep: &mut Report) -> R {
        let s = "cmp_swap";
        self.put(s, ATOM, &42u64.to_ne_bytes())?;
        self.put(s, ATOM + 64, &0u64.to_ne_bytes())?;
        let sg = [self.sge(ATOM + 64, 8)];
        let (target, rkey) = (self.remote(ATOM), self.mr.rkey());
        self.qa
            .post_send(&[SendWr::cmp_swap(80, &sg[0], target, rkey, 42, 99).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 80)?;
        expect(
            s,
            wc.opcode() == WcOpcode::COMP_SWAP,
            "opcode is not COMP_SWAP",
        )?;
        expect(s, self.u64_at(ATOM + 64) == 42, "old value is not 42")?;
        expect(s, self.u64_at(ATOM) == 99, "target was not swapped to 99")?;
        rep.pass(s);

        let s = "cmp_swap_no_swap";
        self.qa
            .post_send(&[SendWr::cmp_swap(81, &sg[0], target, rkey, 1, 7).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 81)?;
        expect(s, self.u64_at(ATOM + 64) == 99, "old value is not 99")?;
        expect(s, self.u64_at(ATOM) == 99, "target changed")?;
        rep.pass(s);

        let s = "fetch_add";
        self.qa
            .post_send(&[SendWr::fetch_add(82, &sg[0], target, rkey, 5).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 82)?;
        expect(
            s,
            wc.opcode() == WcOpcode::FETCH_ADD,
            "opcode is not FETCH_ADD",
        )?;
        expect(s, self.u64_at(ATOM + 64) == 99, "old value is not 99")?;
        expect(s, self.u64_at(ATOM) == 104, "target is not 104")?;
        rep.pass(s);
        Ok(())
    }
}
