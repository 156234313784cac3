//! The tuning of staged copies ([`StagingConfig`]): the process-wide setting, a
//! per-thread override for benchmarks and tests, and per-thread counts of staged copies.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use super::detection::is_pageable;
use super::memcpy;
use crate::device::DeviceInner;
use crate::driver::context::Bound;
use crate::error::Result;

/// Copies of at least this many bytes of pageable memory are staged (default of both
/// directions).
pub const DEFAULT_THRESHOLD: usize = 1 << 20;
/// Bytes per chunk (and per staging block) at least; [`StagingConfig::for_this_machine`]
/// makes chunks larger where more threads share one.
pub const DEFAULT_CHUNK: usize = 4 << 20;
/// Staging blocks per copy.
pub const DEFAULT_RING: usize = 4;
/// Threads of the host memcpy (the caller included) of [`StagingConfig::DEFAULT`], the
/// machine-independent setting; copies use [`StagingConfig::for_this_machine`] unless
/// told otherwise.
pub const DEFAULT_THREADS: usize = 8;
/// The most memcpy threads [`StagingConfig::for_this_machine`] picks: past 16, a staged
/// copy is bound by the DMA and the memory bus, not the copy threads.
const MACHINE_THREADS_MAX: usize = 16;
/// Cores [`StagingConfig::for_this_machine`] leaves to everything else: the driver's
/// threads, a staged download's coordinator and the rest of the program. A copy whose
/// threads take every core stalls on whichever one is descheduled (each chunk waits for
/// its last piece): measured on a 16-core H100 host, 16 threads collapsed to 5-9 GB/s
/// in one run of three where 8 never fell below 14 (with one fixed stripe per thread).
const CORES_LEFT_FREE: usize = 2;
/// Bytes of a chunk per copy thread, at least: below this, waking a thread and waiting
/// for the slowest one cost a large part of each chunk's copy.
const CHUNK_PER_THREAD: usize = 512 << 10;
/// Pending staging blocks per size class and stream beyond which a staged copy waits
/// for the oldest of its stream's instead of page-locking more, as a multiple of the
/// ring.
pub(crate) const PENDING_CAP_RINGS: usize = 4;

/// The tuning of staged copies. Hidden: for benchmarks and tests, which sweep it.
///
/// Values out of range are clamped when used: `chunk_bytes` to at least 4 KiB,
/// `ring_blocks` to 1..=64, `threads` to 1..=64 (and the machine's parallelism).
/// A threshold of `usize::MAX` turns staging off for that direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagingConfig {
    /// Host-to-device copies of pageable memory of at least this many bytes are staged.
    pub upload_threshold: usize,
    /// Device-to-host copies into pageable memory of at least this many bytes are
    /// staged.
    pub download_threshold: usize,
    /// Bytes per chunk.
    pub chunk_bytes: usize,
    /// Pinned blocks in flight per copy.
    pub ring_blocks: usize,
    /// Host memcpy threads per copy, the calling thread included.
    pub threads: usize,
}

impl StagingConfig {
    /// The library's defaults.
    pub const DEFAULT: StagingConfig = StagingConfig {
        upload_threshold: DEFAULT_THRESHOLD,
        download_threshold: DEFAULT_THRESHOLD,
        chunk_bytes: DEFAULT_CHUNK,
        ring_blocks: DEFAULT_RING,
        threads: DEFAULT_THREADS,
    };

    /// The setting copies start from unless told otherwise ([`set_staging_config`],
    /// [`with_staging_config`]): rules from this machine's core count (asked once).
    /// See [`StagingConfig::for_cores`]. In an optimised build, the first staged copy
    /// calibrates its threads and chunk size around it
    /// ([`calibrate_staging_on`](crate::staging::calibrate_staging_on)); its thresholds and
    /// ring depth are used as they are.
    pub fn for_this_machine() -> StagingConfig {
        static MACHINE: OnceLock<StagingConfig> = OnceLock::new();
        *MACHINE.get_or_init(|| StagingConfig::for_cores(parallelism()))
    }

    /// The rules for a machine of `cores` cores: every core but two for the host memcpy
    /// (all of them below four cores), at most 16, and chunks of at least 512 KiB per
    /// thread (a power of two, 4 MiB at least), through a ring of [`DEFAULT_RING`]
    /// blocks.
    ///
    /// ```
    /// use stream_core::staging::StagingConfig;
    /// let c = StagingConfig::for_cores(16);
    /// assert_eq!((c.threads, c.chunk_bytes, c.ring_blocks), (14, 8 << 20, 4));
    /// assert_eq!(StagingConfig::for_cores(2).threads, 2);
    /// ```
    pub fn for_cores(cores: usize) -> StagingConfig {
        let cores = cores.max(1);
        let threads = if cores >= 4 {
            cores - CORES_LEFT_FREE
        } else {
            cores
        }
        .min(MACHINE_THREADS_MAX);
        // A power of two: the pinned pool's blocks are (a chunk never leaves part of its
        // block unused).
        let chunk_bytes = (threads * CHUNK_PER_THREAD)
            .next_power_of_two()
            .max(DEFAULT_CHUNK);
        StagingConfig {
            chunk_bytes,
            threads,
            ..StagingConfig::DEFAULT
        }
    }

    /// Off in both directions: every copy takes the driver's direct path.
    pub const DIRECT: StagingConfig = StagingConfig {
        upload_threshold: usize::MAX,
        download_threshold: usize::MAX,
        ..StagingConfig::DEFAULT
    };

    /// The values actually used: clamped to their valid ranges.
    pub fn effective(self) -> StagingConfig {
        StagingConfig {
            chunk_bytes: self.chunk_bytes.max(4096),
            ring_blocks: self.ring_blocks.clamp(1, 64),
            threads: self
                .threads
                .clamp(1, memcpy::MAX_THREADS)
                .min(parallelism()),
            ..self
        }
    }
}

impl Default for StagingConfig {
    fn default() -> Self {
        StagingConfig::DEFAULT
    }
}

/// The machine's parallelism, asked once (it reads cgroup files on Linux).
fn parallelism() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Set once [`set_staging_config`] was called: the atomics below hold the process-wide
/// setting; until then it is [`StagingConfig::for_this_machine`].
static SET: AtomicBool = AtomicBool::new(false);
static UPLOAD_THRESHOLD: AtomicUsize = AtomicUsize::new(DEFAULT_THRESHOLD);
static DOWNLOAD_THRESHOLD: AtomicUsize = AtomicUsize::new(DEFAULT_THRESHOLD);
static CHUNK: AtomicUsize = AtomicUsize::new(DEFAULT_CHUNK);
static RING: AtomicUsize = AtomicUsize::new(DEFAULT_RING);
static THREADS: AtomicUsize = AtomicUsize::new(DEFAULT_THREADS);

thread_local! {
    /// An override for copies issued on this thread (see `with_staging_config`).
    static OVERRIDE: Cell<Option<StagingConfig>> = const { Cell::new(None) };
    /// Staged uploads and downloads issued on this thread.
    pub(super) static STAGED: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// The configuration copies issued on this thread use now: this thread's override if
/// one is active, else the process-wide one ([`StagingConfig::for_this_machine`] until
/// [`set_staging_config`] sets another). When it is the machine's default, a staged copy
/// takes its threads and chunk size from the calibration instead, if one ran
/// ([`staging_calibration`](crate::staging::staging_calibration)).
pub fn staging_config() -> StagingConfig {
    OVERRIDE.with(Cell::get).unwrap_or_else(process_config)
}

/// The process-wide setting.
fn process_config() -> StagingConfig {
    if !SET.load(Ordering::Acquire) {
        return StagingConfig::for_this_machine();
    }
    StagingConfig {
        upload_threshold: UPLOAD_THRESHOLD.load(Ordering::Relaxed),
        download_threshold: DOWNLOAD_THRESHOLD.load(Ordering::Relaxed),
        chunk_bytes: CHUNK.load(Ordering::Relaxed),
        ring_blocks: RING.load(Ordering::Relaxed),
        threads: THREADS.load(Ordering::Relaxed),
    }
}

/// The setting a copy of `host` to or from `device` is staged with, or `None` when it
/// takes the driver's direct path: shorter than its direction's threshold (`threshold`
/// picks it from [`staging_config`]), or `host` is not pageable (pinned memory is copied
/// by one DMA). Binds the device's context only past the threshold (the lookup needs
/// it; a short copy costs no driver call here), and returns the binding with the
/// setting, which is [tuned] (the calibration runs the first time).
pub(super) fn for_pageable_copy<'d>(
    host: &[u8],
    threshold: fn(&StagingConfig) -> usize,
    device: &'d Arc<DeviceInner>,
) -> Result<Option<(StagingConfig, Bound<'d>)>> {
    let config = staging_config();
    if host.len() < threshold(&config).max(1) {
        return Ok(None);
    }
    let bound = device.bind()?;
    if !is_pageable(host) {
        return Ok(None);
    }
    Ok(Some((tuned(config, device), bound)))
}

/// `config` (what [`staging_config`] returned for a copy about to be staged to or from
/// `device`) with the [calibration](super::calibration)'s threads and chunk size when it
/// is the machine's default (no [`set_staging_config`], no [`with_staging_config`] on
/// this thread): runs the calibration the first time, with staged copies to `device`.
pub(super) fn tuned(config: StagingConfig, device: &Arc<DeviceInner>) -> StagingConfig {
    if SET.load(Ordering::Acquire) || OVERRIDE.with(Cell::get).is_some() {
        return config;
    }
    match super::calibration::calibrate_for(device) {
        Some(cal) => StagingConfig {
            threads: cal.config.threads,
            chunk_bytes: cal.config.chunk_bytes,
            ..config
        },
        None => config,
    }
}

/// Sets the process-wide configuration (each field atomically; a copy that starts
/// meanwhile may see a mix, which is still a valid configuration).
pub fn set_staging_config(config: StagingConfig) {
    UPLOAD_THRESHOLD.store(config.upload_threshold, Ordering::Relaxed);
    DOWNLOAD_THRESHOLD.store(config.download_threshold, Ordering::Relaxed);
    CHUNK.store(config.chunk_bytes, Ordering::Relaxed);
    RING.store(config.ring_blocks, Ordering::Relaxed);
    THREADS.store(config.threads, Ordering::Relaxed);
    SET.store(true, Ordering::Release);
}

/// Runs `f` with `config` used by the copies this thread issues, then restores the
/// previous setting (also on unwind).
pub fn with_staging_config<R>(config: StagingConfig, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<StagingConfig>);
    impl Drop for Restore {
        fn drop(&mut self) {
            OVERRIDE.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(OVERRIDE.with(|c| c.replace(Some(config))));
    f()
}

/// `(uploads, downloads)` staged so far by copies issued on this thread.
pub fn staged_copy_counts() -> (u64, u64) {
    STAGED.with(Cell::get)
}

/// Staging of every copy (thresholds 0) with these sizes, for unit tests.
#[cfg(test)]
pub(super) fn config(chunk: usize, ring: usize, threads: usize) -> StagingConfig {
    StagingConfig {
        upload_threshold: 0,
        download_threshold: 0,
        chunk_bytes: chunk,
        ring_blocks: ring,
        threads,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_config_clamps_out_of_range_values() {
        let c = StagingConfig {
            upload_threshold: 0,
            download_threshold: usize::MAX,
            chunk_bytes: 0,
            ring_blocks: 0,
            threads: 0,
        }
        .effective();
        assert_eq!((c.chunk_bytes, c.ring_blocks, c.threads), (4096, 1, 1));
        let c = StagingConfig {
            ring_blocks: 1000,
            threads: 1000,
            ..StagingConfig::DEFAULT
        }
        .effective();
        assert_eq!(c.ring_blocks, 64);
        assert!(c.threads <= memcpy::MAX_THREADS);
    }

    #[test]
    fn machine_rules_leave_cores_free_and_give_each_thread_half_a_mib() {
        for cores in 1..=256 {
            let c = StagingConfig::for_cores(cores);
            assert!(
                (1..=MACHINE_THREADS_MAX).contains(&c.threads),
                "{cores}: {c:?}"
            );
            assert!(c.threads <= cores, "{cores}: {c:?}");
            if cores >= 4 {
                assert!(c.threads <= cores - CORES_LEFT_FREE, "{cores}: {c:?}");
            }
            assert!(c.chunk_bytes.is_power_of_two() && c.chunk_bytes >= DEFAULT_CHUNK);
            assert!(
                c.chunk_bytes / c.threads >= CHUNK_PER_THREAD,
                "{cores}: {c:?}"
            );
            assert_eq!(c.ring_blocks, DEFAULT_RING);
            assert_eq!(c.effective().threads, c.threads.min(parallelism()));
        }
        assert_eq!(StagingConfig::for_cores(0), StagingConfig::for_cores(1));
    }

    #[test]
    fn thread_override_is_scoped_and_restored() {
        let before = staging_config();
        let inner = with_staging_config(StagingConfig::DIRECT, || {
            let nested = with_staging_config(config(8192, 2, 1), staging_config);
            assert_eq!(nested, config(8192, 2, 1));
            staging_config()
        });
        assert_eq!(inner, StagingConfig::DIRECT);
        assert_eq!(staging_config(), before);
        let caught = std::panic::catch_unwind(|| {
            with_staging_config(StagingConfig::DIRECT, || panic!("unwinds through"))
        });
        assert!(caught.is_err());
        assert_eq!(staging_config(), before);
    }
}
