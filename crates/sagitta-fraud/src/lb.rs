//! The load balancer: accepts on the service port and hands each accepted
//! socket, round robin, to an API process over a Unix socket
//! (`SCM_RIGHTS`). It never reads a request: after the hand-off the API
//! process talks to the client directly, so the balancer adds one
//! `sendmsg` per connection and nothing per request.

use anyhow::{bail, Context, Result};
use std::os::fd::RawFd;

fn os_err(what: &str) -> anyhow::Error {
    anyhow::anyhow!("{what}: {}", std::io::Error::last_os_error())
}

/// A listening TCP socket on `addr:port` (port 0: any), with a deep
/// backlog; returns it and the port bound.
pub fn listen(addr: std::net::Ipv4Addr, port: u16) -> Result<(RawFd, u16)> {
    // SAFETY: plain syscalls on a socket this function creates; the
    // sockaddr structs are fully initialised.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(os_err("socket"));
        }
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            4,
        );
        let mut sa: libc::sockaddr_in = std::mem::zeroed();
        sa.sin_family = libc::AF_INET as _;
        sa.sin_port = port.to_be();
        sa.sin_addr.s_addr = u32::from(addr).to_be();
        if libc::bind(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of_val(&sa) as _,
        ) < 0
        {
            return Err(os_err(&format!("bind {addr}:{port}")));
        }
        if libc::listen(fd, 4096) < 0 {
            return Err(os_err("listen"));
        }
        let mut len = std::mem::size_of_val(&sa) as libc::socklen_t;
        if libc::getsockname(fd, (&mut sa as *mut libc::sockaddr_in).cast(), &mut len) < 0 {
            return Err(os_err("getsockname"));
        }
        Ok((fd, u16::from_be(sa.sin_port)))
    }
}

/// Sends `fd` over the Unix socket `to`.
fn hand_off(to: RawFd, fd: RawFd) -> std::io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut cbuf = [0u64; 4];
    // SAFETY: building one SCM_RIGHTS control message in `cbuf` (large
    // enough for one descriptor) with the libc macros made for it; every
    // pointer outlives the call.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        loop {
            if libc::sendmsg(to, &msg, libc::MSG_NOSIGNAL) >= 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Accepts forever, handing connections to `workers` in turn (a worker
/// whose socket fails is skipped; with none left, an error).
pub fn run(listener: RawFd, workers: &[RawFd]) -> Result<()> {
    let mut alive: Vec<RawFd> = workers.to_vec();
    let mut next = 0usize;
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
        if c < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR | libc::ECONNABORTED | libc::EPROTO) => continue,
                Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                    // Out of descriptors or memory: back off instead of
                    // spinning (under SCHED_FIFO a spin would keep the API
                    // processes on this core from ever freeing any).
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                }
                _ => return Err(e).context("accept"),
            }
        }
        let one: libc::c_int = 1;
        // SAFETY: setting an option on the socket just accepted.
        unsafe {
            libc::setsockopt(
                c,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&one as *const libc::c_int).cast(),
                4,
            )
        };
        loop {
            if alive.is_empty() {
                bail!("every API process is gone");
            }
            next %= alive.len();
            match hand_off(alive[next], c) {
                Ok(()) => {
                    next += 1;
                    break;
                }
                Err(e) => {
                    eprintln!("sagitta-fraud: API process {next} unreachable ({e}); skipping it");
                    alive.remove(next);
                }
            }
        }
        // SAFETY: the worker holds its own copy now.
        unsafe { libc::close(c) };
    }
}
