//! [`StoredSlice`]: bytes of one or more whole stored records, shared rather than copied.

use std::rc::Rc;

use bytes::Bytes;
use glommio::io::{DmaBuffer, ReadResult};

use crate::storage::ReadBytes;

/// Bytes of one or more consecutive whole records. Zero-copy where possible: a range of an
/// Rc'd sealed tail chunk, or of one aligned read's buffer; owned bytes only for the
/// unsealed current chunk and the buffered-I/O fallback.
#[derive(Clone)]
pub struct StoredSlice {
    repr: Repr,
}

#[derive(Clone)]
enum Repr {
    Chunk {
        buf: Rc<DmaBuffer>,
        start: usize,
        len: usize,
    },
    Read(ReadResult),
    Owned(Bytes),
}

impl StoredSlice {
    pub(crate) fn from_chunk(buf: Rc<DmaBuffer>, start: usize, len: usize) -> Self {
        debug_assert!(start + len <= buf.len());
        StoredSlice {
            repr: Repr::Chunk { buf, start, len },
        }
    }

    pub(crate) fn owned(b: Bytes) -> Self {
        StoredSlice {
            repr: Repr::Owned(b),
        }
    }

    /// `len` bytes at `start` of a read; `None` if out of range.
    pub(crate) fn from_read(r: &ReadBytes, start: usize, len: usize) -> Option<Self> {
        if start + len > r.as_bytes().len() {
            return None;
        }
        let repr = match r {
            ReadBytes::Dma(rr) => Repr::Read(ReadResult::slice(rr, start, len)?),
            ReadBytes::Owned(b) => Repr::Owned(b.slice(start..start + len)),
        };
        Some(StoredSlice { repr })
    }

    pub fn as_bytes(&self) -> &[u8] {
        match &self.repr {
            Repr::Chunk { buf, start, len } => &buf.as_bytes()[*start..*start + *len],
            Repr::Read(r) => r,
            Repr::Owned(b) => b,
        }
    }

    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An owned copy, to cross cores (the zero-copy forms are `!Send`).
    pub fn to_bytes(&self) -> Bytes {
        match &self.repr {
            Repr::Owned(b) => b.clone(),
            _ => Bytes::copy_from_slice(self.as_bytes()),
        }
    }

    /// Whether this slice shares memory instead of owning a copy (for the copy-count tests).
    pub fn is_zero_copy(&self) -> bool {
        !matches!(self.repr, Repr::Owned(_))
    }
}

impl std::fmt::Debug for StoredSlice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredSlice")
            .field("len", &self.len())
            .field("zero_copy", &self.is_zero_copy())
            .finish()
    }
}
