//! The storage engine of one CPU core: a CommitLog of fixed-size segment files written with
//! O_DIRECT through io_uring (glommio), ConsumeQueues and IndexFiles derived from it, flush
//! policies with group commit, crash recovery, and retention. It knows nothing of other
//! cores, sockets or the wire protocol; see ARCHITECTURE.md, "The shard: one core's storage
//! engine".

// Tests may unwrap: a panic there is a failed test, not a crashed broker.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod clean_stop;
mod clock;
mod commit_log;
mod config;
mod consume_queue;
mod derived;
mod error;
pub mod fuzzing;
mod index_file;
mod layout;
mod offsets;
mod quarantine;
mod readahead;
mod shard;
pub mod signal;
mod slice;
mod storage;
mod tail_ring;

pub use clean_stop::{RecoveryReport, ReportLevel};
pub use clock::Clock;
pub use commit_log::TailCut;
pub use config::{
    statvfs_free_bytes, statvfs_total_bytes, statvfs_used_bytes, statvfs_used_ratio,
    DiskUsageSource, FlushObserver, FlushPolicy, ShardConfig, ShardLimits,
};
pub use error::ShardError;
pub use layout::{lock_data_dir, open_data_dir, shard_dir, DataDirLayout, DataDirLock};
pub use offsets::{CommitLogOffset, QueueOffset};
pub use quarantine::QuarantinedRange;
/// Bytes of cold reads a shard keeps (in flight or done): what its reads need of a core's
/// io_uring buffer memory to be read into registered buffers.
pub use readahead::CACHED_BYTES_MAX as COLD_READ_BYTES_MAX;
pub use shard::{
    AppendResult, AppendTiming, DiskLevel, LogRun, QueueOffsets, ReadRequest, ReadResult,
    ReadStatus, RetentionReport, Shard, ShardStats,
};
pub use slice::StoredSlice;
pub use storage::{FaultInjector, FileOp, BLOCK_BYTES};
pub use tail_ring::TailRingConfig;

/// Runs `f` on a fresh single-threaded glommio executor and returns its output: for tests,
/// tools and the fuzz target. io_memory is kept small so several executors fit the default
/// 8 MiB locked-memory limit.
pub fn run_local<F, Fut, T>(f: F) -> T
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
    T: Send + 'static,
{
    let handle = glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .spawn(f);
    match handle.map(|h| h.join()) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => panic!("executor thread failed: {e:?}"),
        Err(e) => panic!("cannot start a glommio executor: {e}"),
    }
}
