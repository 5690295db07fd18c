//! `srq-pingpong`: `-q` RC QPs per side that all take their receives from
//! one shared receive queue; each QP bounces SENDs of `-s` bytes, and `-n`
//! counts the exchanges over all QPs together. The address exchange always
//! carries [`wire::SRQ_LINES`] messages each way (unused ones zero).

use anyhow::{bail, Context as _, Result};
use rverbs::{
    AccessFlags, Cq, Mr, Mtu, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Sge, Srq, SrqInitAttr,
};

use crate::common::{self, Common, LoopParams, PingPong, RECV_WRID, SEND_WRID};
use crate::connected::connect_qp;
use crate::wire::{self, Dest, SRQ_LINES};

struct Side {
    cq: Cq,
    srq: Srq,
    qps: Vec<Qp>,
    sge: [Sge; 1],
}

impl PingPong for Side {
    fn cq(&mut self) -> &mut Cq {
        &mut self.cq
    }
    fn post_send(&mut self, qp: usize) -> Result<()> {
        let wr = SendWr::send(SEND_WRID, &self.sge).signaled();
        Ok(self.qps[qp].post_send(&[wr])?)
    }
    fn post_recv(&mut self, n: u32) -> Result<()> {
        for _ in 0..n {
            self.srq
                .post_srq_recv(&[RecvWr::new(RECV_WRID, &self.sge)])?;
        }
        Ok(())
    }
    fn qp_index(&self, qpn: u32) -> Option<usize> {
        self.qps.iter().position(|q| q.qp_num() == qpn)
    }
}

/// Connects QP `i` to `dest[i]`. Like the rdma-core tool, whether a GRH is
/// used follows the first remote GID.
fn connect_all(side: &mut Side, c: &Common, mtu: Mtu, me: &[Dest], dest: &[Dest]) -> Result<()> {
    let grh_gid = dest[0].gid;
    for (i, qp) in side.qps.iter_mut().enumerate() {
        connect_qp(qp, c, mtu, me[i].psn, &dest[i], &grh_gid)
            .with_context(|| format!("QP[{i}]"))?;
    }
    Ok(())
}

/// Runs one side of the SRQ pingpong.
pub fn run(c: &Common, size: u32, mtu: Mtu, num_qp: u32) -> Result<()> {
    c.validate()?;
    if size == 0 {
        bail!("-s/--size must be at least 1");
    }
    if num_qp == 0 {
        bail!("-q/--num-qp must be at least 1");
    }
    if num_qp > c.rx_depth {
        bail!(
            "rx_depth {} is too small for {num_qp} QPs: at least one receive per QP is needed",
            c.rx_depth
        );
    }
    if num_qp as usize >= SRQ_LINES {
        bail!("num_qp {num_qp} must be less than {SRQ_LINES}");
    }
    let cq_depth = c.cq_depth(num_qp)?;
    let nq = num_qp as usize;
    let size_b = size as usize;
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
        .alloc_mr(size_b, AccessFlags::LOCAL_WRITE)
        .context("couldn't register the MR")?;
    let server_check = c.chk && c.host.is_none();
    if server_check {
        mr.fill(.., 0xa5)?;
    }
    let cq = dev
        .ctx
        .create_cq_with(cq_depth, channel.as_ref(), 0)
        .context("couldn't create the CQ")?;
    let srq = pd
        .create_srq(&SrqInitAttr {
            max_wr: c.rx_depth,
            max_sge: 1,
            srq_limit: 0,
        })
        .context("couldn't create the SRQ")?;
    let mut qps = Vec::with_capacity(nq);
    for i in 0..nq {
        let mut qp = pd
            .create_qp_with_srq(
                &QpInitAttr {
                    send_cq: &cq,
                    recv_cq: &cq,
                    qp_type: QpType::Rc,
                    cap: QpCap {
                        max_send_wr: 1,
                        max_recv_wr: 0,
                        max_send_sge: 1,
                        max_recv_sge: 0,
                        max_inline_data: 0,
                    },
                    sq_sig_all: false,
                },
                &srq,
            )
            .with_context(|| format!("couldn't create QP[{i}]"))?;
        qp.to_init_at(c.ib_port, 0, AccessFlags::empty())
            .with_context(|| format!("failed to modify QP[{i}] to INIT"))?;
        qps.push(qp);
    }
    let mut side = Side {
        cq,
        srq,
        qps,
        sge: [mr.sge(0..size_b)?],
    };
    side.post_recv(c.rx_depth)
        .context("couldn't post the receives")?;
    if channel.is_some() {
        side.cq
            .req_notify(false)
            .context("couldn't request CQ notification")?;
    }

    let mut me = vec![Dest::default(); SRQ_LINES];
    for (d, qp) in me.iter_mut().zip(&side.qps) {
        *d = Dest {
            lid: dev.port.lid,
            qpn: qp.qp_num(),
            psn: common::random_psn(),
            gid: dev.gid,
        };
        common::print_local(d, false);
    }
    match &c.host {
        Some(host) => {
            let rem = wire::client_exchange(host, c.port, &me, c.wire_limits())?;
            for d in &rem[..nq] {
                common::print_remote(d);
            }
            connect_all(&mut side, c, mtu, &me, &rem)?;
        }
        None => {
            let listener = wire::listen(c.port)?;
            let rem = wire::server_exchange(listener, &me, c.wire_limits(), |d| {
                connect_all(&mut side, c, mtu, &me, d)
            })?;
            for d in &rem[..nq] {
                common::print_remote(d);
            }
        }
    }

    if c.chk && c.host.is_some() {
        mr.write_at(0, &common::page_pattern(size_b, page, 0))?;
    }
    let elapsed = common::run_loop(
        &mut side,
        &LoopParams {
            num_qp: nq,
            iters: c.iters,
            rx_depth: c.rx_depth,
            refill_at: num_qp,
            client: c.host.is_some(),
            channel: channel.as_ref(),
            limit: c.limit(),
            batch: cq_depth as usize,
        },
    )?;
    common::print_summary(size, c.iters, elapsed);
    if server_check {
        common::check_buffer(&mr.to_vec(), &common::page_pattern(size_b, page, 0), page)?;
    }
    Ok(())
}
