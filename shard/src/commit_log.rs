//! CommitLog: the append-only log of one shard, made of fixed-size segment files named by
//! their 20-digit start offset, plus its in-memory tail.
//!
//! Offsets, always: `durable_offset <= written_offset <= write_offset`.
//! * `write_offset`: next byte to append (in memory).
//! * `written_offset`: every byte below is in the segment files (writes completed).
//! * `durable_offset`: every byte below has been fdatasynced.
//!
//! The tail is a sequence of chunks, each an aligned DMA buffer covering an aligned range of
//! one segment. Appends copy into the current chunk; sealing trims it to whole blocks and
//! queues it (as an `Rc`) for one O_DIRECT write; once written it stays in the hot ring for
//! zero-copy reads until `hot_bytes_max` pushes it out. A chunk starts at
//! `align_down(write_offset)` and begins with a copy of the partial last block, so each
//! block is always rewritten whole.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::rc::Rc;

use bytes::Bytes;
use glommio::io::DmaBuffer;
use message::{
    Peek, RecordView, BLANK_MAGIC_CODE, BLANK_RECORD_MIN_BYTES, FIXED_BYTES, MAGIC_CODE,
    OFF_PHYSICAL_OFFSET,
};

use crate::layout::{offset_name, parse_offset_name};
use crate::quarantine::{QuarantinedRange, LOGGED_RANGES_MAX};
use crate::slice::StoredSlice;
use crate::storage::{align_down, align_up, FaultInjector, ReadBytes, SegmentFile, BLOCK_BYTES};
use crate::tail_ring::TailRing;
use crate::ShardError;

/// Bytes read at a time by the recovery scan.
const SCAN_WINDOW_BYTES: usize = 1 << 20;
/// Spare chunk buffers kept for reuse.
const FREE_BUFFERS_MAX: usize = 4;
/// A chunk that cannot take the next batch is filled to its end with a blank record when at
/// most this fraction of it is left, so it is written whole and its buffer recycled;
/// otherwise it is padded to the next block and trimmed, and its buffer is freed. A quarter
/// covers batches up to 1 MiB in 4 MiB chunks: at 400 KiB batches and 1/16 most chunks were
/// trimmed, and the fresh buffer each then needed cost the core 40% more per message. The
/// price is log space: half a batch per chunk on average (about 5% at 400 KiB batches).
const PAD_TO_END_FRACTION: u64 = 4;

struct Chunk {
    base: u64,
    /// First offset appended into this chunk (bytes before it are the copied partial block).
    own_start: u64,
    buf: DmaBuffer,
    /// The allocation behind `buf` (a recycled buffer may have been trimmed before).
    alloc_bytes: u64,
    /// Bytes filled, counted from `base`.
    len: usize,
    /// `base + len`, or the segment end once an end-of-segment blank is in the chunk.
    logical_end: u64,
    /// When the chunk was started (for the async policy's "seal only if idle long").
    started: std::time::Instant,
}

#[derive(Clone)]
pub(crate) struct Sealed {
    pub(crate) base: u64,
    own_start: u64,
    data_end: u64,
    pub(crate) logical_end: u64,
    pub(crate) buf: Rc<DmaBuffer>,
    /// The buffer's allocation, which a trimmed `buf` still holds whole: what the hot ring
    /// counts against `hot_bytes_max`.
    alloc_bytes: u64,
}

/// Where a run of the log from some offset can be read (see [`CommitLog::run_at`]).
pub(crate) enum RunAt {
    Memory(StoredSlice),
    /// The segment file, and how many bytes from the offset it holds written.
    Disk(Rc<SegmentFile>, usize),
    Gone,
}

pub(crate) enum Located {
    Memory(StoredSlice),
    Disk(Rc<SegmentFile>),
    Gone,
}

pub(crate) struct CommitLog {
    pub(crate) dir: PathBuf,
    pub(crate) segment_bytes: u64,
    chunk_bytes: usize,
    hot_bytes_max: u64,
    pub(crate) faults: Option<std::sync::Arc<FaultInjector>>,
    pub(crate) segments: BTreeMap<u64, Rc<SegmentFile>>,
    current: Option<Chunk>,
    pub(crate) unwritten: VecDeque<Sealed>,
    hot: VecDeque<Sealed>,
    hot_bytes: u64,
    pub(crate) min_offset: u64,
    pub(crate) write_offset: u64,
    pub(crate) written_offset: u64,
    pub(crate) durable_offset: u64,
    pub(crate) dirty_segments: BTreeSet<u64>,
    /// Spare buffers with their allocations' sizes.
    free_buffers: Vec<(DmaBuffer, u64)>,
    /// Whole chunk buffers kept for the log's life (see `ShardConfig::chunk_pool`); 0 keeps
    /// up to [`FREE_BUFFERS_MAX`] spares instead.
    chunk_pool: usize,
    /// Chunk buffers allocated rather than recycled, since open.
    pub(crate) buffers_allocated: u64,
    /// The shared-memory copy of every byte placed in a chunk (async policies): what makes
    /// an append acknowledged from memory survive a crash of the process.
    pub(crate) ring: Option<TailRing>,
}

impl CommitLog {
    pub(crate) fn segment_start(&self, offset: u64) -> u64 {
        offset - offset % self.segment_bytes
    }

    fn check_offsets(&self) {
        assert!(
            self.durable_offset <= self.written_offset && self.written_offset <= self.write_offset,
            "offset invariant broken: durable {} written {} write {}",
            self.durable_offset,
            self.written_offset,
            self.write_offset
        );
    }

    /// Bytes appended but not yet written to files.
    pub(crate) fn unwritten_bytes(&self) -> u64 {
        self.write_offset - self.written_offset
    }

    /// The most log bytes one append of a `len`-byte batch can add: a filler ending the
    /// current chunk (up to a quarter of it, or to the next block), an end-of-segment jump
    /// (less than the batch and a blank header), and the batch itself.
    pub(crate) fn append_reach(&self, len: usize) -> u64 {
        2 * len as u64
            + self.chunk_bytes as u64 / PAD_TO_END_FRACTION
            + 2 * BLOCK_BYTES
            + BLANK_RECORD_MIN_BYTES as u64
    }

    /// Whether the tail ring has room for an append of `len` bytes without overwriting
    /// bytes not yet written (always, without a ring).
    pub(crate) fn ring_has_room(&self, len: usize) -> bool {
        match &self.ring {
            None => true,
            Some(r) => self.unwritten_bytes() + self.append_reach(len) <= r.ring_bytes(),
        }
    }

    /// Bytes appended but not yet durable.
    pub(crate) fn dirty_bytes(&self) -> u64 {
        self.write_offset - self.durable_offset
    }

    fn new_chunk(&mut self, at: u64, needed: usize, partial: &[u8]) {
        let base = align_down(at);
        debug_assert_eq!(partial.len() as u64, at - base);
        let seg_end = self.segment_start(at) + self.segment_bytes;
        let need = align_up((at - base) + needed as u64);
        let cap = need.max(self.chunk_bytes as u64).min(seg_end - base) as usize;
        // Recycled buffers spare the page faults of fresh allocations, and the heap the
        // fragmentation of freeing and allocating 4 MiB blocks. A buffer trimmed by an
        // early seal serves as a smaller chunk if the batch fits in it.
        let (mut buf, alloc_bytes) = match self.free_buffers.pop() {
            Some((b, alloc)) if b.len() as u64 >= need => (b, alloc),
            spare => {
                // In a pool every spare is whole: one too small for this batch (bigger than a
                // chunk) serves the next chunk. Otherwise a trimmed spare too small is let go,
                // so it cannot keep the others from being reached.
                if self.chunk_pool > 0 {
                    self.free_buffers.extend(spare);
                }
                self.buffers_allocated += 1;
                (glommio::allocate_dma_buffer(cap), cap as u64)
            }
        };
        if buf.len() > cap {
            buf.trim_to_size(cap);
        }
        buf.as_bytes_mut()[..partial.len()].copy_from_slice(partial);
        self.current = Some(Chunk {
            base,
            own_start: at,
            buf,
            alloc_bytes,
            len: partial.len(),
            logical_end: at,
            started: std::time::Instant::now(),
        });
    }

    /// The partial block before `at` as the newest sealed chunk holds it.
    fn partial_block_before(&self, at: u64) -> Vec<u8> {
        let base = align_down(at);
        if base == at {
            return Vec::new();
        }
        let last = self.unwritten.back().or(self.hot.back());
        match last {
            Some(s) if s.base <= base && s.data_end >= at => {
                let from = (base - s.base) as usize;
                s.buf.as_bytes()[from..from + (at - base) as usize].to_vec()
            }
            // Unreachable by construction: the newest chunk is never evicted.
            _ => panic!("no chunk holds the partial block before {at}"),
        }
    }

    /// Seals the current chunk if it holds appended bytes and queues it for writing.
    /// Returns whether something was sealed.
    pub(crate) fn seal(&mut self) -> bool {
        let Some(c) = self.current.take() else {
            return false;
        };
        if c.logical_end == c.own_start {
            self.current = Some(c);
            return false;
        }
        let Chunk {
            base,
            own_start,
            mut buf,
            alloc_bytes,
            len,
            logical_end,
            ..
        } = c;
        let padded = align_up(len as u64) as usize;
        // A chunk sealed because it is (nearly) full is written whole, so its buffer can be
        // recycled (a trimmed buffer cannot grow back); the zeros past the data land in the
        // preallocated region past the log end, which the next chunk rewrites anyway.
        // Chunks sealed early (a flush) are trimmed to whole blocks.
        let nearly_full = buf.len() - padded <= buf.len() / 16;
        let keep = if nearly_full { buf.len() } else { padded };
        // Bytes past the data go to disk too: make them zeros, never stale memory.
        buf.as_bytes_mut()[len..keep].fill(0);
        buf.trim_to_size(keep);
        self.unwritten.push_back(Sealed {
            base,
            own_start,
            data_end: base + len as u64,
            logical_end,
            buf: Rc::new(buf),
            alloc_bytes,
        });
        true
    }

    /// Seals the current chunk if it was started at least `age` ago: a younger one is
    /// still filling and will be sealed full, which keeps writes large and buffers
    /// recyclable. Returns the end of the sealed log (everything below it is sealed).
    pub(crate) fn seal_if_older(&mut self, age: std::time::Duration) -> u64 {
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.started.elapsed() >= age)
        {
            self.seal();
        }
        match &self.current {
            Some(c) => c.own_start,
            None => self.write_offset,
        }
    }

    /// Reserves `len` bytes (one batch) and lets `fill` write them at their offset.
    /// A batch never spans chunks or segments. Returns the batch's offset and whether a
    /// chunk was sealed on the way (so the flusher should be woken).
    pub(crate) fn append_with(
        &mut self,
        len: usize,
        fill: impl FnOnce(u64, &mut [u8]) -> Result<(), ShardError>,
    ) -> Result<(u64, bool), ShardError> {
        assert!(len as u64 + BLANK_RECORD_MIN_BYTES as u64 <= self.segment_bytes);
        let mut sealed = false;
        let at = loop {
            let at = self.write_offset;
            let seg_end = self.segment_start(at) + self.segment_bytes;
            let remaining = seg_end - at;
            if !(len as u64 == remaining || len as u64 + BLANK_RECORD_MIN_BYTES as u64 <= remaining)
            {
                self.end_segment(&mut sealed);
                continue;
            }
            if !self.chunk_fits(at, len) && self.pad_to_block() {
                // The batch goes to the next chunk; this one now ends on a block boundary.
                continue;
            }
            self.ensure_room(at, len, &mut sealed);
            break at;
        };
        let Some(c) = self.current.as_mut() else {
            unreachable!("ensure_room made a chunk");
        };
        let from = (at - c.base) as usize;
        let dest = &mut c.buf.as_bytes_mut()[from..from + len];
        fill(at, dest)?;
        if let Some(ring) = self.ring.as_mut() {
            // From the chunk the batch was just stamped into, while it is in cache.
            ring.mirror(at, dest);
        }
        c.len = from + len;
        c.logical_end = at + len as u64;
        self.write_offset = at + len as u64;
        self.check_offsets();
        Ok((at, sealed))
    }

    /// Ends the current segment: an 8-byte blank header at the write offset says "the rest
    /// is filler"; the rest of the preallocated file is zeros already, so it need not be
    /// written. The log goes on at the next segment's start.
    fn end_segment(&mut self, sealed: &mut bool) {
        let at = self.write_offset;
        let seg_end = self.segment_start(at) + self.segment_bytes;
        let remaining = seg_end - at;
        debug_assert!(remaining >= BLANK_RECORD_MIN_BYTES as u64);
        self.ensure_room(at, BLANK_RECORD_MIN_BYTES, sealed);
        let Some(c) = self.current.as_mut() else {
            unreachable!("ensure_room made a chunk");
        };
        let from = (at - c.base) as usize;
        let hdr = &mut c.buf.as_bytes_mut()[from..from + BLANK_RECORD_MIN_BYTES];
        message::write_blank(hdr);
        hdr[0..4].copy_from_slice(&(remaining as i32).to_be_bytes());
        if let Some(ring) = self.ring.as_mut() {
            ring.mirror(at, hdr);
        }
        c.len = from + BLANK_RECORD_MIN_BYTES;
        c.logical_end = seg_end;
        self.write_offset = seg_end;
        *sealed |= self.seal();
    }

    /// A replica's append: `bytes` (whole records and fillers another log holds at the
    /// write offset) are placed exactly there, never padded, so that both logs keep the
    /// same offsets; with `ends_segment` the segment is then ended as the other log ended
    /// it. The caller checked that the bytes stay inside the segment. Returns whether a
    /// chunk was sealed on the way.
    pub(crate) fn place(&mut self, bytes: &[u8], ends_segment: bool) -> bool {
        let mut sealed = false;
        if !bytes.is_empty() {
            let at = self.write_offset;
            self.ensure_room(at, bytes.len(), &mut sealed);
            let Some(c) = self.current.as_mut() else {
                unreachable!("ensure_room made a chunk");
            };
            let from = (at - c.base) as usize;
            let dest = &mut c.buf.as_bytes_mut()[from..from + bytes.len()];
            dest.copy_from_slice(bytes);
            if let Some(ring) = self.ring.as_mut() {
                ring.mirror(at, dest);
            }
            c.len = from + bytes.len();
            c.logical_end = at + bytes.len() as u64;
            self.write_offset = at + bytes.len() as u64;
        }
        if ends_segment {
            self.end_segment(&mut sealed);
        }
        self.check_offsets();
        sealed
    }

    /// Forgets everything in memory past nothing: a replica's truncation to `end`, once
    /// every chunk is written (`unwritten` is empty). The caller cleaned the files past
    /// `end` and gives the partial block before it for the next chunk.
    pub(crate) fn truncate_memory(&mut self, end: u64, partial: &[u8]) {
        debug_assert!(self.unwritten.is_empty());
        self.current = None;
        while let Some(old) = self.hot.pop_front() {
            self.hot_bytes -= old.alloc_bytes;
        }
        self.write_offset = end;
        self.written_offset = end;
        self.durable_offset = end;
        self.dirty_segments.clear();
        if let Some(ring) = self.ring.as_mut() {
            ring.forget_from(end);
        }
        if !partial.is_empty() {
            self.new_chunk(end, 0, partial);
        }
        self.check_offsets();
    }

    /// Moves an empty log's start to `offset` (a segment start): a replica that joins a
    /// log whose older segments are gone begins where that log now begins.
    pub(crate) fn start_at(&mut self, offset: u64) {
        debug_assert!(offset.is_multiple_of(self.segment_bytes));
        debug_assert!(self.current.is_none() && self.unwritten.is_empty());
        self.min_offset = offset;
        self.write_offset = offset;
        self.written_offset = offset;
        self.durable_offset = offset;
        if let Some(ring) = self.ring.as_mut() {
            ring.set_written(offset);
        }
        self.check_offsets();
    }

    /// The longest run of bytes from `from` that one place holds: a chunk in memory (at
    /// most `max` bytes of it), or the segment file, up to what is written there.
    pub(crate) fn run_at(&self, from: u64, max: usize) -> RunAt {
        if from < self.min_offset || from >= self.write_offset {
            return RunAt::Gone;
        }
        if let Some(c) = self.current.as_ref() {
            let data_end = c.base + c.len as u64;
            if from >= c.own_start && from < data_end {
                let to = data_end.min(from + max as u64);
                let at = (from - c.base) as usize;
                let b = &c.buf.as_bytes()[at..at + (to - from) as usize];
                return RunAt::Memory(StoredSlice::owned(Bytes::copy_from_slice(b)));
            }
        }
        for ring in [&self.unwritten, &self.hot] {
            let i = ring.partition_point(|s| s.own_start <= from);
            if i > 0 {
                let s = &ring[i - 1];
                if from < s.data_end {
                    let to = s.data_end.min(from + max as u64);
                    return RunAt::Memory(StoredSlice::from_chunk(
                        s.buf.clone(),
                        (from - s.base) as usize,
                        (to - from) as usize,
                    ));
                }
            }
        }
        let seg = self.segment_start(from);
        match self.segments.get(&seg) {
            Some(f) if from < self.written_offset => {
                let to = (seg + self.segment_bytes)
                    .min(self.written_offset)
                    .min(from + max as u64);
                RunAt::Disk(f.clone(), (to - from) as usize)
            }
            _ => RunAt::Gone,
        }
    }

    fn chunk_fits(&self, at: u64, len: usize) -> bool {
        self.current
            .as_ref()
            .is_some_and(|c| c.logical_end == at && (at - c.base) as usize + len <= c.buf.len())
    }

    /// Ends the current chunk on a block boundary with a blank filler record, when it holds
    /// appended bytes and ends mid-block: the next chunk then starts on that boundary, so
    /// the two writes never cover the same block and may be in flight together (two
    /// overlapping O_DIRECT writes may land in either order). A nearly full chunk (see
    /// [`PAD_TO_END_FRACTION`]) is filled to its end, so it is written whole and its buffer
    /// recycled. Returns whether it padded; chunks sealed for a flush are not padded (their
    /// successor waits instead).
    fn pad_to_block(&mut self) -> bool {
        let at = self.write_offset;
        let Some(c) = self.current.as_mut() else {
            return false;
        };
        let end = c.base + c.len as u64;
        if c.logical_end != at || end != at || at == c.own_start || at.is_multiple_of(BLOCK_BYTES) {
            return false;
        }
        let cap_end = c.base + c.buf.len() as u64;
        let mut fill_end = if cap_end - end <= c.buf.len() as u64 / PAD_TO_END_FRACTION {
            cap_end
        } else {
            align_up(end)
        };
        if fill_end - end < BLANK_RECORD_MIN_BYTES as u64 {
            fill_end += BLOCK_BYTES;
        }
        if fill_end > cap_end {
            return false;
        }
        let from = c.len;
        let to = (fill_end - c.base) as usize;
        let filler = &mut c.buf.as_bytes_mut()[from..to];
        message::write_blank(filler);
        if let Some(ring) = self.ring.as_mut() {
            // The rest of a filler is zeros: replay writes them from its header.
            ring.mirror(end, &filler[..BLANK_RECORD_MIN_BYTES]);
        }
        c.len = to;
        c.logical_end = fill_end;
        self.write_offset = fill_end;
        true
    }

    fn ensure_room(&mut self, at: u64, len: usize, sealed: &mut bool) {
        if self.chunk_fits(at, len) {
            return;
        }
        let partial = match self.current.as_ref() {
            Some(c) if c.logical_end == at => {
                let from = (align_down(at) - c.base) as usize;
                c.buf.as_bytes()[from..(at - c.base) as usize].to_vec()
            }
            _ => Vec::new(),
        };
        *sealed |= self.seal();
        self.current = None;
        let partial = if partial.is_empty() && align_down(at) != at {
            self.partial_block_before(at)
        } else {
            partial
        };
        self.new_chunk(at, len, &partial);
    }

    /// Where `offset..offset + len` lies in the unsealed chunk, if it does.
    fn in_current(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let c = self.current.as_ref()?;
        let end = offset + len as u64;
        if offset >= self.min_offset
            && end <= self.write_offset
            && offset >= c.own_start
            && end <= c.base + c.len as u64
        {
            let from = (offset - c.base) as usize;
            return c.buf.as_bytes().get(from..from + len);
        }
        None
    }

    /// [`CommitLog::locate`] for many spans. The ones in the unsealed chunk (which is still
    /// being appended to, so it cannot be shared) are copied into one buffer together: one
    /// allocation per read rather than one per record, and one run to send.
    pub(crate) fn locate_all(&self, spans: &[(u64, usize)]) -> Vec<Located> {
        let mut out: Vec<Located> = Vec::with_capacity(spans.len());
        let mut current: Vec<(usize, &[u8])> = Vec::new();
        for (i, &(o, l)) in spans.iter().enumerate() {
            match self.in_current(o, l) {
                Some(b) => {
                    current.push((i, b));
                    out.push(Located::Gone);
                }
                None => out.push(self.locate_sealed(o, l)),
            }
        }
        if current.is_empty() {
            return out;
        }
        let mut copy = bytes::BytesMut::with_capacity(current.iter().map(|(_, b)| b.len()).sum());
        let mut ranges = Vec::with_capacity(current.len());
        for &(i, b) in &current {
            ranges.push((i, copy.len(), b.len()));
            copy.extend_from_slice(b);
        }
        let whole = copy.freeze();
        for (i, start, len) in ranges {
            out[i] = Located::Memory(StoredSlice::shared(&whole, start, len));
        }
        out
    }

    /// Where the bytes `[offset, offset + len)` can be read from.
    pub(crate) fn locate(&self, offset: u64, len: usize) -> Located {
        match self.in_current(offset, len) {
            // The unsealed chunk is still being appended to: copy (documented).
            Some(b) => Located::Memory(StoredSlice::owned(Bytes::copy_from_slice(b))),
            None => self.locate_sealed(offset, len),
        }
    }

    /// The segment file holding `offset..offset + len` when only the file holds it (the
    /// bytes are in none of the in-memory chunks).
    pub(crate) fn disk_file(&self, offset: u64, len: usize) -> Option<Rc<SegmentFile>> {
        if self.in_current(offset, len).is_some() {
            return None;
        }
        match self.locate_sealed(offset, len) {
            Located::Disk(f) => Some(f),
            _ => None,
        }
    }

    /// [`CommitLog::locate`] for bytes not in the unsealed chunk.
    fn locate_sealed(&self, offset: u64, len: usize) -> Located {
        let end = offset + len as u64;
        if offset < self.min_offset || end > self.write_offset {
            return Located::Gone;
        }
        for ring in [&self.unwritten, &self.hot] {
            let i = ring.partition_point(|s| s.own_start <= offset);
            if i > 0 {
                let s = &ring[i - 1];
                if end <= s.data_end {
                    let from = (offset - s.base) as usize;
                    return Located::Memory(StoredSlice::from_chunk(s.buf.clone(), from, len));
                }
            }
        }
        if end <= self.written_offset {
            if let Some(f) = self.segments.get(&self.segment_start(offset)) {
                return Located::Disk(f.clone());
            }
        }
        Located::Gone
    }

    /// The `i`-th oldest unwritten chunk, to be written by the flusher.
    pub(crate) fn unwritten_at(&self, i: usize) -> Option<Sealed> {
        self.unwritten.get(i).cloned()
    }

    /// Marks the oldest unwritten chunk as written and moves it to the hot ring.
    pub(crate) fn mark_written(&mut self) {
        let Some(s) = self.unwritten.pop_front() else {
            return;
        };
        self.dirty_segments.insert(self.segment_start(s.base));
        self.written_offset = self.written_offset.max(s.logical_end);
        if let Some(ring) = self.ring.as_mut() {
            ring.set_written(self.written_offset);
        }
        self.hot_bytes += s.alloc_bytes;
        self.hot.push_back(s);
        // Keep the newest chunk: the next one copies its partial last block.
        while self.hot_bytes > self.hot_bytes_max && self.hot.len() > 1 {
            if let Some(old) = self.hot.pop_front() {
                self.hot_bytes -= old.alloc_bytes;
                self.recycle(old.buf, old.alloc_bytes);
            }
        }
        self.check_offsets();
    }

    /// Keeps chunk buffers no reader holds any more. Without a pool, a few, trimmed ones
    /// too while at least a sixteenth of a chunk is left of them. With one, up to the pool's
    /// size, each whole: a trimmed buffer goes back to the allocator and a whole one is
    /// taken at once, which in io_uring buffer memory is the same block again, with no
    /// fault and no fragmentation.
    fn recycle(&mut self, buf: Rc<DmaBuffer>, alloc_bytes: u64) {
        if self.chunk_pool > 0 {
            if self.free_buffers.len() >= self.chunk_pool {
                return;
            }
            let Ok(b) = Rc::try_unwrap(buf) else {
                return;
            };
            if b.len() == self.chunk_bytes {
                self.free_buffers.push((b, alloc_bytes));
            } else {
                drop(b);
                self.add_whole_spare();
            }
            return;
        }
        if self.free_buffers.len() < FREE_BUFFERS_MAX && buf.len() >= self.chunk_bytes / 16 {
            if let Ok(b) = Rc::try_unwrap(buf) {
                self.free_buffers.push((b, alloc_bytes));
            }
        }
    }

    /// Allocates the chunk pool (see `ShardConfig::chunk_pool`).
    fn fill_pool(&mut self) {
        while self.free_buffers.len() < self.chunk_pool {
            self.add_whole_spare();
        }
    }

    /// Allocates one whole chunk buffer as a spare.
    fn add_whole_spare(&mut self) {
        self.buffers_allocated += 1;
        let b = glommio::allocate_dma_buffer(self.chunk_bytes);
        self.free_buffers.push((b, self.chunk_bytes as u64));
    }

    pub(crate) fn mark_durable(&mut self, offset: u64) {
        self.durable_offset = self.durable_offset.max(offset);
        self.check_offsets();
    }

    pub(crate) fn segment_path(&self, start: u64) -> PathBuf {
        self.dir.join(offset_name(start))
    }

    /// Drops hot chunks wholly below the new minimum offset.
    pub(crate) fn forget_below(&mut self, min: u64) {
        self.min_offset = self.min_offset.max(min);
        while self.hot.len() > 1 && self.hot.front().is_some_and(|s| s.data_end <= min) {
            if let Some(old) = self.hot.pop_front() {
                self.hot_bytes -= old.alloc_bytes;
            }
        }
    }
}

/// What the recovery scan found.
pub(crate) struct Recovered {
    pub(crate) log: CommitLog,
    /// Whole segments deleted after a torn tail (they held no valid record).
    pub(crate) truncated_segments: usize,
    /// Damaged ranges inside the log, in log order, each within one segment.
    pub(crate) quarantined: Vec<QuarantinedRange>,
    /// What a torn tail's cut dropped; `None` when only zeros follow the log's end.
    pub(crate) cut: Option<TailCut>,
}

/// What recovery cut from the end of the CommitLog: bytes past the last valid record that
/// are not zeros, with nothing valid after them (a torn last write, or damage at the tail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailCut {
    /// Where the log now ends: the first byte dropped.
    pub at: u64,
    /// From `at` to the last byte that was not zero.
    pub bytes: u64,
    /// Records walked from `at` by their headers (magic code and a size that fits the
    /// segment): each failed its check or was torn, and is gone.
    pub records: u64,
    /// Bytes of the cut after those records that do not parse as a record header.
    pub unparsed_bytes: u64,
}

/// Tracks the last byte that is not zero among the bytes a scan passed over, in log order.
#[derive(Default)]
struct NonZero {
    /// Everything below this was looked at.
    scanned_to: u64,
    last: Option<u64>,
}

impl NonZero {
    /// Looks at the window's bytes from `from` (or where the last look ended) to its end.
    fn see(&mut self, window: &Option<(u64, ReadBytes)>, from: u64) {
        let Some((ws, r)) = window.as_ref() else {
            return;
        };
        let bytes = r.as_bytes();
        let start = from.max(self.scanned_to).max(*ws);
        let end = ws + bytes.len() as u64;
        if start >= end {
            return;
        }
        if let Some(i) = last_nonzero(&bytes[(start - ws) as usize..]) {
            self.last = Some(start + i as u64);
        }
        self.scanned_to = end;
    }
}

/// The index of the last byte that is not zero. Whole blocks of zeros (the rest of a
/// preallocated segment) are passed over with an OR over the block, which the compiler
/// vectorises: this runs over every byte past the log end at each start.
fn last_nonzero(bytes: &[u8]) -> Option<usize> {
    let mut end = bytes.len();
    for block in bytes.rchunks(BLOCK_BYTES as usize) {
        let start = end - block.len();
        if block.iter().fold(0u8, |a, &b| a | b) != 0 {
            return block.iter().rposition(|&b| b != 0).map(|i| start + i);
        }
        end = start;
    }
    None
}

/// Walks record headers in `[at, cut_end)` of a torn tail: how many records it held (each
/// failing its check, or cut short), and how many bytes after them parse as no record.
async fn describe_cut(
    file: &SegmentFile,
    at: u64,
    cut_end: u64,
    seg_end: u64,
) -> Result<TailCut, ShardError> {
    let mut window = None;
    let mut pos = at;
    let mut records = 0;
    while pos < cut_end {
        let Some(head) =
            ensure_window(file, &mut window, pos, BLANK_RECORD_MIN_BYTES, seg_end).await?
        else {
            break;
        };
        let total = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let magic = i32::from_be_bytes([head[4], head[5], head[6], head[7]]);
        if magic != MAGIC_CODE || total < FIXED_BYTES as i32 || pos + total as u64 > seg_end {
            break;
        }
        records += 1;
        pos += total as u64;
    }
    Ok(TailCut {
        at,
        bytes: cut_end - at,
        records,
        unparsed_bytes: cut_end.saturating_sub(pos),
    })
}

pub(crate) struct LogParams {
    pub(crate) dir: PathBuf,
    pub(crate) segment_bytes: u64,
    pub(crate) chunk_bytes: usize,
    pub(crate) hot_bytes_max: u64,
    pub(crate) chunk_pool: usize,
    pub(crate) faults: Option<std::sync::Arc<FaultInjector>>,
}

/// Opens the CommitLog, scanning every segment and checking every record's structure, CRC
/// and stored physical offset. A record that fails is quarantined when a valid record
/// follows it anywhere later in the log (the scan goes on there); when none does, it is a
/// torn tail and the log ends at it. `on_record` sees each valid record with its offset (to
/// rebuild ConsumeQueues and IndexFiles).
pub(crate) async fn recover(
    p: LogParams,
    mut on_record: impl FnMut(&RecordView<'_>, u64) -> Result<(), ShardError>,
) -> Result<Recovered, ShardError> {
    std::fs::create_dir_all(&p.dir)?;
    let mut starts: Vec<u64> = Vec::new();
    for e in std::fs::read_dir(&p.dir)? {
        let e = e?;
        if let Some(s) = e.file_name().to_str().and_then(parse_offset_name) {
            starts.push(s);
        }
    }
    starts.sort_unstable();
    for (i, &s) in starts.iter().enumerate() {
        let path = p.dir.join(offset_name(s));
        let bad = |reason: String| ShardError::Corrupt {
            path: path.display().to_string(),
            reason,
        };
        if s % p.segment_bytes != 0 {
            return Err(bad(format!(
                "segment start is not a multiple of segment_bytes {} (was it changed?)",
                p.segment_bytes
            )));
        }
        if i > 0 && starts[i - 1] + p.segment_bytes != s {
            return Err(bad("a segment before this one is missing".into()));
        }
        let len = std::fs::metadata(&path)?.len();
        if len > p.segment_bytes {
            return Err(bad(format!(
                "segment is {len} bytes, more than segment_bytes {}",
                p.segment_bytes
            )));
        }
    }

    let mut log = CommitLog {
        dir: p.dir.clone(),
        segment_bytes: p.segment_bytes,
        chunk_bytes: p.chunk_bytes,
        hot_bytes_max: p.hot_bytes_max,
        faults: p.faults.clone(),
        segments: BTreeMap::new(),
        current: None,
        unwritten: VecDeque::new(),
        hot: VecDeque::new(),
        hot_bytes: 0,
        min_offset: starts.first().copied().unwrap_or(0),
        write_offset: 0,
        written_offset: 0,
        durable_offset: 0,
        dirty_segments: BTreeSet::new(),
        free_buffers: Vec::new(),
        chunk_pool: p.chunk_pool,
        buffers_allocated: 0,
        ring: None,
    };
    // `damaged_from`: the scan met an invalid record there and is looking for the next
    // valid one. Found: everything between is quarantined and the log goes on. Not found
    // anywhere after it: a torn tail, and the log ends there.
    let mut damaged_from: Option<u64> = None;
    let mut quarantined: Vec<QuarantinedRange> = Vec::new();
    let mut last_pos = log.min_offset;
    // Where the last byte that is not zero lies among the bytes the search for a valid
    // record passed over: past a torn tail's start it is the end of what the cut drops.
    let mut nonzero = NonZero::default();
    for &start in &starts {
        let path = log.segment_path(start);
        let file = Rc::new(
            SegmentFile::open(&path, start, p.segment_bytes, false, p.faults.clone()).await?,
        );
        log.segments.insert(start, file.clone());
        let seg_end = start + p.segment_bytes;
        let mut pos = start;
        let mut window: Option<(u64, ReadBytes)> = None;
        while pos < seg_end {
            match check_at(&file, &mut window, pos, seg_end).await? {
                At::SegmentEnd => {
                    // Only zeros follow a real end-of-segment blank (at most a batch's
                    // worth, so this is cheap). Damage that makes a header read as one
                    // must not hide the records after it: if a valid record follows, the
                    // "blank" is quarantined like any damage.
                    let after = pos + BLANK_RECORD_MIN_BYTES as u64;
                    match find_record(&file, &mut window, after, seg_end, &mut nonzero).await? {
                        Some(p) => {
                            damaged_from.get_or_insert(pos);
                            pos = p;
                        }
                        None => pos = seg_end,
                    }
                }
                At::Filler(end) => pos = end,
                At::Record(len) => {
                    if let Some(from) = damaged_from.take() {
                        quarantine(&log, from, pos, &mut quarantined);
                    }
                    let Some(bytes) = ensure_window(&file, &mut window, pos, len, seg_end).await?
                    else {
                        unreachable!("check_at read the record");
                    };
                    on_record(&RecordView::parse(bytes)?, pos)?;
                    pos += len as u64;
                }
                At::Invalid => {
                    damaged_from.get_or_insert(pos);
                    nonzero.see(&window, pos);
                    pos = find_record(&file, &mut window, pos + 1, seg_end, &mut nonzero)
                        .await?
                        .unwrap_or(seg_end);
                }
            }
        }
        last_pos = pos;
    }
    if quarantined.len() > LOGGED_RANGES_MAX {
        tracing::error!(
            ranges = quarantined.len(),
            bytes = quarantined.iter().map(QuarantinedRange::bytes).sum::<u64>(),
            logged = LOGGED_RANGES_MAX,
            "recovery quarantined more damaged CommitLog ranges than it logs one by one; \
             the records in them are never served, every valid record is kept"
        );
    }
    // A torn tail: nothing valid anywhere after `from`. The segments after its own hold
    // nothing valid (the scan looked at every byte), so deleting them loses nothing, and
    // stale bytes in them must never pass for a continuation of the log later.
    let mut truncated_segments = 0;
    let mut cut = None;
    let end = match damaged_from {
        Some(from) => {
            // Only zeros past `from`: the log simply ends there (the preallocated rest of
            // its segment), and nothing is cut. Anything else is what the cut drops, and
            // the caller says how much of it (an operator must be able to tell a crash's
            // torn last write from a cut into acknowledged data, see the quarantine).
            if let Some(last) = nonzero.last.filter(|&l| l >= from) {
                let file = log.segments.get(&log.segment_start(from)).cloned();
                cut = Some(match file {
                    Some(file) => {
                        let seg_end = log.segment_start(from) + log.segment_bytes;
                        describe_cut(&file, from, last + 1, seg_end).await?
                    }
                    None => TailCut {
                        at: from,
                        bytes: last + 1 - from,
                        records: 0,
                        unparsed_bytes: last + 1 - from,
                    },
                });
            }
            let keep_up_to = log.segment_start(from);
            let later: Vec<u64> = log
                .segments
                .range(keep_up_to + 1..)
                .map(|(&s, _)| s)
                .collect();
            for s in later {
                log.segments.remove(&s);
                std::fs::remove_file(log.segment_path(s))?;
                truncated_segments += 1;
            }
            from
        }
        None => last_pos,
    };
    log.write_offset = end;
    log.written_offset = end;
    log.durable_offset = end;

    let seg = log.segment_start(end);
    let partial = clean_past(
        log.segments.get(&seg).cloned(),
        seg + log.segment_bytes,
        end,
    )
    .await?;
    log.fill_pool();
    if !partial.is_empty() {
        log.new_chunk(end, 0, &partial);
    }
    log.check_offsets();
    Ok(Recovered {
        log,
        truncated_segments,
        quarantined,
        cut,
    })
}

/// Makes the segment holding `end` clean past it, so stale bytes can never pass for
/// records once new appends reach them: the partial block is written back with zeros after
/// the valid prefix, the rest of the segment zeroed, and both fdatasynced. Returns that
/// prefix, for the first chunk. Shared by recovery (a torn tail) and a replica's
/// truncation.
pub(crate) async fn clean_past(
    file: Option<Rc<SegmentFile>>,
    seg_end: u64,
    end: u64,
) -> Result<Vec<u8>, ShardError> {
    let mut partial = Vec::new();
    if let Some(file) = file {
        if end < seg_end {
            let block = align_down(end);
            if block != end {
                let r = file.read_aligned(block, BLOCK_BYTES as usize).await?;
                let have = r.as_bytes();
                let keep = (end - block) as usize;
                if have.len() < keep {
                    return Err(ShardError::Corrupt {
                        path: file.path.display().to_string(),
                        reason: format!("short read of the block at {block}"),
                    });
                }
                partial = have[..keep].to_vec();
                let mut buf = glommio::allocate_dma_buffer(BLOCK_BYTES as usize);
                buf.as_bytes_mut().fill(0);
                buf.as_bytes_mut()[..keep].copy_from_slice(&partial);
                file.write(Rc::new(buf), block).await?;
            }
            file.zero_range(align_up(end), seg_end).await?;
            file.fdatasync().await?;
        }
    }
    Ok(partial)
}

/// What starts at a position of a segment.
enum At {
    /// A blank header covering the rest of the segment.
    SegmentEnd,
    /// A filler to a block boundary inside the segment, ending here.
    Filler(u64),
    /// A valid record of this many bytes (structure, CRC and stored offset checked).
    Record(usize),
    /// Anything else: damage, a torn write, or zeros past the end of the log.
    Invalid,
}

/// What a blank header (`BLANK_MAGIC_CODE`) of `total` bytes at `pos` can be, in a segment
/// ending at `seg_end`: the log's layout rules, shared by the recovery scan and the tail
/// ring's walk. (A filler must also hold only zeros past its header; the caller checks
/// that where it has the bytes.)
pub(crate) enum Blank {
    /// The rest of the segment is filler.
    SegmentEnd,
    /// A filler to a block boundary inside the segment, ending here.
    Filler(u64),
}

pub(crate) fn blank_at(total: i32, pos: u64, seg_end: u64) -> Option<Blank> {
    let end = pos + total.max(0) as u64;
    if total as i64 == (seg_end - pos) as i64 {
        Some(Blank::SegmentEnd)
    } else if total >= BLANK_RECORD_MIN_BYTES as i32
        && end < seg_end
        && end.is_multiple_of(BLOCK_BYTES)
    {
        Some(Blank::Filler(end))
    } else {
        None
    }
}

/// Whether `bytes`, which claim to be one whole record, are the record the log holds at
/// `pos`: its structure and CRC hold, and it says it is stored at `pos`. Shared by the
/// recovery scan and the tail ring's walk.
pub(crate) fn is_record_at(bytes: &[u8], pos: u64) -> bool {
    matches!(message::peek_record(bytes), Peek::Record(n) if n == bytes.len())
        && RecordView::parse(bytes).is_ok_and(|v| v.physical_offset() == pos)
}

/// Checks what starts at `pos` without trusting anything.
async fn check_at(
    file: &SegmentFile,
    window: &mut Option<(u64, ReadBytes)>,
    pos: u64,
    seg_end: u64,
) -> Result<At, ShardError> {
    let Some(hdr) = ensure_window(file, window, pos, BLANK_RECORD_MIN_BYTES, seg_end).await? else {
        return Ok(At::Invalid);
    };
    let total = i32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    let magic = i32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
    if magic == BLANK_MAGIC_CODE {
        return Ok(match blank_at(total, pos, seg_end) {
            Some(Blank::SegmentEnd) => At::SegmentEnd,
            // A filler to a block boundary (a chunk sealed mid-block): valid only if it
            // holds nothing but zeros.
            Some(Blank::Filler(end)) => {
                let zeros = ensure_window(file, window, pos, total as usize, seg_end)
                    .await?
                    .is_some_and(|b| b[BLANK_RECORD_MIN_BYTES..].iter().all(|&x| x == 0));
                if zeros {
                    At::Filler(end)
                } else {
                    At::Invalid
                }
            }
            None => At::Invalid,
        });
    }
    Ok(match record_at(file, window, pos, seg_end).await? {
        Some(len) => At::Record(len),
        None => At::Invalid,
    })
}

/// The length of the valid record at `pos`, if one is there: its structure and CRC hold
/// and it says it is stored at `pos`. The cheap fields (magic, stored offset, size) are
/// looked at before the CRC is computed.
async fn record_at(
    file: &SegmentFile,
    window: &mut Option<(u64, ReadBytes)>,
    pos: u64,
    seg_end: u64,
) -> Result<Option<usize>, ShardError> {
    if pos + FIXED_BYTES as u64 > seg_end {
        return Ok(None);
    }
    let Some(head) = ensure_window(file, window, pos, FIXED_BYTES, seg_end).await? else {
        return Ok(None);
    };
    let total = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let magic = i32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    let mut stored = [0u8; 8];
    stored.copy_from_slice(&head[OFF_PHYSICAL_OFFSET..OFF_PHYSICAL_OFFSET + 8]);
    if magic != MAGIC_CODE
        || u64::from_be_bytes(stored) != pos
        || total < FIXED_BYTES as i32
        || pos + total as u64 > seg_end
    {
        return Ok(None);
    }
    let total = total as usize;
    let Some(bytes) = ensure_window(file, window, pos, total, seg_end).await? else {
        return Ok(None);
    };
    Ok(is_record_at(bytes, pos).then_some(total))
}

/// The first position at or after `from` in this segment where a valid record starts.
/// Only positions holding the magic code are looked at further, found with a vectorised
/// search, so a damaged range or the zeros past the log end are scanned at memory speed.
async fn find_record(
    file: &SegmentFile,
    window: &mut Option<(u64, ReadBytes)>,
    from: u64,
    seg_end: u64,
    nonzero: &mut NonZero,
) -> Result<Option<u64>, ShardError> {
    let magic = MAGIC_CODE.to_be_bytes();
    let finder = memchr::memmem::Finder::new(&magic);
    let mut cur = from;
    while cur + FIXED_BYTES as u64 <= seg_end {
        if ensure_window(file, window, cur, BLANK_RECORD_MIN_BYTES, seg_end)
            .await?
            .is_none()
        {
            return Ok(None);
        }
        nonzero.see(window, cur);
        let Some((ws, r)) = window.as_ref() else {
            return Ok(None);
        };
        let rest = &r.as_bytes()[(cur - ws) as usize..];
        // The magic code sits 4 bytes into a record: a hit at i means a candidate at cur+i.
        match finder.find(&rest[4..]) {
            Some(i) => {
                let candidate = cur + i as u64;
                if record_at(file, window, candidate, seg_end).await?.is_some() {
                    return Ok(Some(candidate));
                }
                cur = candidate + 1;
            }
            // Every candidate whose magic lies wholly in the window was looked at; the last
            // 7 bytes may start one whose magic crosses the window's end.
            None => cur = ws + r.as_bytes().len() as u64 - 7,
        }
    }
    Ok(None)
}

/// Adds `[from, to)` to the quarantined ranges, one range per segment it touches, and logs
/// each (the first [`LOGGED_RANGES_MAX`] of them).
fn quarantine(log: &CommitLog, from: u64, to: u64, out: &mut Vec<QuarantinedRange>) {
    let mut start = from;
    while start < to {
        let seg = log.segment_start(start);
        let end = to.min(seg + log.segment_bytes);
        let r = QuarantinedRange {
            segment: log.segment_path(seg),
            start,
            end,
            found_by_recovery: true,
        };
        if out.len() < LOGGED_RANGES_MAX {
            tracing::error!(
                segment = %r.segment.display(),
                start = r.start,
                end = r.end,
                bytes = r.bytes(),
                "recovery quarantined a damaged CommitLog range [{}, {}) of {}: no valid record \
                 starts in it; its records are never served and readers step over them, \
                 every record after it is kept (the broker needs nothing more; the lost \
                 records can only come back from a copy of that segment, e.g. a backup)",
                r.start,
                r.end,
                r.segment.display()
            );
        }
        out.push(r);
        start = end;
    }
}

/// Makes sure `window` holds `[pos, pos + len)` (reading from the segment if not) and
/// returns those bytes; `None` if the file ends first.
async fn ensure_window<'w>(
    file: &SegmentFile,
    window: &'w mut Option<(u64, ReadBytes)>,
    pos: u64,
    len: usize,
    seg_end: u64,
) -> Result<Option<&'w [u8]>, ShardError> {
    let covered = window
        .as_ref()
        .is_some_and(|(s, r)| *s <= pos && pos + len as u64 <= *s + r.as_bytes().len() as u64);
    if !covered {
        let from = align_down(pos);
        let want = align_up(pos + len as u64 - from).max(SCAN_WINDOW_BYTES as u64);
        let want = want.min(seg_end - from);
        let r = file.read_aligned(from, want as usize).await?;
        *window = Some((from, r));
    }
    let Some((s, r)) = window.as_ref() else {
        return Ok(None);
    };
    let from = (pos - s) as usize;
    Ok(r.as_bytes().get(from..from + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored record as the log holds it at `at`.
    fn stored_record(at: u64) -> Vec<u8> {
        let mut rec = Vec::new();
        message::encode_record(
            &message::MessageFields {
                topic: "T",
                body: b"found",
                ..Default::default()
            },
            &mut rec,
        )
        .unwrap();
        message::stamp_record(
            &mut rec,
            &message::StoreStamp {
                queue_id: 0,
                queue_offset: 0,
                physical_offset: at,
                store_timestamp_ms: 1,
                store_host: "127.0.0.1:1".parse().unwrap(),
            },
        )
        .unwrap();
        rec
    }

    /// The search for the next valid record finds one wherever it lies relative to the
    /// 1 MiB scan windows (its magic code across a window's end, too), skips records that
    /// name another position, and reports none in zeros.
    #[test]
    fn find_record_crosses_scan_windows() {
        let window = SCAN_WINDOW_BYTES as u64;
        let seg_size = 4 * window;
        for at in [window - 6, window - 4, window - 2, window, 2 * window + 123] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(offset_name(0));
            let mut bytes = vec![0u8; seg_size as usize];
            // A record that is valid but stored for another position comes first: the
            // search must not stop at it.
            let decoy = stored_record(at + 1);
            bytes[100..100 + decoy.len()].copy_from_slice(&decoy);
            let rec = stored_record(at);
            bytes[at as usize..at as usize + rec.len()].copy_from_slice(&rec);
            std::fs::write(&path, &bytes).unwrap();
            let found = crate::run_local(move || async move {
                let file = SegmentFile::open(&path, 0, seg_size, false, None)
                    .await
                    .unwrap();
                let mut w = None;
                let mut nz = NonZero::default();
                let found = find_record(&file, &mut w, 1, seg_size, &mut nz)
                    .await
                    .unwrap();
                let mut w = None;
                let mut nz = NonZero::default();
                let none = find_record(&file, &mut w, at + 1, seg_size, &mut nz)
                    .await
                    .unwrap();
                (found, none)
            });
            assert_eq!(found, (Some(at), None), "record at {at}");
        }
    }
}
