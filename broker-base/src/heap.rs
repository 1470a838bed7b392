//! Giving freed heap memory back to the kernel after large sends: each send counts its bytes
//! here ([`note_send_bytes`]), and core 0 trims the heap once they pause ([`give_back_heap`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// A send of at least this many bytes counts towards giving freed heap memory back
/// ([`give_back_heap`]).
pub const TRIM_AFTER_SEND_BYTES: usize = 1 << 20;

/// Bytes of large sends (see [`TRIM_AFTER_SEND_BYTES`]) since the heap was last trimmed.
/// Process-wide, as the allocator is.
static LARGE_SEND_BYTES: AtomicU64 = AtomicU64::new(0);

/// Counts a send of `bytes` towards the next trim of the heap, if it is large.
pub fn note_send_bytes(bytes: usize) {
    if bytes >= TRIM_AFTER_SEND_BYTES {
        LARGE_SEND_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// Core 0's once-a-second check: after large sends, once a whole second passed without
/// another, returns the heap's free pages to the kernel (`malloc_trim`, on the blocking
/// thread so the core goes on serving). Batches between 1 MiB and
/// the broker's own-mapping threshold (`bootstrap::OWN_MAPPING_BYTES_MIN`) are copied on the heap (their records, their chunk), and
/// freed among longer-lived allocations those pages stayed resident: bursts of 6 MB batches
/// from 8 connections left a 2-core broker 569 MiB of anonymous memory for good. A steady
/// stream of large sends reuses that memory and is not trimmed under.
pub async fn give_back_heap(seen: &mut u64) {
    let now = LARGE_SEND_BYTES.load(Ordering::Relaxed);
    if now == 0 {
        return;
    }
    if now != *seen {
        // Still coming: wait for a quiet second.
        *seen = now;
        return;
    }
    LARGE_SEND_BYTES.fetch_sub(now, Ordering::Relaxed);
    *seen = 0;
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        glommio::executor()
            .spawn_blocking(|| {
                // SAFETY: malloc_trim takes no pointers; it only returns free memory of
                // the allocator's own arenas to the kernel, under their locks.
                unsafe { libc::malloc_trim(0) }
            })
            .await;
    }
}
