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

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Writes shorter than this are held and sent with the next one; longer ones are never copied.
const HOLD_BELOW: usize = 4 * 1024;
/// Bytes held before they are written out even without a flush.
const HOLD_MAX: usize = 256 * 1024;
/// Size of the read buffer: several 16 KiB data frames with their headers per call.
const READ_BUFFER: usize = 128 * 1024;

pub struct Coalesced<T> {
    io: T,
    held: Vec<u8>,
    /// A flush was put off once to gather what else is ready (see `poll_flush`).
    flush_deferred: bool,
    read_buf: Box<[u8]>,
    read_pos: usize,
    read_end: usize,
}

impl<T> Coalesced<T> {
    pub fn new(io: T) -> Self {
        Coalesced {
            io,
            held: Vec::with_capacity(HOLD_MAX),
            flush_deferred: false,
            read_buf: vec![0u8; READ_BUFFER].into_boxed_slice(),
            read_pos: 0,
            read_end: 0,
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
        if this.read_pos == this.read_end {
            // Nothing buffered: a read at least as large as the buffer gains nothing from it.
            if buf.remaining() >= this.read_buf.len() {
                return Pin::new(&mut this.io).poll_read(cx, buf);
            }
            let mut fill = ReadBuf::new(&mut this.read_buf);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut fill))?;
            this.read_pos = 0;
            this.read_end = fill.filled().len();
        }
        let n = buf.remaining().min(this.read_end - this.read_pos);
        buf.put_slice(&this.read_buf[this.read_pos..this.read_pos + n]);
        this.read_pos += n;
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
                this.held.clear();
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
