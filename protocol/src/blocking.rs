//! Blocking helpers over any `Read`/`Write` (std sockets), for the NameServer and the client.

use std::io::{Read, Write};

use bytes::BytesMut;

use crate::{encode_frame_prefix, Decoded, Frame, FrameDecoder, Header, ProtocolError};

/// Writes one frame: prefix and header, then the body, without copying the body.
pub fn write_frame<W: Write>(w: &mut W, header: &Header, body: &[u8]) -> Result<(), ProtocolError> {
    let mut prefix = BytesMut::new();
    encode_frame_prefix(header, body.len(), &mut prefix)?;
    if body.len() <= 4096 {
        prefix.extend_from_slice(body);
        w.write_all(&prefix)?;
    } else {
        w.write_all(&prefix)?;
        w.write_all(body)?;
    }
    Ok(())
}

/// Reads frames from a blocking stream.
pub struct FrameReader<R> {
    inner: R,
    buf: BytesMut,
    decoder: FrameDecoder,
}

impl<R: Read> FrameReader<R> {
    pub fn new(inner: R, frame_bytes_max: u32) -> Self {
        FrameReader {
            inner,
            buf: BytesMut::with_capacity(64 * 1024),
            decoder: FrameDecoder::new(frame_bytes_max),
        }
    }

    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The next frame or oversized notice; `Ok(None)` at a clean end of stream.
    pub fn read_decoded(&mut self) -> Result<Option<Decoded>, ProtocolError> {
        loop {
            if let Some(d) = self.decoder.decode(&mut self.buf)? {
                return Ok(Some(d));
            }
            if self.buf.capacity() - self.buf.len() < 16 * 1024 {
                self.buf.reserve(64 * 1024);
            }
            let start = self.buf.len();
            let cap = self.buf.capacity();
            self.buf.resize(cap, 0);
            let n = match self.inner.read(&mut self.buf[start..]) {
                Ok(n) => n,
                Err(e) => {
                    self.buf.truncate(start);
                    return Err(e.into());
                }
            };
            self.buf.truncate(start + n);
            if n == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(ProtocolError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed in the middle of a frame",
                )));
            }
        }
    }

    /// Like [`FrameReader::read_decoded`] but treats an oversized frame from the peer as an error.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ProtocolError> {
        match self.read_decoded()? {
            None => Ok(None),
            Some(Decoded::Frame(f)) => Ok(Some(f)),
            Some(Decoded::Oversized { frame_len, .. }) => Err(ProtocolError::FrameTooLarge {
                len: frame_len,
                max: self.decoder.frame_bytes_max(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Command;

    #[test]
    fn write_then_read() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &Header::request(1, Command::GetTopicList), b"").unwrap();
        write_frame(
            &mut wire,
            &Header::request(2, Command::GetClusterInfo),
            &vec![7u8; 10_000],
        )
        .unwrap();
        let mut r = FrameReader::new(&wire[..], 1 << 20);
        let a = r.next_frame().unwrap().unwrap();
        let b = r.next_frame().unwrap().unwrap();
        assert_eq!(a.header.request_id, 1);
        assert_eq!(b.body.len(), 10_000);
        assert!(r.next_frame().unwrap().is_none());
    }
}
