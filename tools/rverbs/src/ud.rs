//! `ud-pingpong`: one UD QP per side, datagrams of `-s` bytes (at most the
//! port's active MTU) bounced back and forth through an address handle.
//! Receive buffers leave room for the 40-byte GRH in front of the payload.

use anyhow::{bail, Context as _, Result};
use rverbs::{
    AccessFlags, Ah, AhAttr, Cq, GlobalRoute, Grh, Mr, Qp, QpAttr, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendWr, Sge, UdSendWr,
};

use crate::common::{self, Common, LoopParams, PingPong, RECV_WRID, SEND_WRID};
use crate::wire::{self, Dest};

/// The Q_Key both sides use.
pub const QKEY: u32 = 0x1111_1111;

struct Side {
    cq: Cq,
    qp: Qp,
    ah: Option<Ah>,
    remote_qpn: u32,
    send_sge: [Sge; 1],
    recv_sge: [Sge; 1],
}

impl PingPong for Side {
    fn cq(&mut self) -> &mut Cq {
        &mut self.cq
    }
    fn post_send(&mut self, _qp: usize) -> Result<()> {
        let Some(ah) = &self.ah else {
            bail!("no address handle for the peer yet");
        };
        let wr = SendWr::send(SEND_WRID, &self.send_sge)
            .signaled()
            .to(ah, self.remote_qpn, QKEY);
        Ok(self.qp.post_send(&[wr])?)
    }
    fn post_recv(&mut self, n: u32) -> Result<()> {
        for _ in 0..n {
            self.qp
                .post_recv(&[RecvWr::new(RECV_WRID, &self.recv_sge)])?;
        }
        Ok(())
    }
    fn qp_index(&self, qpn: u32) -> Option<usize> {
        (qpn == self.qp.qp_num()).then_some(0)
    }
}

/// INIT -> RTR -> RTS, then the address handle towards `dest`.
fn connect(side: &mut Side, c: &Common, my_psn: u32, dest: &Dest) -> Result<()> {
    side.qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            ..Default::default()
        })
        .context("failed to modify QP to RTR")?;
    side.qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(my_psn),
            ..Default::default()
        })
        .context("failed to modify QP to RTS")?;
    let grh = common::needs_grh(&dest.gid).then_some(GlobalRoute {
        dgid: dest.gid,
        sgid_index: c.sgid_index(),
        hop_limit: 64,
        ..Default::default()
    });
    let ah = side
        .qp
        .pd()
        .create_ah(&AhAttr {
            dlid: dest.lid,
            sl: c.sl,
            port_num: c.ib_port,
            grh,
            ..Default::default()
        })
        .context("failed to create the AH")?;
    side.ah = Some(ah);
    side.remote_qpn = dest.qpn;
    Ok(())
}

/// Runs one side of the UD pingpong.
pub fn run(c: &Common, size: u32) -> Result<()> {
    c.validate()?;
    if size == 0 {
        bail!("-s/--size must be at least 1");
    }
    let cq_depth = c.cq_depth(1)?;
    let page = common::page_size();
    let dev = common::open(c)?;
    let mtu = dev.port.active_mtu().map_or(0, |m| m.bytes());
    if size > mtu {
        bail!("requested size {size} is larger than the port's active MTU ({mtu})");
    }
    let size = size as usize;
    let channel = if c.events {
        Some(
            dev.ctx
                .create_comp_channel()
                .context("couldn't create a completion channel")?,
        )
    } else {
        None
    };
    let pd = dev.ctx.alloc_pd().context("couldn't allocate a PD")?;
    let mut mr: Mr = pd
        .alloc_mr(size + Grh::LEN, AccessFlags::LOCAL_WRITE)
        .context("couldn't register the MR")?;
    let server_check = c.chk && c.host.is_none();
    mr.fill(.., if server_check { 0xa5 } else { 0x7b })?;
    let cq = dev
        .ctx
        .create_cq_with(cq_depth, channel.as_ref(), 0)
        .context("couldn't create the CQ")?;
    let mut qp = pd
        .create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            qp_type: QpType::Ud,
            cap: QpCap {
                max_send_wr: 1,
                max_recv_wr: c.rx_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .context("couldn't create the QP")?;
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(c.ib_port),
        qkey: Some(QKEY),
        ..Default::default()
    })
    .context("failed to modify QP to INIT")?;
    let mut side = Side {
        cq,
        qp,
        ah: None,
        remote_qpn: 0,
        send_sge: [mr.sge(Grh::LEN..Grh::LEN + size)?],
        recv_sge: [mr.sge(..)?],
    };
    side.post_recv(c.rx_depth)
        .context("couldn't post the receives")?;
    if channel.is_some() {
        side.cq
            .req_notify(false)
            .context("couldn't request CQ notification")?;
    }

    let me = Dest {
        lid: dev.port.lid,
        qpn: side.qp.qp_num(),
        psn: common::random_psn(),
        gid: dev.gid,
    };
    common::print_local(&me, true);
    match &c.host {
        Some(host) => {
            let rem = wire::client_exchange(host, c.port, &[me], c.wire_limits())?[0];
            common::print_remote(&rem);
            connect(&mut side, c, me.psn, &rem)?;
        }
        None => {
            let listener = wire::listen(c.port)?;
            let rem = wire::server_exchange(listener, &[me], c.wire_limits(), |d| {
                connect(&mut side, c, me.psn, &d[0])
            })?[0];
            common::print_remote(&rem);
        }
    }

    if c.chk && c.host.is_some() {
        mr.write_at(Grh::LEN, &common::page_pattern(size, page, 0x7b))?;
    }
    let elapsed = common::run_loop(
        &mut side,
        &LoopParams {
            num_qp: 1,
            iters: c.iters,
            rx_depth: c.rx_depth,
            refill_at: 1,
            client: c.host.is_some(),
            channel: channel.as_ref(),
            limit: c.limit(),
            batch: 2,
        },
    )?;
    common::print_summary(size as u32, c.iters, elapsed);
    if server_check {
        let mut got = vec![0u8; size];
        mr.read_at(Grh::LEN, &mut got)?;
        common::check_buffer(&got, &common::page_pattern(size, page, 0x7b), page)?;
    }
    Ok(())
}
