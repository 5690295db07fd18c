//! Shared helpers for the conformance suites in `tests/tests/`. The suites
//! need a real rxe device and run inside the VM (`cargo xtask test`); on a
//! machine without one they fail loudly rather than skip. Also the device
//! choice of the `mlx5_*` programs (`src/bin/`), which run on the host
//! against the emulated ConnectX-5.

#![forbid(unsafe_code)]

use std::time::Duration;

pub mod batch;
pub mod step;

use rverbs::{AccessFlags, ConnectOpts, Context, Cq, Pd, Qp, QpCap, QpInitAttr, QpType, Wc};

/// The device an `mlx5_*` program runs on: the one named `name` (its
/// `argv[1]`), else the first mlx5 device; otherwise a message listing
/// the devices there are.
pub fn mlx5_device(name: Option<&str>) -> Result<rverbs::Device, String> {
    let devs = rverbs::devices().map_err(|e| format!("listing devices: {e}"))?;
    let found = devs.iter().find(|d| match name {
        Some(n) => d.name() == n,
        None => *d.driver() == rverbs::Driver::Mlx5,
    });
    found.cloned().ok_or_else(|| {
        let list: Vec<String> = devs
            .iter()
            .map(|d| format!("{} ({})", d.name(), d.driver()))
            .collect();
        match name {
            Some(n) => format!("no device named {n} among {list:?}"),
            None => format!("no mlx5 device among {} device(s): {list:?}", devs.len()),
        }
    })
}

/// How long a test waits for completions before failing.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Opens the rxe device the suite runs on: `$RVERBS_TEST_DEVICE`, else the
/// first rxe device. Panics with a clear message if there is none.
pub fn open_rxe() -> Context {
    let devs = rverbs::devices().expect("listing RDMA devices");
    let want = std::env::var("RVERBS_TEST_DEVICE").ok();
    let dev = devs
        .iter()
        .find(|d| match &want {
            Some(n) => d.name() == n,
            None => *d.driver() == rverbs::Driver::Rxe,
        })
        .unwrap_or_else(|| {
            panic!(
                "no rxe device found (devices: {:?}); this suite runs in the VM: `cargo xtask test`",
                devs.iter().map(|d| d.name()).collect::<Vec<_>>()
            )
        });
    dev.open().expect("opening the rxe device")
}

/// Remote and local access for test MRs and QPs.
pub fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// Two connected QPs on one device, each with its own CQ.
pub struct Pair {
    /// The device context.
    pub ctx: Context,
    /// The PD of both QPs.
    pub pd: Pd,
    /// A's CQ (send and receive).
    pub cq_a: Cq,
    /// B's CQ (send and receive).
    pub cq_b: Cq,
    /// QP A.
    pub a: Qp,
    /// QP B.
    pub b: Qp,
}

/// Options for [`Pair::with`].
#[derive(Clone, Copy, Debug)]
pub struct PairOpts {
    /// Transport.
    pub qp_type: QpType,
    /// Capacities of both QPs.
    pub cap: QpCap,
    /// CQ depth.
    pub cqe: u32,
    /// QP access flags of both QPs.
    pub access: AccessFlags,
    /// Connection knobs (port, GID index filled in automatically).
    pub connect: ConnectOpts,
}

impl Default for PairOpts {
    fn default() -> Self {
        PairOpts {
            qp_type: QpType::Rc,
            cap: QpCap {
                max_send_wr: 32,
                max_recv_wr: 32,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 128,
            },
            cqe: 64,
            access: all_access(),
            connect: ConnectOpts::default(),
        }
    }
}

impl Default for Pair {
    fn default() -> Self {
        Pair::new()
    }
}

impl Pair {
    /// A connected RC pair with default options.
    pub fn new() -> Pair {
        Pair::with(PairOpts::default())
    }

    /// A connected pair.
    pub fn with(o: PairOpts) -> Pair {
        Pair::with_context(open_rxe(), o)
    }

    /// A connected pair on the open device `ctx` (port 1).
    pub fn with_context(ctx: Context, o: PairOpts) -> Pair {
        let pd = ctx.alloc_pd().expect("alloc_pd");
        let cq_a = ctx.create_cq(o.cqe).expect("create_cq a");
        let cq_b = ctx.create_cq(o.cqe).expect("create_cq b");
        let mk = |cq: &Cq| {
            pd.create_qp(&QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                qp_type: o.qp_type,
                cap: o.cap,
                sq_sig_all: false,
            })
            .expect("create_qp")
        };
        let mut a = mk(&cq_a);
        let mut b = mk(&cq_b);
        let gid = ctx.default_gid_index(1).expect("gid index");
        let oa = ConnectOpts {
            sgid_index: gid,
            sq_psn: 100,
            ..o.connect
        };
        let ob = ConnectOpts {
            sgid_index: gid,
            sq_psn: 200,
            ..o.connect
        };
        let ea = a.endpoint(&oa).expect("endpoint a");
        let eb = b.endpoint(&ob).expect("endpoint b");
        a.connect(&eb, o.access, &oa).expect("connect a");
        b.connect(&ea, o.access, &ob).expect("connect b");
        Pair {
            ctx,
            pd,
            cq_a,
            cq_b,
            a,
            b,
        }
    }
}

/// Waits for exactly `n` completions on `cq` (failing after [`TIMEOUT`]).
pub fn wait(cq: &mut Cq, n: usize) -> Vec<Wc> {
    let mut wc = vec![Wc::default(); n];
    cq.poll_until(&mut wc, n, TIMEOUT)
        .unwrap_or_else(|e| panic!("waiting for {n} completions: {e}"));
    wc
}

/// Waits for one completion and asserts it succeeded.
pub fn wait_ok(cq: &mut Cq) -> Wc {
    let wc = wait(cq, 1)[0];
    assert!(wc.is_success(), "completion failed: {wc:?}");
    wc
}

/// Asserts no completion arrives within `d`.
pub fn assert_quiet(cq: &mut Cq, d: Duration) {
    let mut wc = [Wc::default(); 1];
    let end = std::time::Instant::now() + d;
    while std::time::Instant::now() < end {
        assert_eq!(
            cq.poll(&mut wc).expect("poll"),
            0,
            "unexpected completion {:?}",
            wc[0]
        );
    }
}

/// A deterministic byte pattern.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// The running kernel's (major, minor) version: some rxe behaviour differs
/// between the kernels the suite covers, and tests assert each exactly.
pub fn kernel_release() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("reading osrelease");
    let mut it = r
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// The pinging side of the wake-up race tests (`api.rs`, `async_tokio.rs`),
/// on its own thread: for each of `rounds` rounds `i`, posts a receive for
/// the reply, spins a delay that sweeps 0 to ~60 us (so that the message
/// reaches the peer before, during and after the peer's arm), sends `i` as
/// an 8-byte message, and spins on `cq` until the reply completes. Returns
/// the QP once every round got its reply.
pub fn spawn_pinger(mut qp: Qp, mut cq: Cq, pd: &Pd, rounds: u64) -> std::thread::JoinHandle<Qp> {
    let mut msg = pd.alloc_mr(64, all_access()).unwrap();
    let reply = pd.alloc_mr(64, all_access()).unwrap();
    std::thread::spawn(move || {
        let s = [msg.sge(..).unwrap()];
        let r = [reply.sge(..).unwrap()];
        let mut wc = [Wc::default(); 1];
        for i in 0..rounds {
            qp.post_recv(&[rverbs::RecvWr::new(i, &r)]).unwrap();
            let delay = Duration::from_nanos((i * 7919) % 60_000);
            let t = std::time::Instant::now();
            while t.elapsed() < delay {
                std::hint::spin_loop();
            }
            msg.write_at(0, &i.to_le_bytes()).unwrap();
            qp.post_send(&[rverbs::SendWr::send(i, &s)]).unwrap();
            cq.poll_until(&mut wc, 1, TIMEOUT)
                .unwrap_or_else(|e| panic!("round {i}: the reply: {e}"));
            assert!(wc[0].is_success() && wc[0].wr_id() == i, "{:?}", wc[0]);
        }
        drop((msg, reply));
        qp
    })
}
