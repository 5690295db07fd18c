//! The timed loops of `rverbs perf`: bandwidth (a window of up to `-t`
//! work requests in flight, posted as chains, one completion requested
//! every `cq_mod` of them, completions polled in batches), the SEND
//! receiver (receives re-posted in chains as they complete), and the
//! ping-pong latency loops (WRITE: each side polls the last byte of its
//! buffer; SEND: receive completions; READ and atomics: one request
//! outstanding at a time).
//!
//! Nothing in a timed loop allocates: the work request templates live on
//! the stack, completion and timestamp buffers are sized before the loop.
//! Every wait is bounded by the no-progress timeout; nothing but the data
//! passes between the sides during a run (perftest's channels are idle
//! then), so a `-D` run ends on each side's own clock.

use std::io::{IoSlice, IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rverbs::{opcode, Cq, Mr, Payload, PostError, Qp, RecvWr, SendFlags, SendWr, Sge, Wc};

use super::clock::Clock;
use super::stats;
use super::stats::Report;
use super::{Kind, Timing, Verb};

/// Longest chain of work requests posted with one doorbell.
const CHAIN: usize = 64;
/// Completions polled at once.
const WC_BATCH: usize = 32;
/// Empty polls between looks at the clock (timeouts, progress, `-D`).
const SPIN_CHECK: u32 = 1024;

/// The verbs objects a run uses.
pub struct Res<'q> {
    /// The RC QP (ours, or the one an rdma_cm connection owns).
    pub qp: &'q mut Qp,
    /// Send completions.
    pub scq: Cq,
    /// Receive completions.
    pub rcq: Cq,
    /// The buffer: the first half is the source of our messages (and what
    /// the peer READs), the second half where the peer's land (WRITE,
    /// SEND) and where READ and atomic results go.
    pub mr: Mr,
    /// Offset of the second half.
    pub half: usize,
    /// Source of inline sends (not registered).
    pub inline_src: Vec<u8>,
}

/// The peer's buffer, as its keys announced it.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// Its address.
    addr: u64,
    /// Its rkey.
    rkey: u32,
    /// Bytes usable at `addr` (READ) and at `dest` (WRITE, atomics).
    room: u64,
    /// Address of its second half.
    dest: u64,
}

impl Peer {
    /// A peer that announced only where to write (perftest's `-R`): `room`
    /// bytes at `vaddr` with `rkey`; refused if they would run past the
    /// end of the address space.
    pub fn remote(vaddr: u64, rkey: u32, room: u64) -> Result<Peer> {
        if vaddr.checked_add(room).is_none() {
            bail!(
                "the peer announced its buffer at {vaddr:#x}: {room} bytes from there \
                 run past the end of the address space"
            );
        }
        Ok(Peer {
            addr: vaddr,
            rkey,
            room,
            dest: vaddr,
        })
    }

    /// Address of the peer's second half.
    fn dest(&self) -> u64 {
        self.dest
    }
}

/// What the loops need to know about the test.
#[derive(Debug, Clone)]
pub struct Params {
    /// Operation.
    pub verb: Verb,
    /// Bandwidth or latency.
    pub kind: Kind,
    /// Whether we are the client (the side that drives).
    pub client: bool,
    /// Whether this side sends the first message of a SEND or WRITE
    /// latency ping-pong (the client, except in perftest's `ib_write_lat
    /// -R`, whose server starts).
    pub leads: bool,
    /// Iterations per size (ignored with `timing`).
    pub iters: u64,
    /// A `-D` run.
    pub timing: Option<Timing>,
    /// Work requests in flight at most.
    pub tx_depth: u32,
    /// Receives posted at most.
    pub rx_depth: u32,
    /// One completion every this many sends.
    pub cq_mod: u32,
    /// Messages up to this size are sent inline.
    pub inline: u32,
    /// Measure the peak bandwidth.
    pub peak: bool,
    /// Compare-and-swap instead of fetch-and-add.
    pub cmp_swap: bool,
    /// No-progress timeout.
    pub limit: Option<Duration>,
    /// Print a progress line.
    pub progress: bool,
    /// Name of the test in progress lines.
    pub label: String,
}

/// The phases of a `-D` run: warm-up (margin), sampling, cool-down
/// (margin), end. Counts and times are captured at the sampling edges.
struct Phases {
    t: Timing,
    start: Instant,
    state: u8,
    s_count: u64,
    s_time: Instant,
    e_count: u64,
    e_time: Instant,
}

impl Phases {
    fn new(t: Timing, start: Instant) -> Phases {
        Phases {
            t,
            start,
            state: 0,
            s_count: 0,
            s_time: start,
            e_count: 0,
            e_time: start,
        }
    }

    /// Advances to `now` with `count` done so far; true once the run is over.
    fn update(&mut self, now: Instant, count: u64) -> bool {
        let el = now.saturating_duration_since(self.start);
        if self.state == 0 && el >= self.t.margin {
            self.state = 1;
            self.s_count = count;
            self.s_time = now;
        }
        if self.state == 1 && el >= self.t.total.saturating_sub(self.t.margin) {
            self.state = 2;
            self.e_count = count;
            self.e_time = now;
        }
        if self.state == 2 && el >= self.t.total {
            self.state = 3;
        }
        self.state == 3
    }

    /// The sampled count and nanoseconds; a window the run stopped in is
    /// closed at `now` (a deadline, or the peer stopping, ended it first).
    fn sample(&mut self, now: Instant, count: u64) -> (u64, u64) {
        if self.state == 0 {
            self.s_count = 0;
            self.s_time = self.start;
        }
        if self.state <= 1 {
            self.e_count = count;
            self.e_time = now;
        }
        let ns = self
            .e_time
            .saturating_duration_since(self.s_time)
            .as_nanos() as u64;
        (self.e_count.saturating_sub(self.s_count), ns)
    }
}

/// Prints the progress line, about once a second.
pub struct Ticker {
    next: Instant,
    start: Instant,
    print: bool,
    tty: bool,
    shown: bool,
    label: String,
    total: u64,
    timing: Option<Timing>,
}

impl Ticker {
    /// A ticker for one size's run.
    fn new(p: &Params, size: usize) -> Ticker {
        let now = Instant::now();
        Ticker {
            next: now + Duration::from_secs(1),
            start: now,
            print: p.progress,
            tty: std::io::stderr().is_terminal(),
            shown: false,
            label: format!("{} {size} bytes", p.label),
            total: p.iters,
            timing: p.timing,
        }
    }

    /// Called with the current time and count; acts once a second.
    fn tick(&mut self, now: Instant, done: u64) {
        if now < self.next {
            return;
        }
        self.next = now + Duration::from_secs(1);
        self.show(now, done);
    }

    /// Prints the progress line for `done` messages.
    fn show(&mut self, now: Instant, done: u64) {
        if !self.print {
            return;
        }
        let el = now.saturating_duration_since(self.start).as_secs_f64();
        let mut e = std::io::stderr().lock();
        let lead = if self.tty { "\r" } else { "" };
        let _ = match self.timing {
            Some(t) => write!(
                e,
                "{lead}{}: {done} done, {el:.0}/{} s",
                self.label,
                t.total.as_secs()
            ),
            None => write!(
                e,
                "{lead}{}: {done}/{} done ({:.0}%), {el:.0} s",
                self.label,
                self.total,
                done as f64 * 100.0 / self.total.max(1) as f64
            ),
        };
        let _ = if self.tty {
            write!(e, "\x1b[K")
        } else {
            writeln!(e)
        };
        self.shown = true;
    }

    /// Clears a progress line left on a terminal.
    fn finish(&mut self) {
        if self.shown && self.tty {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
        self.shown = false;
    }
}

/// Bounded waiting: fails after the no-progress timeout.
struct Watch {
    last: Instant,
    limit: Option<Duration>,
    spins: u32,
    clock: Clock,
    /// The counter when [`Watch::spin`] last returned the time.
    looked: u64,
}

impl Watch {
    fn new(limit: Option<Duration>, clock: Clock) -> Watch {
        Watch {
            last: Instant::now(),
            limit,
            spins: 0,
            clock,
            looked: clock.now(),
        }
    }
    /// Records progress.
    fn progress(&mut self, now: Instant) {
        self.last = now;
        self.spins = 0;
    }
    /// Counts an empty poll; every [`SPIN_CHECK`] of them, if about a
    /// millisecond has passed since the last time, returns the time (the
    /// caller then also looks at its deadline: both can be system calls, too
    /// dear to make once per round trip).
    fn spin(&mut self) -> Option<Instant> {
        self.spins += 1;
        // No spin-loop hint (PAUSE): it delays noticing the very event the
        // loop waits for (about 140 cycles on recent x86, and under QEMU's
        // TCG it leaves the translated code each time), and perftest's
        // loops spin without one.
        if self.spins < SPIN_CHECK {
            return None;
        }
        self.spins = 0;
        let c = self.clock.now();
        if c.wrapping_sub(self.looked) < self.clock.check_interval() {
            return None;
        }
        self.looked = c;
        Some(Instant::now())
    }
    /// Fails if nothing happened for the timeout.
    fn check(&self, now: Instant, what: impl FnOnce() -> String) -> Result<()> {
        if let Some(l) = self.limit {
            if now.saturating_duration_since(self.last) > l {
                bail!("no progress for {}s: {}", l.as_secs(), what());
            }
        }
        Ok(())
    }
}

fn nanos(t0: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(t0).as_nanos() as u64
}

fn check_wc(w: &Wc, what: &str) -> Result<()> {
    if !w.is_success() {
        bail!(
            "{what} completion with status {} ({}), wr_id {}, vendor error {:#x}",
            w.status().as_str(),
            w.status().0,
            w.wr_id(),
            w.vendor_err()
        );
    }
    Ok(())
}

/// The number of the last request a send completion retires: its
/// `wr_id` (requests are numbered from 1 in posting order), checked
/// against the `posted` ones (the kernel or device wrote it).
#[inline]
fn retired(w: &Wc, posted: u64) -> Result<u64> {
    let n = w.wr_id();
    if n > posted {
        bail!("a send completion names request {n}, only {posted} were posted");
    }
    Ok(n)
}

/// Posts `wrs`, returning how many were taken: a full send queue (the
/// device has not yet released the slots of requests whose completion we
/// already saw) takes fewer; anything else is an error.
#[inline]
fn post_some(qp: &mut Qp, wrs: &[SendWr<'_>]) -> Result<usize> {
    match qp.post_send(wrs) {
        Ok(()) => Ok(wrs.len()),
        Err(f) if f.error() == PostError::QueueFull => Ok(f.index()),
        Err(f) => Err(rverbs::Error::from(f)).context("couldn't post send"),
    }
}

/// Scratch space of the loops, sized once for all message sizes.
pub struct Bench {
    p: Params,
    peer: Peer,
    wc: Vec<Wc>,
    /// Latency stamps: counter ticks in the loop, nanoseconds after it.
    lat_t: Vec<u64>,
    deltas: Vec<f64>,
    clock: Clock,
    posts: Vec<(u64, u64)>,
    comps: Vec<(u64, u64)>,
    /// Receives posted for the current size.
    rposted: u64,
}

impl Bench {
    /// Sizes the buffers for `p`.
    pub fn new(p: Params, peer: Peer) -> Bench {
        let lat = p.kind == Kind::Lat && p.timing.is_none();
        let peak = p.kind == Kind::Bw && p.peak && p.client;
        let n = p.iters as usize;
        Bench {
            wc: vec![Wc::default(); WC_BATCH],
            lat_t: Vec::with_capacity(if lat { n } else { 0 }),
            deltas: Vec::with_capacity(if lat { n } else { 0 }),
            posts: Vec::with_capacity(if peak { n } else { 0 }),
            comps: Vec::with_capacity(if peak {
                n / p.cq_mod.max(1) as usize + 2
            } else {
                0
            }),
            rposted: 0,
            clock: Clock::calibrate(),
            p,
            peer,
        }
    }

    /// Whether this side receives SENDs in this test.
    fn receives(&self) -> bool {
        self.p.verb == Verb::Send && (self.p.kind == Kind::Lat || !self.p.client)
    }

    /// Before the size's barrier: posts the receives of a SEND test (as
    /// many as the run needs, at most `-r`), clears the byte a WRITE
    /// latency run polls.
    pub fn prepare(&mut self, res: &mut Res<'_>, size: usize) -> Result<()> {
        self.rposted = 0;
        if self.receives() {
            let rsge = [res.mr.sge(res.half..res.half + size)?];
            let chain = [RecvWr::new(0, &rsge); CHAIN];
            let want = match self.p.timing {
                Some(_) => self.p.rx_depth as u64,
                None => (self.p.rx_depth as u64).min(self.p.iters),
            };
            while self.rposted < want {
                let k = (want - self.rposted).min(CHAIN as u64) as usize;
                res.qp
                    .post_recv(&chain[..k])
                    .context("couldn't post the receives")?;
                self.rposted += k as u64;
            }
        }
        if self.p.verb == Verb::Write && self.p.kind == Kind::Lat {
            res.mr.write_at(res.half + size - 1, &[0])?;
        }
        Ok(())
    }

    /// Runs one size on this (active) side; `go` is when the barrier
    /// released it.
    pub fn run(&mut self, res: &mut Res<'_>, size: usize, go: Instant) -> Result<Report> {
        match (self.p.kind, self.p.verb, self.p.client) {
            (Kind::Bw, Verb::Send, false) => self.bw_receiver(res, size, go),
            (Kind::Bw, _, true) => self.bw_sender(res, size),
            (Kind::Lat, Verb::Send | Verb::Write, _) => self.pingpong(res, size),
            (Kind::Lat, Verb::Read | Verb::Atomic, true) => self.one_by_one(res, size),
            _ => Err(anyhow!("this side has no loop in this test")),
        }
    }

    /// The request template of the client's operation on `size` bytes.
    fn template<'a>(
        &self,
        sges: &'a [Sge; 1],
        inl: &'a [IoSlice<'a>; 1],
        size: usize,
    ) -> SendWr<'a> {
        let use_inline =
            matches!(self.p.verb, Verb::Send | Verb::Write) && size as u64 <= self.p.inline as u64;
        let payload = if use_inline {
            Payload::Inline(inl)
        } else {
            Payload::Sge(sges)
        };
        let (peer, dest) = (self.peer, self.peer.dest());
        match self.p.verb {
            Verb::Send => opcode::Send::with_payload(0, payload).build(),
            Verb::Write => opcode::Write::with_payload(0, payload, dest, peer.rkey).build(),
            Verb::Read => SendWr::rdma_read(0, sges, peer.addr, peer.rkey),
            Verb::Atomic if self.p.cmp_swap => SendWr::cmp_swap(0, &sges[0], dest, peer.rkey, 0, 1),
            Verb::Atomic => SendWr::fetch_add(0, &sges[0], dest, peer.rkey, 1),
        }
    }

    /// The local range a client request uses.
    fn local_range(&self, res: &Res<'_>, size: usize) -> std::ops::Range<usize> {
        match self.p.verb {
            Verb::Read => res.half..res.half + size,
            Verb::Atomic => res.half..res.half + 8,
            _ => 0..size,
        }
    }

    fn check_peer(&self, size: usize) -> Result<()> {
        if (size as u64) > self.peer.room {
            bail!(
                "the peer's buffer ({} bytes a half) is smaller than the {size}-byte messages",
                self.peer.room
            );
        }
        Ok(())
    }

    /// Bandwidth, sending side: keeps up to `-t` requests in flight.
    fn bw_sender(&mut self, res: &mut Res<'_>, size: usize) -> Result<Report> {
        self.check_peer(size)?;
        let sges = [res.mr.sge(self.local_range(res, size))?];
        let inl = [IoSlice::new(
            &res.inline_src[..size.min(res.inline_src.len())],
        )];
        let template = self.template(&sges, &inl, size);
        let base = template.send_flags();
        let mut chain = [template; CHAIN];
        let (qp, scq) = (&mut *res.qp, &mut res.scq);
        let p = &self.p;
        let wc = &mut self.wc;
        let tx = p.tx_depth as u64;
        let cq_mod = p.cq_mod as u64;
        let peak = p.peak && p.timing.is_none();
        self.posts.clear();
        self.comps.clear();
        // The last request: `iters`, or (-D) one past what is posted when
        // the time is up, so the final one is signaled.
        let mut last = if p.timing.is_some() {
            u64::MAX
        } else {
            p.iters
        };
        let (mut scnt, mut ccnt) = (0u64, 0u64);
        let mut ticker = Ticker::new(p, size);
        let mut watch = Watch::new(p.limit, self.clock);
        let t0 = Instant::now();
        let mut phases = p.timing.map(|t| Phases::new(t, t0));
        let mut t_last = t0;
        loop {
            let room = (tx - (scnt - ccnt)).min(last - scnt).min(CHAIN as u64) as usize;
            if room > 0 {
                for (k, wr) in chain[..room].iter_mut().enumerate() {
                    let idx = scnt + k as u64 + 1;
                    wr.set_wr_id(idx);
                    wr.set_send_flags(if idx % cq_mod == 0 || idx == last {
                        base | SendFlags::SIGNALED
                    } else {
                        base
                    });
                }
                let t = Instant::now();
                let n = post_some(qp, &chain[..room])?;
                if peak && n > 0 {
                    self.posts.push((scnt, nanos(t0, t)));
                }
                scnt += n as u64;
            }
            let ne = scq.poll(wc).context("poll CQ failed")?;
            let mut now = None;
            if ne > 0 {
                let t = Instant::now();
                for w in &wc[..ne] {
                    check_wc(w, "send")?;
                    ccnt = retired(w, scnt)?;
                    if peak {
                        self.comps.push((ccnt, nanos(t0, t)));
                    }
                }
                t_last = t;
                watch.progress(t);
                now = Some(t);
            } else if let Some(t) = watch.spin() {
                watch.check(t, || {
                    format!("{ccnt} of {scnt} posted requests complete (tx depth {tx})")
                })?;
                now = Some(t);
            }
            if let Some(ph) = &mut phases {
                let t = match now {
                    Some(t) => t,
                    None => Instant::now(),
                };
                if last == u64::MAX && ph.update(t, ccnt) {
                    last = if scnt % cq_mod == 0 { scnt } else { scnt + 1 };
                }
                now = Some(t);
            }
            if ccnt >= last {
                break;
            }
            if let Some(t) = now {
                ticker.tick(t, ccnt);
            }
        }
        ticker.finish();
        if let Some(mut ph) = phases {
            let (n, ns) = ph.sample(t_last, ccnt);
            let mut r = stats::bw_report(size as u64, n, ns, None);
            r.flags |= Report::DURATION;
            return Ok(r);
        }
        let pk = peak.then(|| stats::peak_bw(size as u64, &self.posts, &self.comps));
        Ok(stats::bw_report(
            size as u64,
            p.iters,
            nanos(t0, t_last),
            pk,
        ))
    }

    /// Bandwidth, SEND receiver: counts receives until the last, re-posting
    /// them in chains.
    fn bw_receiver(&mut self, res: &mut Res<'_>, size: usize, go: Instant) -> Result<Report> {
        let rsge = [res.mr.sge(res.half..res.half + size)?];
        let chain = [RecvWr::new(0, &rsge); CHAIN];
        let (qp, rcq) = (&mut *res.qp, &mut res.rcq);
        let p = &self.p;
        let wc = &mut self.wc;
        let mut target = if p.timing.is_some() {
            u64::MAX
        } else {
            p.iters
        };
        let (mut rcnt, mut pending) = (0u64, 0u64);
        let mut ticker = Ticker::new(p, size);
        let mut watch = Watch::new(p.limit, self.clock);
        // The clock starts when this side released the client from the
        // barrier, before the client can send: timing from the first
        // receive would miss its transfer (and measure nothing when the
        // whole run is reaped in one poll).
        let t_first = go;
        let mut t_last = t_first;
        let mut phases = p.timing.map(|tm| Phases::new(tm, t_first));
        while rcnt < target {
            let ne = rcq.poll(wc).context("poll CQ failed")?;
            if ne > 0 {
                let t = Instant::now();
                for w in &wc[..ne] {
                    check_wc(w, "receive")?;
                }
                rcnt += ne as u64;
                pending += ne as u64;
                t_last = t;
                watch.progress(t);
                loop {
                    let can = if p.timing.is_some() {
                        pending
                    } else {
                        pending.min(p.iters - self.rposted)
                    };
                    if can == 0 {
                        break;
                    }
                    let k = can.min(CHAIN as u64) as usize;
                    qp.post_recv(&chain[..k])
                        .context("couldn't re-post receives")?;
                    self.rposted += k as u64;
                    pending -= k as u64;
                }
                // -D: this side stops on its own clock (nothing on the
                // wire says the client's is up).
                if let Some(ph) = &mut phases {
                    if ph.update(t, rcnt) {
                        target = rcnt;
                    }
                }
            } else if let Some(t) = watch.spin() {
                watch.check(t, || format!("{rcnt} of {} messages received", p.iters))?;
                if let Some(ph) = &mut phases {
                    if ph.update(t, rcnt) {
                        target = rcnt;
                    }
                }
                ticker.tick(t, rcnt);
            }
        }
        ticker.finish();
        if rcnt > target {
            bail!("received {rcnt} messages, the client sent {target}");
        }
        if let Some(mut ph) = phases {
            let (n, ns) = ph.sample(t_last, rcnt);
            let mut r = stats::bw_report(size as u64, n, ns, None);
            r.flags |= Report::DURATION;
            return Ok(r);
        }
        Ok(stats::bw_report(
            size as u64,
            p.iters,
            nanos(t_first, t_last),
            None,
        ))
    }

    /// SEND and WRITE latency: the leading side (`leads`) sends first; each side sends its
    /// next message once the peer's previous one arrived.
    fn pingpong(&mut self, res: &mut Res<'_>, size: usize) -> Result<Report> {
        self.check_peer(size)?;
        let write = self.p.verb == Verb::Write;
        let p = &self.p;
        let leads = p.leads;
        let use_inline = size as u64 <= p.inline as u64;
        let ssge = [res.mr.sge(0..size)?];
        let rsge = [res.mr.sge(res.half..res.half + size)?];
        let recv1 = [RecvWr::new(0, &rsge)];
        let poll_off = res.half + size - 1;
        if poll_off >= res.mr.len() {
            bail!("internal: poll offset outside the buffer");
        }
        let poll_ptr = (res.mr.addr() as usize + poll_off) as *const u8;
        let (dest, rkey) = (self.peer.dest(), self.peer.rkey);
        let (tx, cq_mod) = (p.tx_depth as u64, p.cq_mod as u64);
        let timed = p.timing.is_none();
        let last = if timed { p.iters } else { u64::MAX };
        let lat_t = &mut self.lat_t;
        lat_t.clear();
        let wc = &mut self.wc;
        let mut ticker = Ticker::new(p, size);
        let mut watch = Watch::new(p.limit, self.clock);
        let (mut sent, mut got, mut done) = (0u64, 0u64, 0u64);
        let clock = self.clock;
        let mut looked = clock.now();
        let mut phases: Option<Phases> = None;
        // perftest's -D: each side stops on its own clock, whatever
        // message it is waiting for.
        let deadline = p.timing.map(|t| Instant::now() + t.total);
        loop {
            if leads {
                if sent == last {
                    break;
                }
            } else {
                if got == last {
                    break;
                }
                // Wait for the leading side's next message.
                if !wait_msg(
                    write,
                    poll_ptr,
                    got + 1,
                    &mut res.rcq,
                    wc,
                    &mut watch,
                    deadline,
                )? {
                    break;
                }
                got += 1;
                if !write && (!timed || self.rposted < p.iters) {
                    res.qp
                        .post_recv(&recv1)
                        .context("couldn't re-post a receive")?;
                    self.rposted += 1;
                }
                if got == 1 {
                    phases = p.timing.map(|tm| Phases::new(tm, Instant::now()));
                }
            }
            // Send message `sent + 1`, once the send queue has room.
            let idx = sent + 1;
            while sent - done >= tx {
                let ne = res.scq.poll(wc).context("poll CQ failed")?;
                for w in &wc[..ne] {
                    check_wc(w, "send")?;
                    done = retired(w, sent)?;
                }
                if ne == 0 {
                    if let Some(t) = watch.spin() {
                        watch.check(t, || format!("send {} not complete", done + 1))?;
                    }
                }
            }
            let flags = if idx % cq_mod == 0 || idx == last {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            };
            let v = [idx as u8];
            if write {
                if use_inline {
                    res.inline_src[size - 1] = v[0];
                } else {
                    res.mr.write_at(size - 1, &v)?;
                }
            }
            let inl = [IoSlice::new(
                &res.inline_src[..if use_inline { size } else { 0 }],
            )];
            let payload = if use_inline {
                Payload::Inline(&inl)
            } else {
                Payload::Sge(&ssge)
            };
            let wr = if write {
                opcode::Write::with_payload(idx, payload, dest, rkey).build()
            } else {
                opcode::Send::with_payload(idx, payload).build()
            }
            .flags(flags);
            let c = clock.now();
            if timed {
                lat_t.push(c);
            }
            if leads && sent == 0 {
                phases = p.timing.map(|tm| Phases::new(tm, Instant::now()));
            }
            loop {
                if post_some(res.qp, std::slice::from_ref(&wr))? == 1 {
                    break;
                }
                // The device still holds a slot we saw complete: retry.
                if let Some(t) = watch.spin() {
                    watch.check(t, || format!("send {idx} not accepted (queue full)"))?;
                }
            }
            sent = idx;
            // Reap what completed meanwhile.
            let ne = res.scq.poll(wc).context("poll CQ failed")?;
            for w in &wc[..ne] {
                check_wc(w, "send")?;
                done = retired(w, sent)?;
            }
            if leads {
                if !wait_msg(
                    write,
                    poll_ptr,
                    got + 1,
                    &mut res.rcq,
                    wc,
                    &mut watch,
                    deadline,
                )? {
                    break;
                }
                got += 1;
                if !write && (!timed || self.rposted < p.iters) {
                    res.qp
                        .post_recv(&recv1)
                        .context("couldn't re-post a receive")?;
                    self.rposted += 1;
                }
            }
            // The real clock (a system call on some machines) about once a
            // millisecond, not per round trip.
            if c.wrapping_sub(looked) >= clock.check_interval() {
                looked = c;
                let now = Instant::now();
                watch.progress(now);
                if let Some(ph) = &mut phases {
                    if ph.update(now, sent) {
                        break;
                    }
                }
                ticker.tick(now, sent);
            }
        }
        // Wait for the signaled sends (in a timed run the last one is);
        // not at the end of a -D run: the peer may have stopped and gone
        // already (perftest leaves its last send behind too), and a WRITE
        // to its closed QP would end in an error.
        let want = if timed { sent } else { done };
        while done < want {
            let ne = res.scq.poll(wc).context("poll CQ failed")?;
            for w in &wc[..ne] {
                check_wc(w, "send")?;
                done = retired(w, sent)?;
            }
            if ne == 0 {
                if let Some(t) = watch.spin() {
                    watch.check(t, || format!("{done} of {sent} sends complete"))?;
                }
            }
        }
        ticker.finish();
        if let Some(mut ph) = phases {
            let (n, ns) = ph.sample(Instant::now(), sent);
            return Ok(stats::lat_duration_report(size as u64, n, ns, 2));
        }
        if p.timing.is_some() {
            // The peer ended the run before our first message.
            return Ok(stats::lat_duration_report(size as u64, 0, 0, 2));
        }
        clock.stamps_to_nanos(lat_t);
        Ok(stats::lat_report(size as u64, lat_t, 2, &mut self.deltas))
    }

    /// READ and atomic latency: one request at a time, each waited for.
    fn one_by_one(&mut self, res: &mut Res<'_>, size: usize) -> Result<Report> {
        self.check_peer(size)?;
        let sges = [res.mr.sge(self.local_range(res, size))?];
        let inl = [IoSlice::new(&[])];
        let template = self.template(&sges, &inl, size);
        let p = &self.p;
        let timed = p.timing.is_none();
        let lat_t = &mut self.lat_t;
        lat_t.clear();
        let wc = &mut self.wc;
        let mut ticker = Ticker::new(p, size);
        let mut watch = Watch::new(p.limit, self.clock);
        let clock = self.clock;
        let mut looked = clock.now();
        let mut phases = p.timing.map(|t| Phases::new(t, Instant::now()));
        let mut n = 0u64;
        loop {
            if timed && n == p.iters {
                break;
            }
            let mut wr = template.signaled();
            wr.set_wr_id(n + 1);
            let c = clock.now();
            if timed {
                lat_t.push(c);
            }
            while post_some(res.qp, std::slice::from_ref(&wr))? == 0 {
                if let Some(t) = watch.spin() {
                    watch.check(t, || format!("request {} not accepted (queue full)", n + 1))?;
                }
            }
            loop {
                let ne = res.scq.poll(&mut wc[..1]).context("poll CQ failed")?;
                if ne == 1 {
                    check_wc(&wc[0], "request")?;
                    break;
                }
                if let Some(t) = watch.spin() {
                    watch.check(t, || format!("request {} not complete", n + 1))?;
                }
            }
            n += 1;
            if c.wrapping_sub(looked) >= clock.check_interval() {
                looked = c;
                let now = Instant::now();
                watch.progress(now);
                if let Some(ph) = &mut phases {
                    if ph.update(now, n) {
                        break;
                    }
                }
                ticker.tick(now, n);
            }
        }
        ticker.finish();
        if let Some(mut ph) = phases {
            let (k, ns) = ph.sample(Instant::now(), n);
            return Ok(stats::lat_duration_report(size as u64, k, ns, 1));
        }
        clock.stamps_to_nanos(lat_t);
        Ok(stats::lat_report(size as u64, lat_t, 1, &mut self.deltas))
    }
}

/// Waits for the peer's message number `n`: for WRITE, until the polled
/// byte reads `n` (mod 256); for SEND, one receive completion. Returns
/// false at `deadline` (a `-D` run, on this side's clock).
fn wait_msg(
    write: bool,
    poll_ptr: *const u8,
    n: u64,
    rcq: &mut Cq,
    wc: &mut [Wc],
    watch: &mut Watch,
    deadline: Option<Instant>,
) -> Result<bool> {
    let want = n as u8;
    loop {
        if write {
            // SAFETY: `poll_ptr` points into the MR the caller holds
            // (bounds checked by the caller); the device writes that byte
            // behind the compiler's back, hence the volatile read, and a
            // byte read cannot tear.
            if unsafe { std::ptr::read_volatile(poll_ptr) } == want {
                return Ok(true);
            }
        } else {
            let ne = rcq.poll(&mut wc[..1]).context("poll CQ failed")?;
            if ne == 1 {
                check_wc(&wc[0], "receive")?;
                return Ok(true);
            }
        }
        if let Some(t) = watch.spin() {
            if deadline.is_some_and(|d| t >= d) {
                return Ok(false);
            }
            watch.check(t, || format!("message {n} from the peer did not arrive"))?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_completion_past_the_posted_requests_is_an_error() {
        let wc = |wr_id| Wc::from_raw(uverbs_abi_wc(wr_id));
        assert_eq!(retired(&wc(5), 5).unwrap(), 5);
        assert_eq!(retired(&wc(0), 0).unwrap(), 0);
        let e = retired(&wc(6), 5).unwrap_err().to_string();
        assert!(e.contains("names request 6, only 5 were posted"), "{e}");
    }

    fn uverbs_abi_wc(wr_id: u64) -> rverbs_abi::wr::Wc {
        rverbs_abi::wr::Wc {
            wr_id,
            ..Default::default()
        }
    }

    #[test]
    fn a_peer_buffer_past_the_address_space_is_refused() {
        let e = Peer::remote(u64::MAX - 10, 1, 4096)
            .unwrap_err()
            .to_string();
        assert!(e.contains("past the end of the address space"), "{e}");
        let p = Peer::remote(u64::MAX - 4096, 7, 4096).unwrap();
        assert_eq!((p.dest(), p.addr), (u64::MAX - 4096, u64::MAX - 4096));
        let r = Peer::remote(0x3000, 9, 4096).unwrap();
        assert_eq!((r.dest(), r.rkey, r.room), (0x3000, 9, 4096));
        assert!(Peer::remote(u64::MAX - 10, 9, 4096).is_err());
    }
}
