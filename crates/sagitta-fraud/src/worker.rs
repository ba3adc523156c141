//! An API process: one thread, one epoll loop over the connections the
//! load balancer hands it (received as file descriptors over a Unix
//! socket), or, behind a proxy of the user's (`serve --backends`), those
//! it accepts on its own Unix socket. Each connection has its own buffers,
//! so a slow or half-open client never holds up another, and connections
//! past their timeouts are closed.

use crate::http::{self, Parsed, Route};
use crate::refs::{Mapped, FRAUD};
use crate::stats::Stats;
use crate::vectorize;
use anyhow::{bail, Result};
use sagitta_lowdim::LowDimScratch;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// Scores request bodies: vectorize, exact 5-NN, count the frauds.
#[derive(Debug)]
pub enum Scorer {
    /// The service: every answer from the exact search.
    Exact {
        mapped: Box<Mapped>,
        scratch: LowDimScratch,
    },
    /// A measurement floor (`serve --fixed-answer`): the same processes,
    /// balancer, HTTP framing and prebuilt answers, but no parse, vector
    /// or search; every score request is answered "0 frauds". What the
    /// host and the transport cost, for the load test's reports.
    Fixed,
}

/// Neighbours that vote.
pub const K: usize = 5;

impl Scorer {
    pub fn new(mapped: Mapped) -> Scorer {
        Scorer::Exact {
            mapped: Box::new(mapped),
            scratch: LowDimScratch::default(),
        }
    }

    /// Fraudulent references among the 5 nearest, or why the body cannot
    /// be scored.
    pub fn frauds(&mut self, body: &[u8]) -> Result<usize, String> {
        let Scorer::Exact { mapped, scratch } = self else {
            return Ok(0);
        };
        let codes = vectorize::vectorize(body, &mapped.rules).map_err(|e| e.to_string())?;
        let q = vectorize::as_f32(&codes);
        let hits = mapped
            .view
            .search(&q, K, scratch)
            .map_err(|e| e.to_string())?;
        Ok(hits.iter().filter(|h| h.label == FRAUD).count())
    }
}

/// How an API process runs its loop.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Poll for work instead of sleeping in the kernel.
    pub busy: bool,
    /// A connection with a request half read, or answers its client does
    /// not take, for this long is closed (a 408 first for a half-read
    /// request): slow-loris clients and vanished peers give their
    /// descriptors back.
    pub request_timeout: Duration,
    /// A keep-alive connection idle (nothing buffered either way) this
    /// long is closed.
    pub idle_timeout: Duration,
    /// Print this process's figures every [`crate::stats::EVERY`].
    pub stats: bool,
}

/// How often the loop looks for connections past their timeouts.
const SWEEP: Duration = Duration::from_millis(250);

/// Longest the loop runs without giving the core away: under SCHED_FIFO a
/// process that never blocks (a client pipelining without pause) would
/// otherwise keep the balancer and the other API processes on its core
/// from ever running.
const TURN: Duration = Duration::from_millis(2);

/// A wait this long slept (a wait that finds work ready takes about 1 µs).
const SLEPT: Duration = Duration::from_micros(20);

struct Conn {
    /// When bytes last came in or went out.
    last: Instant,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    /// Bytes of `out` already written.
    sent: usize,
    /// Close once `out` is written.
    closing: bool,
    /// Waiting for the socket to take more (EPOLLOUT registered).
    want_out: bool,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn epoll_ctl(ep: RawFd, op: i32, fd: RawFd, events: u32) -> i32 {
    let mut ev = libc::epoll_event {
        events,
        u64: fd as u64,
    };
    // SAFETY: plain syscall on descriptors this process owns, with a valid
    // event struct.
    unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) }
}

/// Where an API process gets its connections.
#[derive(Debug, Clone, Copy)]
pub enum Source {
    /// Sockets handed over by `serve`'s balancer on this Unix socket.
    Balancer(RawFd),
    /// Its own listening socket (non-blocking), for a balancer of the
    /// user's (HAProxy, nginx) that connects to it.
    Listener(RawFd),
}

/// Accepts every connection waiting on `listener`; `Ok(false)` when the
/// process is out of descriptors or memory (the connection waits in the
/// listener's queue), else `Ok(true)`.
fn accept_all(listener: RawFd, out: &mut Vec<RawFd>) -> Result<bool> {
    loop {
        // SAFETY: accepting on our listening socket; no address wanted.
        let c = unsafe {
            libc::accept4(
                listener,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            )
        };
        if c >= 0 {
            out.push(c);
            continue;
        }
        return match errno() {
            libc::EAGAIN | libc::EINTR | libc::ECONNABORTED => Ok(true),
            libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM => {
                eprintln!(
                    "sagitta-fraud: cannot accept: {}",
                    std::io::Error::last_os_error()
                );
                Ok(false)
            }
            _ => bail!("accept: {}", std::io::Error::last_os_error()),
        };
    }
}

/// Receives the descriptors the balancer sent (several messages may be
/// waiting); `Ok(false)` once the balancer is gone.
fn receive_fds(sock: RawFd, out: &mut Vec<RawFd>) -> Result<bool> {
    loop {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut cbuf = [0u64; 8];
        // SAFETY: zeroed msghdr is a valid empty header; the pointers set
        // below outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        // SAFETY: valid descriptor and message buffers.
        let n =
            unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = errno();
            if e == libc::EAGAIN || e == libc::EINTR {
                return Ok(true);
            }
            bail!("recvmsg: {}", std::io::Error::from_raw_os_error(e));
        }
        if n == 0 {
            return Ok(false);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            // The kernel dropped the descriptor: this process is at its
            // open-file limit. That client sees its connection closed.
            eprintln!("sagitta-fraud: a connection was dropped: too many open files");
        }
        // SAFETY: walking the control messages the kernel wrote into
        // `cbuf`, with the libc macros made for it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c).cast::<RawFd>();
                    let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                        / std::mem::size_of::<RawFd>();
                    for i in 0..count {
                        out.push(std::ptr::read_unaligned(data.add(i)));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
    }
}

/// Runs the loop over connections handed in on `lb` until the balancer
/// goes away. With `opts.busy`, the loop polls without sleeping (yielding
/// the core to the other processes on it between polls), so a request
/// never waits for a sleeping CPU to wake up.
pub fn run(source: Source, mut scorer: Scorer, opts: Options) -> Result<()> {
    let lb = match source {
        Source::Balancer(fd) | Source::Listener(fd) => fd,
    };
    let busy = opts.busy;
    raise_fd_limit();
    let scores = http::score_responses();
    let ready = http::ready();
    // SAFETY: plain syscall.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        bail!("epoll_create1: {}", std::io::Error::last_os_error());
    }
    if epoll_ctl(ep, libc::EPOLL_CTL_ADD, lb, libc::EPOLLIN as u32) < 0 {
        bail!("epoll_ctl: {}", std::io::Error::last_os_error());
    }
    let mut conns: HashMap<RawFd, Conn> = HashMap::new();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    let mut fds = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    let mut swept = Instant::now();
    // The listener, taken out of the epoll set while the process cannot
    // accept (it stays readable, and would wake the loop without pause),
    // is put back at the next sweep.
    let mut listener_paused = false;
    let mut turn = Instant::now();
    let mut stats = opts.stats.then(|| Stats::new(turn));
    loop {
        let wait_ms = if busy {
            0
        } else if conns.is_empty() && !listener_paused {
            -1
        } else {
            SWEEP.as_millis() as i32
        };
        let before = Instant::now();
        // SAFETY: `events` is a valid buffer of its length.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, wait_ms) };
        let now = Instant::now();
        if let Some(s) = &mut stats {
            s.tick(now);
        }
        if now.duration_since(swept) >= SWEEP {
            swept = now;
            sweep(&mut conns, now, &opts);
            if listener_paused && epoll_ctl(ep, libc::EPOLL_CTL_ADD, lb, libc::EPOLLIN as u32) == 0
            {
                listener_paused = false;
            }
        }
        if n == 0 {
            if busy {
                // SAFETY: plain syscall.
                unsafe { libc::sched_yield() };
            }
            turn = now;
            continue;
        }
        if now.duration_since(before) >= SLEPT {
            // The wait slept (or the process was off its core): a new turn.
            turn = now;
        } else if now.duration_since(turn) >= TURN {
            // SAFETY: plain syscall (lets same-priority processes run).
            unsafe { libc::sched_yield() };
            turn = Instant::now();
        }
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            bail!("epoll_wait: {}", std::io::Error::last_os_error());
        }
        for ev in &events[..n as usize] {
            let fd = ev.u64 as RawFd;
            if fd == lb {
                fds.clear();
                let alive = match source {
                    Source::Balancer(_) => receive_fds(lb, &mut fds)?,
                    Source::Listener(_) => {
                        if !accept_all(lb, &mut fds)? {
                            epoll_ctl(ep, libc::EPOLL_CTL_DEL, lb, 0);
                            listener_paused = true;
                        }
                        true
                    }
                };
                for &c in &fds {
                    if epoll_ctl(
                        ep,
                        libc::EPOLL_CTL_ADD,
                        c,
                        (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
                    ) == 0
                    {
                        conns.insert(
                            c,
                            Conn {
                                last: now,
                                inbuf: Vec::with_capacity(2048),
                                out: Vec::with_capacity(1024),
                                sent: 0,
                                closing: false,
                                want_out: false,
                            },
                        );
                    } else {
                        // SAFETY: closing a descriptor we received and own.
                        unsafe { libc::close(c) };
                    }
                }
                if !alive && conns.is_empty() {
                    return Ok(());
                }
                continue;
            }
            let Some(conn) = conns.get_mut(&fd) else {
                continue;
            };
            let mut dead = false;
            if ev.events
                & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32
                != 0
                && !conn.closing
            {
                // Read what is there (level-triggered: the rest comes on
                // the next wake-up), then answer every whole request.
                // SAFETY: reading into a buffer of its length.
                let r = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), chunk.len()) };
                if r > 0 {
                    conn.last = now;
                    conn.inbuf.extend_from_slice(&chunk[..r as usize]);
                    serve(conn, &mut scorer, (&scores, &ready), now, stats.as_mut());
                } else if r == 0 || !matches!(errno(), libc::EAGAIN | libc::EINTR) {
                    dead = true;
                }
            }
            if !dead {
                dead = flush(fd, ep, conn, now);
            }
            if dead {
                conns.remove(&fd);
                // SAFETY: closing a connection we own; closing removes it
                // from the epoll set.
                unsafe { libc::close(fd) };
            }
        }
    }
}

/// Answers every whole request in the buffer, in order.
/// `woke`: when the loop woke to read them (for `stats`).
fn serve(
    conn: &mut Conn,
    scorer: &mut Scorer,
    (scores, ready): (&[Vec<u8>; 6], &[u8]),
    woke: Instant,
    mut stats: Option<&mut Stats>,
) {
    let mut at = 0;
    while !conn.closing {
        match http::parse(&conn.inbuf[at..]) {
            Parsed::Partial => break,
            Parsed::Refused(r) => {
                conn.out.extend_from_slice(&http::refusal(r));
                conn.closing = true;
            }
            Parsed::Request(h) => {
                let body = &conn.inbuf[at + h.body.0..at + h.body.0 + h.body.1];
                let start = conn.out.len();
                match h.route {
                    Route::Score => {
                        let began = stats.as_ref().map(|_| Instant::now());
                        match scorer.frauds(body) {
                            Ok(f) => conn.out.extend_from_slice(&scores[f]),
                            Err(why) => conn.out.extend_from_slice(&http::bad_request(&why)),
                        }
                        if let (Some(s), Some(b)) = (stats.as_deref_mut(), began) {
                            s.record(woke, b);
                        }
                    }
                    Route::Ready => conn.out.extend_from_slice(ready),
                    Route::Method => conn.out.extend_from_slice(&http::method_not_allowed()),
                    Route::NotFound => conn.out.extend_from_slice(&http::not_found()),
                }
                if h.head_only {
                    // HEAD: the same head, no body.
                    let head = http::head_len(&conn.out[start..]);
                    conn.out.truncate(start + head);
                }
                at += h.len;
                conn.closing = h.close;
            }
        }
    }
    conn.inbuf.drain(..at);
}

/// Writes what the socket takes; returns whether the connection is done.
fn flush(fd: RawFd, ep: RawFd, conn: &mut Conn, now: Instant) -> bool {
    while conn.sent < conn.out.len() {
        let rest = &conn.out[conn.sent..];
        // SAFETY: writing from a buffer of its length; MSG_NOSIGNAL keeps a
        // closed peer from killing the process.
        let w = unsafe { libc::send(fd, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
        if w < 0 {
            match errno() {
                libc::EINTR => continue,
                libc::EAGAIN => {
                    if !conn.want_out {
                        conn.want_out = true;
                        // Back-pressure: stop reading from a client that
                        // does not read its answers until they drain.
                        epoll_ctl(ep, libc::EPOLL_CTL_MOD, fd, libc::EPOLLOUT as u32);
                    }
                    return false;
                }
                _ => return true,
            }
        }
        conn.sent += w as usize;
        conn.last = now;
    }
    conn.out.clear();
    conn.sent = 0;
    if conn.want_out {
        conn.want_out = false;
        epoll_ctl(
            ep,
            libc::EPOLL_CTL_MOD,
            fd,
            (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
        );
    }
    conn.closing
}

/// Closes the connections past their timeouts (see [`Options`]).
fn sweep(conns: &mut HashMap<RawFd, Conn>, now: Instant, opts: &Options) {
    conns.retain(|&fd, c| {
        let busy = !c.inbuf.is_empty() || c.sent < c.out.len();
        let limit = if busy {
            opts.request_timeout
        } else {
            opts.idle_timeout
        };
        if now.duration_since(c.last) < limit {
            return true;
        }
        if !c.inbuf.is_empty() && c.out.is_empty() {
            let r = http::request_timeout();
            // SAFETY: a best-effort write from a buffer of its length.
            unsafe {
                libc::send(
                    fd,
                    r.as_ptr().cast(),
                    r.len(),
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
        }
        // SAFETY: closing a connection we own (and forget here).
        unsafe { libc::close(fd) };
        false
    });
}

/// The open-file limit raised to its hard maximum: each connection is a
/// descriptor.
fn raise_fd_limit() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}
