//! `rc-pingpong` and `uc-pingpong`: one connected QP (RC or UC) per side,
//! SENDs of `-s` bytes bounced back and forth `-n` times.

use anyhow::{bail, Context as _, Result};
use rverbs::{
    AccessFlags, AhAttr, Cq, GlobalRoute, Mr, Mtu, Qp, QpAttr, QpCap, QpInitAttr, QpState, QpType,
    RecvWr, SendWr, Sge,
};

use crate::common::{self, Common, LoopParams, PingPong, RECV_WRID, SEND_WRID};
use crate::wire::{self, Dest};

/// Options of the connected tools beyond [`Common`].
#[derive(Debug, Clone)]
pub struct Opts {
    /// RC or UC.
    pub qp_type: QpType,
    /// Message size.
    pub size: u32,
    /// Path MTU.
    pub mtu: Mtu,
}

/// Moves an INIT QP to RTR towards `dest` and on to RTS, with the pingpong
/// tools' attributes (RC adds its retry and RDMA-atomic knobs).
pub fn connect_qp(
    qp: &mut Qp,
    c: &Common,
    mtu: Mtu,
    my_psn: u32,
    dest: &Dest,
    grh_gid: &rverbs::Gid,
) -> Result<()> {
    let rc = qp.qp_type() == QpType::Rc;
    let grh = common::needs_grh(grh_gid).then_some(GlobalRoute {
        dgid: dest.gid,
        sgid_index: c.sgid_index(),
        hop_limit: 1,
        ..Default::default()
    });
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(mtu),
        dest_qp_num: Some(dest.qpn),
        rq_psn: Some(dest.psn),
        max_dest_rd_atomic: rc.then_some(1),
        min_rnr_timer: rc.then_some(12),
        ah_attr: Some(AhAttr {
            dlid: dest.lid,
            sl: c.sl,
            port_num: c.ib_port,
            grh,
            ..Default::default()
        }),
        ..Default::default()
    };
    qp.modify(&rtr).context("failed to modify QP to RTR")?;
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(my_psn),
        timeout: rc.then_some(14),
        retry_cnt: rc.then_some(7),
        rnr_retry: rc.then_some(7),
        max_rd_atomic: rc.then_some(1),
        ..Default::default()
    };
    qp.modify(&rts).context("failed to modify QP to RTS")?;
    Ok(())
}

struct Side {
    cq: Cq,
    qp: Qp,
    sge: [Sge; 1],
}

impl PingPong for Side {
    fn cq(&mut self) -> &mut Cq {
        &mut self.cq
    }
    fn post_send(&mut self, _qp: usize) -> Result<()> {
        let wr = SendWr::send(SEND_WRID, &self.sge).signaled();
        Ok(self.qp.post_send(&[wr])?)
    }
    fn post_recv(&mut self, n: u32) -> Result<()> {
        for _ in 0..n {
            self.qp.post_recv(&[RecvWr::new(RECV_WRID, &self.sge)])?;
        }
        Ok(())
    }
    fn qp_index(&self, qpn: u32) -> Option<usize> {
        (qpn == self.qp.qp_num()).then_some(0)
    }
}

/// Runs one side of the RC or UC pingpong.
pub fn run(c: &Common, o: &Opts) -> Result<()> {
    c.validate()?;
    if o.size == 0 {
        bail!("-s/--size must be at least 1");
    }
    let cq_depth = c.cq_depth(1)?;
    let size = o.size as usize;
    let page = common::page_size();
    let dev = common::open(c)?;
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
        .alloc_mr(size, AccessFlags::LOCAL_WRITE)
        .context("couldn't register the MR")?;
    // The server of `-c` starts from bytes no peer sends, so any byte that
    // never arrived shows up in the check.
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
            qp_type: o.qp_type,
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
    let access = AccessFlags::empty();
    qp.to_init_at(c.ib_port, 0, access)
        .context("failed to modify QP to INIT")?;
    let sge = [mr.sge(0..size)?];
    let mut side = Side { cq, qp, sge };
    side.post_recv(c.rx_depth)
        .context("couldn't post the receives")?;
    if let Some(_ch) = &channel {
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
    common::print_local(&me, false);
    match &c.host {
        Some(host) => {
            let rem = wire::client_exchange(host, c.port, &[me], c.wire_limits())?[0];
            common::print_remote(&rem);
            connect_qp(&mut side.qp, c, o.mtu, me.psn, &rem, &rem.gid)?;
        }
        None => {
            let listener = wire::listen(c.port)?;
            let rem = wire::server_exchange(listener, &[me], c.wire_limits(), |d| {
                connect_qp(&mut side.qp, c, o.mtu, me.psn, &d[0], &d[0].gid)
            })?[0];
            common::print_remote(&rem);
        }
    }

    if c.chk && c.host.is_some() {
        mr.write_at(0, &common::page_pattern(size, page, 0x7b))?;
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
    common::print_summary(o.size, c.iters, elapsed);
    if server_check {
        common::check_buffer(&mr.to_vec(), &common::page_pattern(size, page, 0x7b), page)?;
    }
    Ok(())
}
