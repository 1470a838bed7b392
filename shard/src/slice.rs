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
    /// `len` bytes at `start` of one whole read, kept whole so that neighbours can be
    /// joined.
    Read {
        read: ReadResult,
        start: usize,
        len: usize,
    },
    Owned(Bytes),
    /// `len` bytes at `start` of one owned copy of several records, kept whole so that
    /// neighbours can be joined.
    Shared {
        whole: Bytes,
        start: usize,
        len: usize,
    },
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

    /// `len` bytes at `start` of `whole`, a copy several slices share.
    pub(crate) fn shared(whole: &Bytes, start: usize, len: usize) -> Self {
        debug_assert!(start + len <= whole.len());
        StoredSlice {
            repr: Repr::Shared {
                whole: whole.clone(),
                start,
                len,
            },
        }
    }

    /// `len` bytes at `start` of a read; `None` if out of range.
    pub(crate) fn from_read(r: &ReadBytes, start: usize, len: usize) -> Option<Self> {
        if start + len > r.as_bytes().len() {
            return None;
        }
        let repr = match r {
            ReadBytes::Dma(rr) => Repr::Read {
                read: rr.clone(),
                start,
                len,
            },
            ReadBytes::Owned(b) => Repr::Owned(b.slice(start..start + len)),
        };
        Some(StoredSlice { repr })
    }

    pub fn as_bytes(&self) -> &[u8] {
        match &self.repr {
            Repr::Chunk { buf, start, len } => &buf.as_bytes()[*start..*start + *len],
            Repr::Read { read, start, len } => &read[*start..*start + *len],
            Repr::Owned(b) => b,
            Repr::Shared { whole, start, len } => &whole[*start..*start + *len],
        }
    }

    /// `self` and `next` as one slice, if `next` starts where `self` ends in the same buffer
    /// (records that were read or appended together), so they can be sent with one copy.
    pub fn joined(&self, next: &StoredSlice) -> Option<StoredSlice> {
        let repr = match (&self.repr, &next.repr) {
            (
                Repr::Chunk { buf, start, len },
                Repr::Chunk {
                    buf: b2,
                    start: s2,
                    len: l2,
                },
            ) if Rc::ptr_eq(buf, b2) && start + len == *s2 => Repr::Chunk {
                buf: Rc::clone(buf),
                start: *start,
                len: len + l2,
            },
            // Two live reads that start at the same address are the same read.
            (
                Repr::Read { read, start, len },
                Repr::Read {
                    read: r2,
                    start: s2,
                    len: l2,
                },
            ) if read.as_ptr() == r2.as_ptr() && start + len == *s2 => Repr::Read {
                read: read.clone(),
                start: *start,
                len: len + l2,
            },
            (
                Repr::Shared { whole, start, len },
                Repr::Shared {
                    whole: w2,
                    start: s2,
                    len: l2,
                },
            ) if whole.as_ptr() == w2.as_ptr() && start + len == *s2 => Repr::Shared {
                whole: whole.clone(),
                start: *start,
                len: len + l2,
            },
            _ => return None,
        };
        Some(StoredSlice { repr })
    }

    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// The first `n` bytes (at most all of them), sharing the same memory.
    pub(crate) fn prefix(&self, n: usize) -> StoredSlice {
        let cut = |len: usize| len.min(n);
        let repr = match &self.repr {
            Repr::Chunk { buf, start, len } => Repr::Chunk {
                buf: Rc::clone(buf),
                start: *start,
                len: cut(*len),
            },
            Repr::Read { read, start, len } => Repr::Read {
                read: read.clone(),
                start: *start,
                len: cut(*len),
            },
            Repr::Owned(b) => Repr::Owned(b.slice(..cut(b.len()))),
            Repr::Shared { whole, start, len } => Repr::Shared {
                whole: whole.clone(),
                start: *start,
                len: cut(*len),
            },
        };
        StoredSlice { repr }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An owned copy, to cross cores (the zero-copy forms are `!Send`).
    pub fn to_bytes(&self) -> Bytes {
        match &self.repr {
            Repr::Owned(b) => b.clone(),
            Repr::Shared { whole, start, len } => whole.slice(*start..*start + *len),
            _ => Bytes::copy_from_slice(self.as_bytes()),
        }
    }

    /// Whether this slice shares memory instead of owning a copy (for the copy-count tests).
    pub fn is_zero_copy(&self) -> bool {
        !matches!(self.repr, Repr::Owned(_) | Repr::Shared { .. })
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
