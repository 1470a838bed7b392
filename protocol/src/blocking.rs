//! Blocking helpers over any `Read`/`Write` (std sockets), for the NameServer and the client.

use std::io::{IoSlice, Read, Write};

use bytes::BytesMut;

use crate::{encode_frame_prefix, Decoded, Frame, FrameDecoder, Header, ProtocolError};

/// Writes one frame: prefix and header, then the body, without copying the body. Small
/// bodies are copied behind the header (one write); large ones go out with a vectored write,
/// so the frame still leaves in one system call (and, with TCP_NODELAY, without a lone
/// header segment ahead of it).
pub fn write_frame<W: Write>(w: &mut W, header: &Header, body: &[u8]) -> Result<(), ProtocolError> {
    let mut prefix = BytesMut::new();
    encode_frame_prefix(header, body.len(), &mut prefix)?;
    if body.len() <= 4096 {
        prefix.extend_from_slice(body);
        w.write_all(&prefix)?;
        return Ok(());
    }
    let (mut head, mut tail): (&[u8], &[u8]) = (&prefix, body);
    while !head.is_empty() {
        let n = match w.write_vectored(&[IoSlice::new(head), IoSlice::new(tail)]) {
            Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if n >= head.len() {
            tail = &tail[n - head.len()..];
            head = &[];
        } else {
            head = &head[n..];
        }
    }
    w.write_all(tail)?;
    Ok(())
}

/// Bytes asked of the stream per read: large enough that a multi-MiB pull response takes
/// few system calls.
const READ_CHUNK_BYTES: usize = 256 * 1024;

/// Reads frames from a blocking stream.
///
/// Reads land in a scratch buffer that is zeroed once, at creation, and then appended to the
/// frame buffer: the old way (growing the frame buffer with zeros up to its capacity before
/// every read) wrote 64 KiB or more per read, which cost more than the data itself when
/// responses are small and frequent.
pub struct FrameReader<R> {
    inner: R,
    buf: BytesMut,
    scratch: Box<[u8]>,
    decoder: FrameDecoder,
}

impl<R: Read> FrameReader<R> {
    pub fn new(inner: R, frame_bytes_max: u32) -> Self {
        FrameReader {
            inner,
            buf: BytesMut::with_capacity(READ_CHUNK_BYTES),
            scratch: vec![0u8; READ_CHUNK_BYTES].into_boxed_slice(),
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
            let n = self.inner.read(&mut self.scratch)?;
            self.buf.extend_from_slice(&self.scratch[..n]);
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
#[allow(clippy::unwrap_used)] // a panic in a test is a failure, not a crash
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

    /// A reader that hands out at most `step` bytes per call, as a socket may.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// A writer that takes at most `step` bytes per call.
    struct Choppy {
        out: Vec<u8>,
        step: usize,
    }

    impl Write for Choppy {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let n = b.len().min(self.step);
            self.out.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn partial_writes_still_make_whole_frames() {
        let body = vec![5u8; 100_000];
        let mut whole = Vec::new();
        write_frame(
            &mut whole,
            &Header::request(7, Command::GetTopicList),
            &body,
        )
        .unwrap();
        for step in [1, 3, 1000, 65_536] {
            let mut w = Choppy {
                out: Vec::new(),
                step,
            };
            write_frame(&mut w, &Header::request(7, Command::GetTopicList), &body).unwrap();
            assert_eq!(w.out, whole, "step {step}");
        }
    }

    #[test]
    fn frames_split_across_reads_and_larger_than_a_read() {
        let mut wire = Vec::new();
        let big = vec![9u8; 3 * READ_CHUNK_BYTES + 17];
        for i in 0..50u64 {
            let body: &[u8] = if i % 10 == 3 { &big } else { b"small body" };
            write_frame(&mut wire, &Header::request(i, Command::GetTopicList), body).unwrap();
        }
        for step in [1, 7, 4096, usize::MAX] {
            let mut r = FrameReader::new(Trickle { data: &wire, step }, 16 << 20);
            for i in 0..50u64 {
                let f = r.next_frame().unwrap().unwrap();
                assert_eq!(f.header.request_id, i);
                let want = if i % 10 == 3 { big.len() } else { 10 };
                assert_eq!(f.body.len(), want);
            }
            assert!(r.next_frame().unwrap().is_none());
        }
        // A stream that ends inside a frame is an error, not a clean end.
        let cut = &wire[..wire.len() - 3];
        let mut r = FrameReader::new(
            Trickle {
                data: cut,
                step: 4096,
            },
            16 << 20,
        );
        let mut last = Ok(None);
        for _ in 0..51 {
            last = r.next_frame();
            if !matches!(last, Ok(Some(_))) {
                break;
            }
        }
        assert!(last.is_err());
    }
}
