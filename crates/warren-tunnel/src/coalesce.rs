//! The socket under a yamux session, adapted to how yamux does I/O: it writes each frame as a
//! 12-byte header followed by the body and reads them the same way, so on a bare socket every
//! frame costs two system calls in each direction.
//!
//! [`Coalesced`] turns that back into one: small writes (headers, control frames, small
//! bodies) are held until the next write or flush and go out together with it, a large body
//! goes out in one vectored write with what is held, so it is never copied; reads fill a
//! buffer, so a header and the bodies after it arrive in one call. The first flush of held
//! bytes waits one turn of the driver task, so the frames of every stream that is ready by
//! then share the write: with many busy streams (the proxy's pooled connections) that is
//! one system call for many requests.

use bytes::{Buf, BytesMut};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Writes shorter than this are held and sent with the next one; longer ones are never copied.
const HOLD_BELOW: usize = 4 * 1024;
/// Bytes held before they are written out even without a flush.
const HOLD_MAX: usize = 256 * 1024;
/// Capacity of the hold kept once it is written out; a larger one is given back.
const HOLD_KEEP: usize = 16 * 1024;
/// Size of the read buffer: several 16 KiB data frames with their headers per call.
const READ_BUFFER: usize = 128 * 1024;
/// A read shorter than this says the traffic is small: the read buffer is given back once
/// read out, and taken again (without zeroing) for the next read, at [`READ_SMALL_BUFFER`].
const READ_SMALL: usize = 4 * 1024;
/// Size of the read buffer while reads are small: an allocation the allocator serves from
/// its free lists, where one of [`READ_BUFFER`] for each keystroke's frame could cost a
/// system call.
const READ_SMALL_BUFFER: usize = 16 * 1024;

/// Both buffers are taken only while bytes pass: a session that is idle (an agent between
/// heartbeats, of which a relay holds tens of thousands) holds neither.
pub struct Coalesced<T> {
    io: T,
    held: Vec<u8>,
    /// A flush was put off once to gather what else is ready (see `poll_flush`).
    flush_deferred: bool,
    /// Bytes read and not yet handed out; no capacity while idle.
    read_buf: BytesMut,
    /// The last read from `io` was at least [`READ_SMALL`]: keep the buffer for the next.
    bulk: bool,
}

impl<T> Coalesced<T> {
    pub fn new(io: T) -> Self {
        Coalesced {
            io,
            held: Vec::new(),
            flush_deferred: false,
            read_buf: BytesMut::new(),
            bulk: false,
        }
    }

    /// The hold is written out: a large one's memory goes back.
    fn release_hold(&mut self) {
        if self.held.capacity() > HOLD_KEEP {
            self.held = Vec::new();
        } else {
            self.held.clear();
        }
    }
}

impl<T: AsyncWrite + Unpin> Coalesced<T> {
    /// Writes out everything held.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.held.is_empty() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.held))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.held.drain(..n);
        }
        self.release_hold();
        self.flush_deferred = false;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.read_buf.is_empty() {
            // Nothing buffered: a read at least as large as the buffer gains nothing from it.
            if buf.remaining() >= READ_BUFFER {
                return Pin::new(&mut this.io).poll_read(cx, buf);
            }
            // Taken without zeroing (`poll_read_buf` reads into spare capacity), so taking it
            // again for every small read costs an allocation, not a clearing.
            this.read_buf.reserve(if this.bulk {
                READ_BUFFER
            } else {
                READ_SMALL_BUFFER
            });
            let polled =
                tokio_util::io::poll_read_buf(Pin::new(&mut this.io), cx, &mut this.read_buf);
            let n = match polled {
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => {
                    this.read_buf = BytesMut::new();
                    return Poll::Ready(Err(e));
                }
                // Nothing to read: an idle session holds no buffer while it waits.
                Poll::Pending => {
                    this.read_buf = BytesMut::new();
                    return Poll::Pending;
                }
            };
            this.bulk = n >= READ_SMALL;
        }
        let n = buf.remaining().min(this.read_buf.len());
        buf.put_slice(&this.read_buf[..n]);
        this.read_buf.advance(n);
        if this.read_buf.is_empty() && !this.bulk {
            this.read_buf = BytesMut::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if buf.len() < HOLD_BELOW && this.held.len() + buf.len() <= HOLD_MAX {
            this.held.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        if this.held.is_empty() {
            return Pin::new(&mut this.io).poll_write(cx, buf);
        }
        if !this.io.is_write_vectored() {
            ready!(this.poll_drain(cx))?;
            return Pin::new(&mut this.io).poll_write(cx, buf);
        }
        // What is held goes first; `buf` counts as written only for the bytes past it.
        loop {
            let held = this.held.len();
            let slices = [IoSlice::new(&this.held), IoSlice::new(buf)];
            let n = ready!(Pin::new(&mut this.io).poll_write_vectored(cx, &slices))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if n >= held {
                this.release_hold();
                this.flush_deferred = false;
                return Poll::Ready(Ok(n - held));
            }
            this.held.drain(..n);
        }
    }

    /// yamux flushes after every frame. The first flush of held bytes is put off by one turn
    /// of the task (it wakes itself and answers `Pending`), so the frames other streams have
    /// ready by then go out in the same write: with many busy streams, one system call
    /// carries many frames. The next flush writes.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.held.is_empty() && !self.flush_deferred {
            self.flush_deferred = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(self.poll_drain(cx))?;
        self.flush_deferred = false;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Over a pipe that cannot write vectored (held bytes drained first) and over TCP (one
    /// vectored write).
    #[tokio::test]
    async fn bytes_arrive_in_order_whatever_the_write_sizes() {
        let (a, b) = tokio::io::duplex(8 * 1024);
        let a = Plain(a);
        assert!(!a.is_write_vectored());
        in_order(a, b).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (a, b) = tokio::join!(
            tokio::net::TcpStream::connect(listener.local_addr().unwrap()),
            listener.accept()
        );
        let a = a.unwrap();
        assert!(a.is_write_vectored());
        in_order(a, b.unwrap().0).await;
    }

    /// A pipe without vectored writes.
    struct Plain<T>(T);

    impl<T: AsyncRead + Unpin> AsyncRead for Plain<T> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_read(cx, buf)
        }
    }

    impl<T: AsyncWrite + Unpin> AsyncWrite for Plain<T> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.0).poll_write(cx, buf)
        }
        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_flush(cx)
        }
        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.0).poll_shutdown(cx)
        }
    }

    async fn in_order<A, B>(a: A, b: B)
    where
        A: AsyncRead + AsyncWrite + Unpin,
        B: AsyncRead + AsyncWrite + Unpin,
    {
        let mut w = Coalesced::new(a);
        let mut r = Coalesced::new(b);
        let sizes = [12usize, 16 * 1024, 12, 3, 100_000, 12, 0, 5000, 1];
        let total: usize = sizes.iter().sum();
        let writer = async move {
            let mut next = 0u8;
            for s in sizes {
                let chunk: Vec<u8> = (0..s)
                    .map(|_| {
                        next = next.wrapping_add(1);
                        next
                    })
                    .collect();
                w.write_all(&chunk).await.unwrap();
            }
            w.flush().await.unwrap();
            w.shutdown().await.unwrap();
        };
        let reader = async move {
            let mut got = Vec::new();
            let mut small = [0u8; 7];
            // Small reads first, then the rest in one go: both paths of the read buffer.
            r.read_exact(&mut small).await.unwrap();
            got.extend_from_slice(&small);
            r.read_to_end(&mut got).await.unwrap();
            got
        };
        let ((), got) = tokio::join!(writer, reader);
        assert_eq!(got.len(), total);
        let mut next = 0u8;
        for (i, b) in got.iter().enumerate() {
            next = next.wrapping_add(1);
            assert_eq!(*b, next, "byte {i} out of order");
        }
    }

    /// What an idle relay holds per agent: neither buffer once the bytes have passed.
    #[tokio::test]
    async fn an_idle_session_holds_no_buffer() {
        use futures::FutureExt;
        let (a, b) = tokio::io::duplex(1024 * 1024);
        let mut w = Coalesced::new(a);
        let mut r = Coalesced::new(b);
        let mut got = vec![0u8; 64 * 1024];
        assert!(
            r.read(&mut got).now_or_never().is_none(),
            "nothing to read yet"
        );
        assert_eq!(r.read_buf.capacity(), 0, "no buffer while waiting");

        // A heartbeat's frame: read whole, then the buffer goes back.
        w.write_all(b"ping-frame").await.unwrap();
        w.flush().await.unwrap();
        r.read_exact(&mut got[..10]).await.unwrap();
        assert_eq!(&got[..10], b"ping-frame");
        assert_eq!(r.read_buf.capacity(), 0);

        // A burst of small writes held together: written out, the large hold goes back.
        for _ in 0..4000 {
            w.write_all(&[7u8; 12]).await.unwrap();
        }
        assert!(w.held.capacity() > HOLD_KEEP);
        w.flush().await.unwrap();
        assert_eq!(w.held.capacity(), 0, "a large hold is not kept");
        // Read in small pieces: the buffer is kept while bulk bytes are pending, and given
        // back once the reader finds nothing more.
        let mut left = 4000 * 12;
        while left > 0 {
            let n = r.read(&mut got[..100.min(left)]).await.unwrap();
            assert!(got[..n].iter().all(|b| *b == 7));
            left -= n;
        }
        assert!(r.read(&mut got).now_or_never().is_none());
        assert_eq!(r.read_buf.capacity(), 0, "no buffer once idle again");
    }

    #[tokio::test]
    async fn held_bytes_go_out_on_flush() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut w = Coalesced::new(a);
        w.write_all(b"header").await.unwrap();
        w.flush().await.unwrap();
        let mut got = [0u8; 6];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"header");
    }
}
