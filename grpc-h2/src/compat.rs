//! The socket as h2 wants it: h2 is written against tokio's io traits, the broker's sockets
//! (glommio's `TcpStream`, `broker_base::tls::Stream`) implement the futures-io ones. The
//! adapter forwards each call unchanged; no runtime is involved, a poll is a poll.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Buf, Bytes};
use futures_lite::{AsyncRead, AsyncWrite};

/// A futures-io stream seen through tokio's io traits, optionally with bytes already read
/// from it in front (the connection path reads the first bytes to tell the protocol apart
/// before it knows the peer speaks HTTP/2).
#[derive(Debug)]
pub struct Compat<S> {
    io: S,
    prefix: Bytes,
    /// When bytes last came from the peer.
    heard: Rc<Cell<Instant>>,
}

impl<S> Compat<S> {
    /// `io` as it is.
    pub fn new(io: S) -> Self {
        Self::with_prefix(io, Bytes::new())
    }

    /// `io` with `prefix` read first: the bytes taken from the socket before this adapter.
    pub fn with_prefix(io: S, prefix: Bytes) -> Self {
        Compat {
            io,
            prefix,
            heard: Rc::new(Cell::new(Instant::now())),
        }
    }

    /// When bytes last came from the peer (at first, when the adapter was made), kept up to
    /// date as the stream is read.
    pub fn heard(&self) -> Rc<Cell<Instant>> {
        self.heard.clone()
    }

    /// The stream inside.
    pub fn get_ref(&self) -> &S {
        &self.io
    }
}

impl<S: AsyncRead + Unpin> tokio::io::AsyncRead for Compat<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        // futures-io reads into an initialized slice: the part of `buf` never initialized is
        // zeroed first (with h2, tokio-util's whole spare read buffer on every read).
        let unfilled = buf.initialize_unfilled();
        match Pin::new(&mut this.io).poll_read(cx, unfilled) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    this.heard.set(Instant::now());
                }
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncWrite + Unpin> tokio::io::AsyncWrite for Compat<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_close(cx)
    }
}
