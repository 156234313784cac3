//! Staged copies of pageable host memory: chunk by chunk through a ring of pinned
//! blocks, the host memcpy of one chunk overlapping the DMA of the others.
//!
//! # Why
//!
//! The GPU's DMA engines read and write only page-locked memory. Given pageable
//! memory, the driver copies it through its own small staging buffers on one thread,
//! which on an H200 moves about 8.4 GB/s where pinned memory moves 55 GB/s. Staging
//! through the device's [pinned pool](crate::host) with several memcpy threads
//! gets close to the smaller of the host's multi-threaded memcpy bandwidth and the DMA
//! bandwidth.
//!
//! # When
//!
//! [`Scope::copy_to_device`](crate::Scope::copy_to_device) (and `upload`) and
//! [`Scope::copy_to_host`](crate::Scope::copy_to_host) stage a copy when it moves at least
//! the direction's threshold ([`DEFAULT_THRESHOLD`](config::DEFAULT_THRESHOLD), 1 MiB)
//! **and** the host memory is pageable. Smaller copies, and pinned memory
//! ([`PinnedBuffer`](crate::PinnedBuffer)s and their sub-slices included), use the driver's
//! direct path.
//!
//! Pinned memory is recognised on its first and last byte by `cuMemHostGetFlags`,
//! which succeeds only inside a `cuMemHostAlloc` allocation (of any context or
//! library); memory `cuPointerGetAttribute(MEMORY_TYPE)` reports as device or managed
//! also takes the direct path. Everything else is treated as pageable, including host
//! memory page-locked with `cuMemHostRegister` (this library registers none), because
//! the driver may report plain pageable memory as `HOST` under HMM. The lookups cost
//! about a microsecond, only for copies above the threshold.
//!
//! Chunk size, ring depth and thread count follow the machine
//! ([`StagingConfig::for_this_machine`](config::StagingConfig::for_this_machine), rules
//! from the core count, asked once): the host memcpy on every core but two, up to 16,
//! chunks of at least 512 KiB per thread (a power of two, 4 MiB at least: 14 threads and
//! 8 MiB on 16 cores), a ring of 4 blocks, ordinary stores for uploads except their last
//! two chunks (see [`StreamingStores`](stripe::StreamingStores)). One memcpy thread
//! copies 9-15 GB/s and a DMA 50+, so the threads decide whether the host half keeps
//! up; with enough of them it does, and then the DMA, slowed by the cache lines the
//! memcpy leaves behind, is the slower half (traces on a 2x H100 host, 2026-11-26: see
//! the [calibration]). Why these rules, from the sweeps
//! (`BENCH_STAGING_SWEEP=1 bench --case pageable`, 64 MiB):
//! * **Two cores left free.** Each chunk waits for its last piece, so a copy whose
//!   threads take every core stalls whenever one of them is descheduled (by the driver's
//!   own threads, a download's coordinator, the rest of the program): on a 16-core H100
//!   host, 16 threads fell to 5-9 GB/s in several settings of one sweep where 8 never fell
//!   below 14 (the "collapsed runs" of earlier measurements, when each thread had one
//!   fixed stripe of a chunk; the threads now take pieces in turn, so a late thread holds
//!   up one piece, not a stripe: see `memcpy.rs`).
//! * **More threads where there are cores.** At 1 GiB, 14 threads moved 37.5 GB/s up and
//!   29.8 down on an H100 host whose own 16-thread memcpy moved 37.0 / 36.3 (8 threads of
//!   the old default: 33 / 29 on an H200 host, 26 / 15 on an H100 one).
//! * **Half a MiB per thread and chunk**: below it, waking the workers and waiting for the
//!   slowest thread cost a large part of each chunk.
//!
//! At the first staged copy of an optimised build, those rules are the starting point
//! of a [calibration] (once per process; no trial starts after 0.25 s): real
//! staged copies to that copy's device, timed with a few settings around them (threads,
//! chunk size, streaming stores for downloads), keep the fastest for the process. A
//! setting pinned with `set_staging_config` or `set_streaming_stores`, or
//! `STREAM_CORE_STAGING_CALIBRATE=0`, skips it; `staging::calibrate_staging_on` runs it
//! eagerly and `staging::staging_calibration` says what it chose.
//!
//! Sweeps still disagree between hosts and runs by tens of percent (the best 64 MiB
//! setting of one H100 sweep moved 33-34 GB/s up, of another 37), which is why the rules
//! are about cores rather than one machine's best constants. The driver's own pageable
//! path moved 6 to 12 GB/s on every host.
//!
//! The threshold was estimated, not measured: at 1 MiB the driver's pageable path takes
//! ~120 us at 8.4 GB/s, a staged copy ~60 us (a 4-thread memcpy of 1 MiB, ~35 us, then a 20 us DMA), and the
//! fixed costs of staging (two pointer lookups, a pool lookup, waking the memcpy
//! workers: ~10 us) stop mattering. Below ~256 KiB the two paths should be even. The
//! `gpu-bench` sweep confirms or moves it; the knobs are in
//! `stream_core::__private::StagingConfig`.
//!
//! # How
//!
//! * **Host to device**: for each chunk, take the next block of a ring of
//!   [`DEFAULT_RING`](config::DEFAULT_RING) (4) pool blocks, wait until the DMA that last
//!   read it has completed (its event), memcpy the chunk into it on the configuration's
//!   threads, enqueue `cuMemcpyHtoDAsync` from it on the scope's stream and record the
//!   block's event. The call returns once every chunk has been copied out of the source, as
//!   the driver's pageable path does; the last DMAs may still be running, and their blocks
//!   go back to the pool armed with their events, to be reused only once those completed
//!   (checked with `cuEventQuery`, without blocking). Uploads issue work only on the
//!   scope's stream, so stream order, fork joins and the scope's final synchronisation
//!   cover them exactly as they cover a direct copy.
//! * **Device to host** ([`download`]): the call snapshots the source into device
//!   memory on the scope's stream and returns a [`Pending`](crate::Pending) at once; a
//!   coordinator thread runs the ring from the snapshot on one of the device's internal
//!   staging streams: DMA of a chunk into a block, host copy of the block into the
//!   destination as soon as its DMA landed, DMA of the chunk one ring later into the
//!   freed block. `Pending::wait`, and the end of the scope (on return and on unwind),
//!   wait for the copy-out. If the snapshot does not fit in device memory, the same ring
//!   runs on the caller's thread from the source itself, and the call returns once the
//!   destination is written (the `Pending` is then ready at once).
//!
//! Neither direction ever waits for another stream's work or the device: only for
//! their own staging DMAs' events (their own ring's, or, when a stream already has a cap
//! of staging blocks pending, its oldest one).
//!
//! # Files
//!
//! [`config`] holds the tuning, [`detection`] tells pinned from pageable memory,
//! [`pipeline`] is the chunk-by-chunk order of memcpys and DMAs (tested against a
//! simulated DMA engine), [`ring`] the ring of pool blocks and the DMAs themselves, and
//! [`memcpy`] the multi-threaded host copy.

pub(crate) mod calibration;
pub(crate) mod config;
pub(crate) mod detection;
pub(crate) mod download;
mod memcpy;
mod pipeline;
mod ring;
pub(crate) mod stripe;
mod trials;

use crate::error::{Error, Result};
use crate::memory::StreamRange;
use crate::trace::ChunkTrace;
use config::{for_pageable_copy, StagingConfig, STAGED};
pub(crate) use download::{start_staged_download, StagedDownload};
use pipeline::{download_pipeline, upload_pipeline};
use ring::CudaRing;
use stripe::{streaming_downloads, upload_streaming_tail};

/// The direction of a staged copy.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Upload,
    Download,
}

/// The ring for a staged copy of `host` (pageable memory of at least the direction's
/// threshold) to or from `range`, or `None` when the copy should take the driver's
/// direct path. Binds the range's device's context for the lookups.
fn staged_ring<'p>(
    direction: Direction,
    range: StreamRange<'p>,
    host: &[u8],
) -> Result<Option<(CudaRing<'p>, StagingConfig)>> {
    Error::check_lengths("a staged copy", host.len(), range.len())?;
    let threshold = match direction {
        Direction::Upload => |c: &StagingConfig| c.upload_threshold,
        Direction::Download => |c: &StagingConfig| c.download_threshold,
    };
    let Some((config, _bound)) = for_pageable_copy(host, threshold, range.device())? else {
        return Ok(None);
    };
    CudaRing::new(range, config)
}

/// Copies `src` to `dst` (as many bytes) through staging when the configuration and
/// the memory call for it; `Ok(false)` when the caller should copy directly. In a
/// traced scope, `chunks` records each chunk's DMA (on `dst`'s stream).
pub(crate) fn try_upload<'p>(
    dst: StreamRange<'p>,
    src: &[u8],
    chunks: Option<ChunkTrace<'p>>,
) -> Result<bool> {
    let Some((mut ring, config)) = staged_ring(Direction::Upload, dst, src)? else {
        return Ok(false);
    };
    ring.record_chunks(chunks);
    upload_pipeline(&mut ring, src, config, upload_streaming_tail())?;
    STAGED.with(|c| c.set((c.get().0 + 1, c.get().1)));
    Ok(true)
}

/// Copies `src` into `dst` (as many bytes) through staging when the configuration and
/// the memory call for it; `Ok(false)` when the caller should copy directly. On
/// `Ok(true)` every byte of `dst` has been written.
pub(crate) fn try_download<'p>(
    src: StreamRange<'p>,
    dst: &mut [u8],
    chunks: Option<ChunkTrace<'p>>,
) -> Result<bool> {
    let Some((mut ring, config)) = staged_ring(Direction::Download, src, dst)? else {
        return Ok(false);
    };
    ring.record_chunks(chunks);
    download_pipeline(&mut ring, dst, config, streaming_downloads())?;
    STAGED.with(|c| c.set((c.get().0, c.get().1 + 1)));
    Ok(true)
}
