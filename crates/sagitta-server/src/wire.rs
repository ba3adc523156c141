//! The Flight port's connections: everything h2 writes between two of its
//! flushes leaves in one send.
//!
//! h2 writes a DATA frame's payload of 256 bytes or more as a second buffer
//! beside the frame's head (vectored I/O), and must flush that pair before
//! it may queue the next frame. A search answer (333 bytes of Arrow IPC
//! for 10 hits of id and score) and its gRPC trailers so left in two
//! sends: two packets, and for a client that has gone to sleep on the
//! first, a second wake-up (14-50 µs per request from pyarrow on a 2-core
//! VM; BENCHMARKS.md, "One send per Flight answer"). Here the connection
//! says it has no vectored writes, so h2 copies payloads under 1 KiB into
//! its own buffer instead and queues the trailers behind them; small
//! writes gather here until h2 flushes, and a large one (a download's
//! frames) leaves at once with what has gathered, in one vectored send,
//! uncopied. (An answer of 1 KiB or more is still followed by a flush
//! inside h2, so its trailers leave in a second send, as before.)

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Most bytes gathered before a send without waiting for a flush; a write
/// that would pass it goes out at once.
const GATHER: usize = 8 * 1024;

/// An accepted Flight connection whose small writes leave at each flush.
#[derive(Debug)]
pub struct Gathered {
    tcp: TcpStream,
    /// Bytes accepted and not yet sent: `buf[sent..]`.
    buf: Vec<u8>,
    sent: usize,
}

impl Gathered {
    /// Wraps an accepted connection.
    pub fn new(tcp: TcpStream) -> Gathered {
        Gathered {
            tcp,
            buf: Vec::with_capacity(GATHER),
            sent: 0,
        }
    }

    fn pending(&self) -> usize {
        self.buf.len() - self.sent
    }

    /// Records `n` bytes of the gathered ones as sent.
    fn advance(&mut self, n: usize) {
        self.sent += n;
        if self.sent == self.buf.len() {
            self.buf.clear();
            self.sent = 0;
        }
    }

    /// Sends what has gathered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.pending() > 0 {
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, &self.buf[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.advance(n);
        }
        Poll::Ready(Ok(()))
    }
}

impl Connected for Gathered {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.tcp.connect_info()
    }
}

impl AsyncRead for Gathered {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Gathered {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        if me.pending() + data.len() <= GATHER {
            me.buf.extend_from_slice(data);
            return Poll::Ready(Ok(data.len()));
        }
        // Too much to hold: what has gathered and this write, in one send.
        while me.pending() > 0 {
            let parts = [IoSlice::new(&me.buf[me.sent..]), IoSlice::new(data)];
            let held = me.pending();
            let n = ready!(Pin::new(&mut me.tcp).poll_write_vectored(cx, &parts))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            me.advance(n.min(held));
            if n > held {
                return Poll::Ready(Ok(n - held));
            }
        }
        Pin::new(&mut me.tcp).poll_write(cx, data)
    }

    /// No: h2 then copies small payloads beside their frame heads rather
    /// than chaining them (and flushing before the next frame).
    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn pair() -> (Gathered, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), l.accept());
        let server = Gathered::new(accepted.unwrap().0);
        (server, client.unwrap())
    }

    #[tokio::test]
    async fn writes_wait_for_the_flush_and_leave_together() {
        let (mut server, mut client) = pair().await;
        assert!(!server.is_write_vectored());
        server.write_all(b"frame head ").await.unwrap();
        server.write_all(&[7u8; 600]).await.unwrap();
        server.write_all(b" trailers").await.unwrap();
        let mut probe = [0u8; 16];
        assert_eq!(
            client.try_read(&mut probe).unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "nothing may leave before the flush"
        );
        server.flush().await.unwrap();
        let mut got = vec![0u8; 11 + 600 + 9];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[..11], b"frame head ");
        assert!(got[11..611].iter().all(|&b| b == 7));
        assert_eq!(&got[611..], b" trailers");
    }

    #[tokio::test]
    async fn a_large_write_leaves_at_once_behind_what_gathered() {
        let (mut server, mut client) = pair().await;
        server.write_all(b"head").await.unwrap();
        // Several times the socket's buffers: partial sends on the way.
        let big: Vec<u8> = (0..64 * GATHER + 100).map(|i| (i % 251) as u8).collect();
        let want = big.clone();
        // All but the last GATHER bytes arrive with no flush (the large
        // write carries the gathered head with it); the rest at the flush.
        let early = 4 + big.len() - GATHER;
        let (go, flushed) = tokio::sync::oneshot::channel::<()>();
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 4 + want.len()];
            client.read_exact(&mut got[..early]).await.unwrap();
            go.send(()).unwrap();
            client.read_exact(&mut got[early..]).await.unwrap();
            assert_eq!(&got[..4], b"head");
            assert!(got[4..] == want[..], "bytes out of order or lost");
        });
        server.write_all(&big).await.unwrap();
        flushed.await.unwrap();
        server.flush().await.unwrap();
        reader.await.unwrap();
    }

    #[tokio::test]
    async fn reads_pass_through() {
        let (mut server, mut client) = pair().await;
        client.write_all(b"ticket").await.unwrap();
        let mut got = [0u8; 6];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ticket");
    }
}
