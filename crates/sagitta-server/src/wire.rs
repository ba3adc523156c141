//! The Flight port's answers leave in one send: everything h2 writes
//! between two of its flushes goes out together.
//!
//! h2 writes a DATA frame's payload of 256 bytes or more as a second buffer
//! beside the frame's head (vectored I/O), and must flush that pair before
//! it may queue the next frame. A search answer (333 bytes of Arrow IPC
//! for 10 hits of id and score, a few KiB with payload columns) and its
//! gRPC trailers so left in two sends: two packets, and for a client that
//! has gone to sleep on the first, a second wake-up (14-50 µs per request
//! from pyarrow on a 2-core VM; bench/results/journal-2026-11.md, "One
//! send per Flight answer"). So:
//! * [`Gathered`], each accepted connection, says it has no vectored
//!   writes, so h2 copies payloads under 1 KiB into its own buffer (16 KiB)
//!   beside their heads instead of chaining them; small writes gather
//!   until h2 flushes, and a large one (a download's frames) leaves at
//!   once with what has gathered, in one vectored send, uncopied;
//! * [`OneSend`], around the Flight service, hands h2 an answer's body of
//!   up to [`SPLIT_UP_TO`] bytes in pieces under 1 KiB, which h2 copies
//!   and queues with the trailers behind them. Larger bodies (downloads)
//!   pass as they are.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::codegen::{http, Service};
use tonic::server::NamedService;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Most bytes gathered before a send without waiting for a flush (above
/// h2's 16 KiB write buffer); a write that would pass it goes out at once.
const GATHER: usize = 32 * 1024;

/// Largest body chunk cut into pieces h2 copies (what fits its 16 KiB
/// write buffer with room for the trailers).
pub const SPLIT_UP_TO: usize = 12 * 1024;

/// A piece: under h2's 1 KiB copy threshold for connections without
/// vectored writes.
const PIECE: usize = 1000;

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

/// The Flight service with its small answers' bodies cut into pieces h2
/// copies (see the module's notes).
#[derive(Debug, Clone)]
pub struct OneSend<S>(pub S);

impl<S: NamedService> NamedService for OneSend<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, Req, B> Service<Req> for OneSend<S>
where
    S: Service<Req, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Pieces<B>>;
    type Error = S::Error;
    type Future =
        futures::future::MapOk<S::Future, fn(http::Response<B>) -> http::Response<Pieces<B>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        use futures::TryFutureExt;
        let wrap: fn(http::Response<B>) -> http::Response<Pieces<B>> = |r| r.map(Pieces::new);
        self.0.call(req).map_ok(wrap)
    }
}

/// A body whose data chunks of up to [`SPLIT_UP_TO`] bytes come out in
/// pieces of [`PIECE`] bytes (the same bytes, in order; trailers as they
/// are).
#[derive(Debug)]
pub struct Pieces<B> {
    inner: B,
    /// The rest of the chunk being cut.
    rest: Bytes,
}

impl<B> Pieces<B> {
    fn new(inner: B) -> Pieces<B> {
        Pieces {
            inner,
            rest: Bytes::new(),
        }
    }
}

impl<B> Body for Pieces<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let me = &mut *self;
        if me.rest.is_empty() {
            let frame = match ready!(Pin::new(&mut me.inner).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                other => return Poll::Ready(other),
            };
            match frame.into_data() {
                Ok(data) if data.len() > PIECE && data.len() <= SPLIT_UP_TO => me.rest = data,
                Ok(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Err(frame) => return Poll::Ready(Some(Ok(frame))),
            }
        }
        let piece = me.rest.split_to(me.rest.len().min(PIECE));
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let held = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + held);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + held);
        }
        hint
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

    /// A body of the given frames, in order.
    struct Frames(std::collections::VecDeque<Frame<Bytes>>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_empty()
        }
    }

    /// Every frame of `body`: (data chunk lengths, all data, trailers seen).
    async fn drain<B: Body<Data = Bytes> + Unpin>(mut body: B) -> (Vec<usize>, Vec<u8>, bool)
    where
        B::Error: std::fmt::Debug,
    {
        let (mut lens, mut all, mut trailers) = (Vec::new(), Vec::new(), false);
        while let Some(f) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            match f.unwrap().into_data() {
                Ok(d) => {
                    assert!(!trailers, "data after the trailers");
                    lens.push(d.len());
                    all.extend_from_slice(&d);
                }
                Err(t) => trailers = t.is_trailers(),
            }
        }
        assert!(body.is_end_stream());
        (lens, all, trailers)
    }

    fn body(chunks: &[usize]) -> (Frames, Vec<u8>) {
        let mut frames = std::collections::VecDeque::new();
        let mut all = Vec::new();
        for (c, &n) in chunks.iter().enumerate() {
            let d: Vec<u8> = (0..n).map(|i| (i * 7 + c) as u8).collect();
            all.extend_from_slice(&d);
            frames.push_back(Frame::data(Bytes::from(d)));
        }
        frames.push_back(Frame::trailers(http::HeaderMap::new()));
        (Frames(frames), all)
    }

    #[tokio::test]
    async fn a_small_answer_comes_out_in_pieces_h2_copies() {
        let (b, want) = body(&[5_000, 333]);
        let p = Pieces::new(b);
        assert_eq!(p.size_hint().lower(), 0);
        let (lens, all, trailers) = drain(p).await;
        assert_eq!(lens, [1000, 1000, 1000, 1000, 1000, 333]);
        assert!(lens.iter().all(|&n| n < 1024));
        assert_eq!(all, want);
        assert!(trailers);
    }

    #[tokio::test]
    async fn large_chunks_pass_whole() {
        let (b, want) = body(&[SPLIT_UP_TO + 1, 64 * 1024, PIECE]);
        let (lens, all, trailers) = drain(Pieces::new(b)).await;
        assert_eq!(lens, [SPLIT_UP_TO + 1, 64 * 1024, PIECE]);
        assert_eq!(all, want);
        assert!(trailers);
    }

    #[tokio::test]
    async fn the_cut_ends_at_the_chunk_limit() {
        let (b, want) = body(&[SPLIT_UP_TO]);
        let (lens, all, _) = drain(Pieces::new(b)).await;
        assert_eq!(lens.len(), SPLIT_UP_TO.div_ceil(PIECE));
        assert_eq!(all, want);
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
