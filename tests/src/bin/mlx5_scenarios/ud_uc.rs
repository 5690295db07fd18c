//! The other transports: UD (without and with a GRH in the address
//! vector) and UC (RDMA WRITE and SEND).

use rverbs::{
    AhAttr, GlobalRoute, Qp, QpAttr, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendWr, UdSendWr,
    WcStatus,
};

use crate::datapath::{connect_rc, expect_bytes, expect_wc, pattern, poll_one, Dp, AUX, DST, SRC};
use crate::report::{expect, Ctx, Report, R};
use crate::UD_QKEY;

impl Dp {
    fn connect_ud(step: &'static str, qp: &mut Qp) -> R {
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(UD_QKEY),
            ..Default::default()
        })
        .at(step)?;
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            ..Default::default()
        })
        .at(step)?;
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(0),
            ..Default::default()
        })
        .at(step)
    }

    /// ud and ud_grh (IB link layer: no GRH unless the AH has one; 40
    /// bytes skipped either way).
    pub(crate) fn ud(&mut self, rep: &mut Report) -> R {
        let s = "ud";
        let mut u1 = self.make_qp(s, QpType::Ud, &self.cqa, None)?;
        let mut u2 = self.make_qp(s, QpType::Ud, &self.cqb, None)?;
        Self::connect_ud(s, &mut u1)?;
        Self::connect_ud(s, &mut u2)?;
        let ah = self
            .pd
            .create_ah(&AhAttr {
                dlid: self.lid,
                port_num: 1,
                ..Default::default()
            })
            .at(s)?;
        self.mr.fill(AUX..AUX + 40, 0x5a).at(s)?;
        self.put(s, SRC, &pattern(200, 20))?;
        let r = [self.sge(AUX, 40 + 256)];
        u2.post_recv(&[RecvWr::new(301, &r)]).at(s)?;
        let sg = [self.sge(SRC, 200)];
        let wr = SendWr::send_with_imm(300, &sg, 77)
            .signaled()
            .to(&ah, u2.qp_num(), UD_QKEY);
        u1.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 300)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 301)?;
        expect(s, wc.byte_len() == 240, "byte_len is not 40 + 200")?;
        expect(s, wc.src_qp() == u1.qp_num(), "src_qp is not the sender")?;
        expect(s, !wc.has_grh(), "GRH flag set without a GRH")?;
        expect(s, wc.imm_data().is_some(), "WITH_IMM not set")?;
        expect(s, wc.imm_data() == Some(77), "wrong imm_data")?;
        let grh = self.get(AUX, 40);
        expect(
            s,
            grh[0] == 0x5a && grh[39] == 0x5a,
            "the GRH area was written",
        )?;
        expect_bytes(s, &self.get(AUX + 40, 200), &self.get(SRC, 200))?;
        drop(ah);
        rep.pass(s);

        // With a GRH in the address vector the receiver gets it.
        let s = "ud_grh";
        let gid = self.ctx.query_gid(1, 0).at(s)?;
        let ah = self
            .pd
            .create_ah(&AhAttr {
                dlid: self.lid,
                port_num: 1,
                grh: Some(GlobalRoute {
                    dgid: gid,
                    sgid_index: 0,
                    hop_limit: 64,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .at(s)?;
        self.mr.fill(AUX..AUX + 40, 0x5a).at(s)?;
        u2.post_recv(&[RecvWr::new(311, &r)]).at(s)?;
        let wr = SendWr::send(310, &sg)
            .signaled()
            .to(&ah, u2.qp_num(), UD_QKEY);
        u1.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 310)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 311)?;
        expect(s, wc.byte_len() == 240, "byte_len is not 40 + 200")?;
        expect(s, wc.has_grh(), "GRH flag not set")?;
        let grh = self.get(AUX, 40);
        expect(s, grh[0] >> 4 == 6, "GRH IP version is not 6")?;
        expect(s, grh[7] == 64, "GRH hop limit is not 64")?;
        expect_bytes(s, &grh[8..24], &gid.0)?;
        expect_bytes(s, &grh[24..40], &gid.0)?;
        expect_bytes(s, &self.get(AUX + 40, 200), &self.get(SRC, 200))?;
        drop(ah);
        drop((u1, u2));
        rep.pass(s);
        Ok(())
    }

    pub(crate) fn uc(&mut self) -> R {
        let s = "uc";
        let attr = QpInitAttr {
            send_cq: &self.cqa,
            recv_cq: &self.cqb,
            qp_type: QpType::Uc,
            cap: QpCap {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        let mut c1 = self.pd.create_qp(&attr).at(s)?;
        let mut c2 = self.pd.create_qp(&attr).at(s)?;
        connect_rc(s, &mut c1, c2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut c2, c1.qp_num(), self.lid, 7)?;
        self.put(s, SRC, &pattern(300, 40))?;
        let sg = [self.sge(SRC, 300)];
        let wr = SendWr::rdma_write(800, &sg, self.remote(DST), self.mr.rkey()).signaled();
        c1.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 800)?;
        expect_bytes(s, &self.get(DST, 300), &self.get(SRC, 300))?;
        let r = [self.sge(AUX, 512)];
        c2.post_recv(&[RecvWr::new(802, &r)]).at(s)?;
        c1.post_send(&[SendWr::send(801, &sg).signaled()]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 801)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 802)?;
        expect(s, wc.byte_len() == 300, "byte_len is not 300")?;
        expect_bytes(s, &self.get(AUX, 300), &self.get(SRC, 300))
    }
}
