//! The blocking stream's state, shared by its handles
//! ([`RdmaStream::try_clone`](super::RdmaStream::try_clone)): the
//! socket under one lock that no thread holds while it sleeps, so a
//! reader blocked in `read` never blocks a writer.
//!
//! Every call runs the socket's non-blocking operation under the lock;
//! one that would block waits. The first waiter (the *leader*) arms the
//! CQ, looks once more, and sleeps without the lock on the CQ's channel,
//! the rdma_cm fd and an eventfd; the others (*followers*) sleep on a
//! condition variable. When the leader wakes it takes the events, wakes
//! the followers (each looks again; the first still waiting leads
//! next) and looks again itself. A call that changes what a waiter may
//! be waiting for without an event of the fds (a direction closed, the
//! connection ended) wakes the leader through the eventfd and the
//! followers. Uncontended, a call costs a lock and an unlock.

use std::io;
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::eventfd::{EfdFlags, EventFd};

use super::socket::{sleep_on, Socket};
use super::CLOSE_TIMEOUT;
use rverbs::{CompChannel, Pd};

/// Which timeout a wait keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dir {
    /// The read timeout.
    Read,
    /// The write timeout.
    Write,
}

/// What the handles of one stream share.
pub(super) struct Shared {
    /// A duplicate of the connection's rdma_cm fd for the leader to sleep
    /// on. Declared first: it closes before the connection's own fd, so
    /// that closing the latter releases the rdma_cm file.
    cm: OwnedFd,
    /// The socket and the waiters' bookkeeping.
    state: Mutex<State>,
    /// Followers sleep here until the leader (or a change) wakes them.
    turn: Condvar,
    /// Wakes a sleeping leader.
    wake: EventFd,
    /// The CQ's channel (a handle on the socket's own).
    chan: CompChannel,
    /// The socket's PD, its addresses: fixed for the stream's life.
    pd: Pd,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
}

/// The socket and what the stream's handles set or wait on.
pub(super) struct State {
    pub(super) sock: Socket,
    pub(super) read_timeout: Option<Duration>,
    pub(super) write_timeout: Option<Duration>,
    /// The caller's non-blocking mode (the socket itself always runs
    /// non-blocking under the lock).
    pub(super) nonblocking: bool,
    /// Whether the CQ is armed since its channel was last drained.
    armed: bool,
    /// Whether a thread sleeps on the fds.
    leader: bool,
    /// Threads asleep on [`Shared::turn`].
    followers: u32,
}

impl Shared {
    /// The shared state of a connected socket.
    pub(super) fn new(mut sock: Socket) -> io::Result<Shared> {
        sock.nonblocking = true;
        let wake = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(|e| io::Error::other(format!("eventfd for the stream's waiters: {e}")))?;
        Ok(Shared {
            cm: sock.conn.cm_fd().try_clone_to_owned()?,
            chan: sock.chan().clone(),
            pd: sock.pd().clone(),
            local: sock.conn.local_addr(),
            peer: sock.conn.peer_addr(),
            wake,
            turn: Condvar::new(),
            state: Mutex::new(State {
                sock,
                read_timeout: None,
                write_timeout: None,
                nonblocking: false,
                armed: false,
                leader: false,
                followers: 0,
            }),
        })
    }

    /// The PD of the stream's verbs objects.
    pub(super) fn pd(&self) -> &Pd {
        &self.pd
    }

    /// This side's address, and the peer's.
    pub(super) fn addrs(&self) -> (Option<SocketAddr>, Option<SocketAddr>) {
        (self.local, self.peer)
    }

    /// The state, locked. A thread that panicked holding it left nothing
    /// unsound (the socket's bookkeeping may be off, as after a local
    /// failure): the others go on.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the state, waking the waiters if it changed what they
    /// may be waiting for. For calls that do not wait.
    pub(super) fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut g = self.lock();
        self.step(&mut g, f)
    }

    /// `f` on the locked state, then the waiters woken if the socket's
    /// status changed.
    fn step<T>(&self, g: &mut State, f: impl FnOnce(&mut State) -> T) -> T {
        let before = g.sock.status();
        let r = f(g);
        if g.sock.status() != before {
            self.wake_all(g);
        }
        r
    }

    /// Wakes the leader (if one sleeps) and the followers.
    fn wake_all(&self, g: &State) {
        if g.leader {
            // Cannot fail but by overflowing the counter, which a read
            // resets: the leader is woken either way.
            let _ = self.wake.arm();
        }
        if g.followers > 0 {
            self.turn.notify_all();
        }
    }

    /// Runs `op` until it does not fail with `WouldBlock` (or until that
    /// is the answer: the caller's non-blocking mode), waiting between
    /// tries at most the `dir` timeout in all; then `TimedOut`.
    pub(super) fn run<T>(
        &self,
        dir: Dir,
        mut op: impl FnMut(&mut Socket) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut g = self.lock();
        let mut deadline: Option<Option<Instant>> = None;
        loop {
            match self.step(&mut g, |s| op(&mut s.sock)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !g.nonblocking => {}
                r => return r,
            }
            let timeout = match dir {
                Dir::Read => g.read_timeout,
                Dir::Write => g.write_timeout,
            };
            let deadline = *deadline
                .get_or_insert_with(|| timeout.and_then(|t| Instant::now().checked_add(t)));
            let left = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "the stream's timeout passed",
                        ));
                    }
                    Some(left)
                }
                None => None,
            };
            if !g.armed {
                // A completion after this raises an event; look once more
                // for one that came before.
                self.step(&mut g, |s| s.sock.arm())?;
                g.armed = true;
                continue;
            }
            if g.leader {
                g.followers += 1;
                g = match left {
                    Some(l) => {
                        self.turn
                            .wait_timeout(g, l)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0
                    }
                    None => self.turn.wait(g).unwrap_or_else(PoisonError::into_inner),
                };
                g.followers -= 1;
                continue;
            }
            g = self.lead(g, left)?;
        }
    }

    /// Sleeps on the fds without the lock (at most `left`, or the
    /// keep-alive interval, when the quiet stream probes its peer), then
    /// takes what woke it and wakes the followers.
    fn lead<'a>(
        &'a self,
        mut g: MutexGuard<'a, State>,
        left: Option<Duration>,
    ) -> io::Result<MutexGuard<'a, State>> {
        let keepalive = g.sock.keepalive;
        let nap = match (keepalive, left) {
            (Some(k), Some(l)) => Some(k.min(l)),
            (Some(k), None) => Some(k),
            (None, l) => l,
        };
        g.leader = true;
        drop(g);
        let slept = sleep_on([self.chan.as_fd(), self.cm.as_fd(), self.wake.as_fd()], nap);
        let mut g = self.lock();
        g.leader = false;
        let r = slept.and_then(|[cq, cm, woken]| {
            if woken {
                // Resets the counter (non-blocking: nothing to read is
                // no error here).
                let _ = self.wake.read();
            }
            if cq {
                // The next round re-arms.
                g.armed = false;
            }
            self.step(&mut g, |s| {
                if cq {
                    s.sock.drain_cq_events()?;
                }
                if cm {
                    s.sock.on_cm_event()?;
                }
                if !cq && !cm && !woken && keepalive.is_some() {
                    // Quiet for an interval: a probe that cannot be
                    // delivered fails, which ends the stream.
                    s.sock.send_probe()?;
                }
                Ok(())
            })
        });
        // Whatever happened, the followers look again (one of them leads
        // if it still has to wait).
        if g.followers > 0 {
            self.turn.notify_all();
        }
        r.map(|()| g)
    }

    /// Closes `how` (waiting up to 2 s for the sends posted, under the
    /// lock), then wakes every waiter: a reader blocked in `read` sees its
    /// side closed.
    pub(super) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        let mut g = self.lock();
        let r = g.sock.shutdown(how, CLOSE_TIMEOUT);
        // The close's own wait may have taken the channel's events.
        g.armed = false;
        self.wake_all(&g);
        r
    }
}

impl Drop for Shared {
    /// The last handle closes the stream as rsockets' `rclose` does.
    fn drop(&mut self) {
        let g = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        let _ = g.sock.shutdown(Shutdown::Both, CLOSE_TIMEOUT);
    }
}
