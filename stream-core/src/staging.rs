//! Staged copies of pageable host memory: chunk by chunk through a ring of pinned
//! blocks, the host memcpy of one chunk overlapping the DMA of the others.
//!
//! # Why
//!
//! The GPU's DMA engines read and write only page-locked memory. Given pageable
//! memory, the driver copies it through its own small staging buffers on one thread,
//! which on an H200 moves about 8.4 GB/s where pinned memory moves 55 GB/s. Staging
//! through the device's [pinned pool](crate::pinned_pool) with several memcpy threads
//! gets close to the smaller of the host's multi-threaded memcpy bandwidth and the DMA
//! bandwidth.
//!
//! # When
//!
//! [`Scope::copy_to_device`](crate::Scope::copy_to_device) (and `upload`) and
//! [`Scope::copy_to_host`](crate::Scope::copy_to_host) stage a copy when it moves at
//! least the direction's threshold ([`DEFAULT_THRESHOLD`], 1 MiB) **and** the host
//! memory is pageable. Smaller copies, and pinned memory
//! ([`PinnedBuffer`](crate::PinnedBuffer)s and their sub-slices included), use the
//! driver's direct path.
//!
//! Pinned memory is recognised on its first and last byte by `cuMemHostGetFlags`,
//! which succeeds only inside a `cuMemHostAlloc` allocation (of any context or
//! library); memory `cuPointerGetAttribute(MEMORY_TYPE)` reports as device or managed
//! also takes the direct path. Everything else is treated as pageable, including host
//! memory page-locked with `cuMemHostRegister` (this library registers none), because
//! the driver may report plain pageable memory as `HOST` under HMM. The lookups cost
//! about a microsecond, only for copies above the threshold.
//!
//! Chunk size, ring depth and thread count were chosen by the benchmark's sweep
//! (`BENCH_STAGING_SWEEP=1 bench --case pageable`) on an H200 host (16 cores), 64 MiB
//! copies, GB/s host-to-device / device-to-host: 4 MiB chunks, a ring of 4 and 2
//! threads gave 11 / 10; 4 threads 21 / 23; 8 threads 31 / 42 (the best of 24
//! settings, 2 to 16 MiB chunks, rings of 4 and 8; larger chunks and deeper rings did
//! not help). So 4 MiB, 4 blocks, 8 threads (at most the machine's parallelism). The
//! driver's own pageable path moved 7 to 9 GB/s in the same runs.
//!
//! The threshold was estimated, not measured: at 1 MiB the driver's pageable path takes ~120 us at 8.4 GB/s, a
//! staged copy ~60 us (a 4-thread memcpy of 1 MiB, ~35 us, then a 20 us DMA), and the
//! fixed costs of staging (two pointer lookups, a pool lookup, waking the memcpy
//! workers: ~10 us) stop mattering. Below ~256 KiB the two paths should be even. The
//! `gpu-bench` sweep confirms or moves it; the knobs are in
//! `stream_core::__private::StagingConfig`.
//!
//! # How
//!
//! * **Host to device**: for each chunk ([`DEFAULT_CHUNK`], 4 MiB), take the next block
//!   of a ring of [`DEFAULT_RING`] (4) pool blocks, wait until the DMA that last read it
//!   has completed (its event), memcpy the chunk into it on [`DEFAULT_THREADS`] (8)
//!   threads, enqueue `cuMemcpyHtoDAsync` from it on the scope's stream and record the
//!   block's event. The call returns once every chunk has been copied out of the
//!   source, as the driver's pageable path does; the last DMAs may still be running,
//!   and their blocks go back to the pool armed with their events, to be reused only
//!   once those completed (checked with `cuEventQuery`, without blocking).
//! * **Device to host**: enqueue the DMA of the first chunks into the ring's blocks,
//!   then for each chunk wait for its block's event, memcpy the block into the
//!   destination on several threads, and enqueue the DMA of the chunk one ring later
//!   into the freed block. The call returns once all of `dst` is written, as the
//!   driver's pageable path does (it too returns only after the copy completed); the
//!   [`Pending`](crate::Pending) it returns is ready at once.
//!
//! Both directions issue work only on the scope's stream (a [fork](crate::Scope::fork)
//! child's own stream inside a fork), so stream order, the fork joins and the scope's
//! final synchronisation cover them exactly as they cover a direct copy. They block
//! the host only on events of their own stream's staging DMAs (their own ring's, or,
//! when a stream already has a cap of staging blocks pending, its oldest one), never
//! on another stream or the device.
//!
//! Why the device-to-host host copy is not a `cuLaunchHostFunc` callback (which would
//! return at once): the callback would block its stream while it copies, so the next
//! chunk's DMA would wait for it (no overlap) unless a second stream per stream carries
//! the callbacks; callbacks run on one driver thread and must not unwind. The
//! synchronous design is as fast, keeps the driver's semantics, and has no callback to
//! get wrong.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::device::{Device, DeviceInner};
use crate::error::{DriverResultExt, Error, Result};
use crate::host_copy;
use crate::pinned_pool::Block;
use crate::repr::DeviceRepr;

/// Copies of at least this many bytes of pageable memory are staged (default of both
/// directions).
pub const DEFAULT_THRESHOLD: usize = 1 << 20;
/// Bytes per chunk (and per staging block).
pub const DEFAULT_CHUNK: usize = 4 << 20;
/// Staging blocks per copy.
pub const DEFAULT_RING: usize = 4;
/// Threads of the host memcpy (the caller included), at most the machine's.
pub const DEFAULT_THREADS: usize = 8;
/// Pending staging blocks per size class and stream beyond which a staged copy waits
/// for the oldest of its stream's instead of page-locking more, as a multiple of the
/// ring.
const PENDING_CAP_RINGS: usize = 4;

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
                .clamp(1, host_copy::MAX_THREADS)
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

static UPLOAD_THRESHOLD: AtomicUsize = AtomicUsize::new(DEFAULT_THRESHOLD);
static DOWNLOAD_THRESHOLD: AtomicUsize = AtomicUsize::new(DEFAULT_THRESHOLD);
static CHUNK: AtomicUsize = AtomicUsize::new(DEFAULT_CHUNK);
static RING: AtomicUsize = AtomicUsize::new(DEFAULT_RING);
static THREADS: AtomicUsize = AtomicUsize::new(DEFAULT_THREADS);

thread_local! {
    /// An override for copies issued on this thread (see `with_staging_config`).
    static OVERRIDE: Cell<Option<StagingConfig>> = const { Cell::new(None) };
    /// Staged uploads and downloads issued on this thread.
    static STAGED: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// The configuration copies issued on this thread use now: this thread's override if
/// one is active, else the process-wide one.
pub fn staging_config() -> StagingConfig {
    OVERRIDE.with(Cell::get).unwrap_or_else(|| StagingConfig {
        upload_threshold: UPLOAD_THRESHOLD.load(Ordering::Relaxed),
        download_threshold: DOWNLOAD_THRESHOLD.load(Ordering::Relaxed),
        chunk_bytes: CHUNK.load(Ordering::Relaxed),
        ring_blocks: RING.load(Ordering::Relaxed),
        threads: THREADS.load(Ordering::Relaxed),
    })
}

/// Sets the process-wide configuration (each field atomically; a copy that starts
/// meanwhile may see a mix, which is still a valid configuration).
pub fn set_staging_config(config: StagingConfig) {
    UPLOAD_THRESHOLD.store(config.upload_threshold, Ordering::Relaxed);
    DOWNLOAD_THRESHOLD.store(config.download_threshold, Ordering::Relaxed);
    CHUNK.store(config.chunk_bytes, Ordering::Relaxed);
    RING.store(config.ring_blocks, Ordering::Relaxed);
    THREADS.store(config.threads, Ordering::Relaxed);
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

/// `true` when `host` (its first and last byte) is `cuMemHostAlloc` memory, or device
/// or managed memory: copies of it take the direct path at any size. Binds the
/// device's context on this thread.
pub fn host_memory_is_pinned<T: DeviceRepr>(device: &Device, host: &[T]) -> Result<bool> {
    let _bound = device.inner.bind()?;
    Ok(!is_pageable(as_bytes(host)))
}

/// The bytes of a slice of `T`.
pub(crate) fn as_bytes<T: DeviceRepr>(slice: &[T]) -> &[u8] {
    // SAFETY: `T: DeviceRepr` has no padding, so all `size_of_val(slice)` bytes are
    // initialised; `u8` has alignment 1; the borrow is carried over.
    unsafe { std::slice::from_raw_parts(slice.as_ptr().cast(), std::mem::size_of_val(slice)) }
}

/// The bytes of a mutable slice of `T`.
pub(crate) fn as_bytes_mut<T: DeviceRepr>(slice: &mut [T]) -> &mut [u8] {
    let len = std::mem::size_of_val(slice);
    // SAFETY: as `as_bytes`; and every bit pattern is a valid `T` (`T: DeviceRepr`), so
    // any bytes written through the result leave valid `T`s behind.
    unsafe { std::slice::from_raw_parts_mut(slice.as_mut_ptr().cast(), len) }
}

/// `true` unless the driver knows both the first and the last byte of `bytes`
/// (`bytes` is not empty) as memory it can DMA directly.
fn is_pageable(bytes: &[u8]) -> bool {
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => !(dma_capable(first) && dma_capable(last)),
        _ => false,
    }
}

/// `true` for page-locked memory from `cuMemHostAlloc` (any context's: `PinnedBuffer`s,
/// other libraries' pinned buffers), and for device or managed memory, which the
/// driver copies without a host staging copy of ours.
///
/// Plain `CU_MEMORYTYPE_HOST` is not trusted alone: with HMM (heterogeneous memory
/// management, open kernel modules), the driver may know pageable memory too.
/// Memory page-locked by `cuMemHostRegister` (this library never registers any) is
/// therefore staged: correct, if slower than its direct DMA.
fn dma_capable(byte: &u8) -> bool {
    host_alloc_flags(byte).is_some()
        || memory_type(byte).is_some_and(|t| t != sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32)
}

/// The `cuMemHostAlloc` flags of the allocation holding `byte`, or `None` when it is
/// not such an allocation.
fn host_alloc_flags(byte: &u8) -> Option<u32> {
    let mut flags: std::ffi::c_uint = 0;
    // SAFETY: the call only looks the address up in the driver's tables (it does not
    // access the memory) and writes one `unsigned int` to `flags`, a live `c_uint`; a
    // context is current (`try_upload`, `try_download` and `host_memory_is_pinned` bind
    // the device's context first).
    let status = unsafe {
        sys::cuMemHostGetFlags(&raw mut flags, std::ptr::from_ref(byte).cast_mut().cast())
    };
    (status == sys::CUresult::CUDA_SUCCESS).then_some(flags)
}

/// `cuPointerGetAttribute(MEMORY_TYPE)` of `byte`'s address, as the raw `CUmemorytype`
/// value, or `None` when the driver does not know the address.
fn memory_type(byte: &u8) -> Option<u32> {
    let mut memory_type: u32 = 0;
    // SAFETY: the call only looks the address up in the driver's tables (it does not
    // dereference it) and writes one `CUmemorytype`, a 32-bit C enum, to `memory_type`,
    // a live `u32` (read as a plain integer, never as the Rust enum); a context is
    // current (`try_upload`, `try_download` and `host_memory_is_pinned` bind the device's
    // context first).
    let status = unsafe {
        sys::cuPointerGetAttribute(
            (&raw mut memory_type).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            std::ptr::from_ref(byte) as sys::CUdeviceptr,
        )
    };
    (status == sys::CUresult::CUDA_SUCCESS).then_some(memory_type)
}

/// Copies `src` to device memory at `dst` through staging when the configuration and
/// the memory call for it; `Ok(false)` when the caller should copy directly.
///
/// The caller guarantees: `dst` is device memory of `src.len()` bytes valid on `stream`
/// for this copy (any later use or free stream-ordered after it), and `stream` is a
/// live stream of `device`. The device's context is bound for the call.
pub(crate) fn try_upload(
    stream: sys::CUstream,
    device: &DeviceInner,
    src: &[u8],
    dst: sys::CUdeviceptr,
) -> Result<bool> {
    let config = staging_config();
    if src.len() < config.upload_threshold.max(1) {
        return Ok(false);
    }
    let _bound = device.bind()?;
    if !is_pageable(src) {
        return Ok(false);
    }
    let Some((mut ring, config)) = CudaRing::new(stream, device, dst, src.len(), config)? else {
        return Ok(false);
    };
    upload_pipeline(&mut ring, src, config)?;
    STAGED.with(|c| c.set((c.get().0 + 1, c.get().1)));
    Ok(true)
}

/// Copies device memory at `src` into `dst` through staging when the configuration and
/// the memory call for it; `Ok(false)` when the caller should copy directly. On
/// `Ok(true)` every byte of `dst` has been written.
///
/// The caller guarantees: `src` is device memory of `dst.len()` bytes valid on
/// `stream` for this copy, and `stream` is a live stream of `device`. The device's
/// context is bound for the call.
pub(crate) fn try_download(
    stream: sys::CUstream,
    device: &DeviceInner,
    src: sys::CUdeviceptr,
    dst: &mut [u8],
) -> Result<bool> {
    let config = staging_config();
    if dst.len() < config.download_threshold.max(1) {
        return Ok(false);
    }
    let _bound = device.bind()?;
    if !is_pageable(dst) {
        return Ok(false);
    }
    let Some((mut ring, config)) = CudaRing::new(stream, device, src, dst.len(), config)? else {
        return Ok(false);
    };
    download_pipeline(&mut ring, dst, config)?;
    STAGED.with(|c| c.set((c.get().0, c.get().1 + 1)));
    Ok(true)
}

/// The GPU side of a staged copy: a ring of staging blocks and the DMAs between them
/// and one range of device memory. Implemented by [`CudaRing`]; the unit tests
/// implement it with a simulated, deliberately late DMA engine.
pub(crate) trait Dma {
    /// The host address of ring block `slot` (`slot < ring_blocks`), once no DMA uses
    /// it any more (blocking until then). Valid for reads and writes
    /// of one chunk until the next DMA of `slot` is enqueued.
    fn idle_block(&mut self, slot: usize) -> Result<*mut u8>;
    /// Enqueues the DMA of `len` bytes from block `slot` to the device range at
    /// `offset`.
    fn to_device(&mut self, slot: usize, offset: usize, len: usize) -> Result<()>;
    /// Enqueues the DMA of `len` bytes from the device range at `offset` into block
    /// `slot`.
    fn to_host(&mut self, slot: usize, offset: usize, len: usize) -> Result<()>;
}

/// Host to device, chunk by chunk through the ring (see the module docs).
pub(crate) fn upload_pipeline(dma: &mut impl Dma, src: &[u8], config: StagingConfig) -> Result<()> {
    let chunk = config.chunk_bytes;
    for (i, piece) in src.chunks(chunk).enumerate() {
        let slot = i % config.ring_blocks;
        let block = dma.idle_block(slot)?;
        // SAFETY: `block` is valid for writes of a chunk (`>= piece.len()`), idle, and
        // lent to this loop until the DMA below is enqueued; `piece` is borrowed shared,
        // so nothing writes it; a pool block and a caller's slice never overlap.
        unsafe { host_copy::copy_bytes(block, piece.as_ptr(), piece.len(), config.threads) };
        dma.to_device(slot, i * chunk, piece.len())?;
    }
    Ok(())
}

/// Device to host, the DMA running a ring ahead of the host copy (see the module docs).
pub(crate) fn download_pipeline(
    dma: &mut impl Dma,
    dst: &mut [u8],
    config: StagingConfig,
) -> Result<()> {
    let (chunk, ring) = (config.chunk_bytes, config.ring_blocks);
    let total = dst.len();
    let span = |i: usize| (i * chunk, chunk.min(total - i * chunk));
    let chunks = total.div_ceil(chunk);
    for i in 0..chunks.min(ring) {
        dma.idle_block(i)?;
        let (offset, len) = span(i);
        dma.to_host(i, offset, len)?;
    }
    for (i, piece) in dst.chunks_mut(chunk).enumerate() {
        let slot = i % ring;
        let block = dma.idle_block(slot)?;
        // SAFETY: `idle_block` returned after the DMA of chunk `i` into `block`
        // completed, and no other DMA into it is enqueued before this copy ends; `piece`
        // is borrowed mutably, so nothing else reads or writes it; a pool block and a
        // caller's slice never overlap.
        unsafe { host_copy::copy_bytes(piece.as_mut_ptr(), block, piece.len(), config.threads) };
        if i + ring < chunks {
            let (offset, len) = span(i + ring);
            dma.to_host(slot, offset, len)?;
        }
    }
    Ok(())
}

/// The ring of pool blocks of one staged copy, and the device range it copies to or
/// from on `stream`. Dropping it gives the blocks back to the pool, armed with the
/// events of their last DMA.
struct CudaRing<'p> {
    stream: sys::CUstream,
    /// The device whose pinned pool the blocks come from (its context is bound).
    owner: &'p DeviceInner,
    device: sys::CUdeviceptr,
    device_len: usize,
    /// `None` for a slot whose block was abandoned after a failure.
    blocks: Vec<Option<Block>>,
}

impl<'p> CudaRing<'p> {
    /// Takes the ring's blocks from the pool (one per chunk, at most `ring_blocks`)
    /// and returns the ring with the effective configuration, its `ring_blocks` the
    /// number of blocks taken. `Ok(None)` when not even one block can be page-locked:
    /// the caller then copies directly, which needs no pinned memory of ours.
    fn new(
        stream: sys::CUstream,
        owner: &'p DeviceInner,
        device: sys::CUdeviceptr,
        device_len: usize,
        config: StagingConfig,
    ) -> Result<Option<(Self, StagingConfig)>> {
        let mut config = config.effective();
        let wanted = device_len
            .div_ceil(config.chunk_bytes)
            .min(config.ring_blocks);
        let cap = config.ring_blocks * PENDING_CAP_RINGS;
        let pool = &owner.pinned;
        let mut ring = CudaRing {
            stream,
            owner,
            device,
            device_len,
            blocks: Vec::with_capacity(wanted),
        };
        while ring.blocks.len() < wanted {
            match pool.take_staging(config.chunk_bytes, stream, cap) {
                Ok(block) => ring.blocks.push(Some(block)),
                // Out of page-lockable memory: go on with the blocks already taken.
                Err(Error::HostOutOfMemory { .. }) => break,
                Err(e) => return Err(e),
            }
        }
        if ring.blocks.is_empty() {
            return Ok(None);
        }
        config.ring_blocks = ring.blocks.len();
        Ok(Some((ring, config)))
    }

    /// Block `slot`, or an error when it has none (an abandoned block).
    fn block(&mut self, slot: usize) -> Result<&mut Block> {
        self.blocks
            .get_mut(slot)
            .and_then(Option::as_mut)
            .ok_or(Error::OutOfRange {
                start: slot,
                end: slot + 1,
                len: 0,
            })
    }

    /// Checks that a DMA of `len` bytes at `offset` stays inside the device range and
    /// inside block `slot`.
    fn check(&mut self, slot: usize, offset: usize, len: usize) -> Result<()> {
        let end = offset.checked_add(len).filter(|&e| e <= self.device_len);
        let fits = self.block(slot)?.size() >= len;
        match end {
            Some(_) if fits => Ok(()),
            _ => Err(Error::OutOfRange {
                start: offset,
                end: offset.saturating_add(len),
                len: self.device_len,
            }),
        }
    }

    /// Records block `slot`'s event after the DMA `enqueued` reports on, or abandons
    /// the block when the DMA's completion cannot be tracked.
    fn arm(&mut self, slot: usize, enqueued: Result<()>) -> Result<()> {
        let (stream, owner) = (self.stream, self.owner);
        let armed = enqueued.and_then(|()| self.block(slot)?.arm(owner, stream));
        if armed.is_err() {
            // A DMA may have been enqueued that no event covers: never reuse the block.
            if let Some(block) = self.blocks.get_mut(slot).and_then(Option::take) {
                owner.pinned.abandon(block);
            }
        }
        armed
    }
}

impl Dma for CudaRing<'_> {
    fn idle_block(&mut self, slot: usize) -> Result<*mut u8> {
        let waited = self.block(slot)?.wait_idle();
        if let Err(e) = waited {
            if let Some(block) = self.blocks.get_mut(slot).and_then(Option::take) {
                self.owner.pinned.abandon(block);
            }
            return Err(e);
        }
        Ok(self.block(slot)?.ptr().as_ptr())
    }

    fn to_device(&mut self, slot: usize, offset: usize, len: usize) -> Result<()> {
        self.check(slot, offset, len)?;
        let (stream, dst) = (self.stream, self.device + offset as u64);
        let src = self.block(slot)?.ptr().as_ptr();
        // SAFETY: `dst..dst + len` lies in the device range (checked above), which the
        // caller of `try_upload` guarantees is device memory valid on `stream` for this
        // copy. `src` is the block's first `len <= size` bytes (checked), just written by
        // the host copy, which returned before this call; the block stays allocated and
        // unwritten until the event recorded below reports this DMA complete (the pool
        // hands out, and `trim` frees, only idle blocks).
        let enqueued = unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, stream) }
            .result()
            .call("cuMemcpyHtoDAsync");
        self.arm(slot, enqueued)
    }

    fn to_host(&mut self, slot: usize, offset: usize, len: usize) -> Result<()> {
        self.check(slot, offset, len)?;
        let (stream, src) = (self.stream, self.device + offset as u64);
        let dst = self.block(slot)?.ptr().as_ptr();
        // SAFETY: `src..src + len` lies in the device range (checked above), which the
        // caller of `try_download` guarantees is device memory valid on `stream` for this
        // copy. `dst` is the block's first `len <= size` bytes (checked), idle (the
        // pipeline called `idle_block` first); the host reads it only after waiting for
        // the event recorded below, and the pool neither hands out nor frees it before
        // that event completed. Any bytes are valid in a byte buffer.
        let enqueued = unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, stream) }
            .result()
            .call("cuMemcpyDtoHAsync");
        self.arm(slot, enqueued)
    }
}

impl Drop for CudaRing<'_> {
    fn drop(&mut self) {
        for block in self.blocks.drain(..).flatten() {
            self.owner.pinned.give_back(block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated DMA engine. Late: each queued DMA runs only when the host waits for
    /// its block (as late as the rules allow), so a block written before its DMA ran
    /// corrupts the device copy. Eager: each DMA runs when enqueued, so a block read by
    /// the host after the next DMA into it was enqueued gets that DMA's bytes.
    struct SimulatedDma {
        eager: bool,
        device: Vec<u8>,
        blocks: Vec<Vec<u8>>,
        chunk: usize,
        /// Queued DMAs in stream order: (slot, offset, len, to_device).
        queue: Vec<(usize, usize, usize, bool)>,
    }

    impl SimulatedDma {
        fn new(device: Vec<u8>, chunk: usize, eager: bool) -> Self {
            SimulatedDma {
                eager,
                device,
                blocks: Vec::new(),
                chunk,
                queue: Vec::new(),
            }
        }

        /// Runs queued DMAs in stream order up to and including the last one of `slot`.
        fn run_until(&mut self, slot: usize) {
            let Some(last) = self.queue.iter().rposition(|d| d.0 == slot) else {
                return;
            };
            for (s, offset, len, to_device) in self.queue.drain(..=last) {
                if to_device {
                    self.device[offset..offset + len].copy_from_slice(&self.blocks[s][..len]);
                } else {
                    self.blocks[s][..len].copy_from_slice(&self.device[offset..offset + len]);
                }
            }
        }

        /// What the stream's final synchronisation does: run everything queued.
        fn finish(&mut self) {
            while let Some(&(slot, ..)) = self.queue.last() {
                self.run_until(slot);
            }
        }

        fn enqueue(&mut self, slot: usize, offset: usize, len: usize, to_device: bool) {
            assert!(
                slot < self.blocks.len(),
                "DMA with block {slot} never taken"
            );
            assert!(len <= self.chunk && offset + len <= self.device.len());
            self.queue.push((slot, offset, len, to_device));
            if self.eager {
                self.run_until(slot);
            }
        }
    }

    impl Dma for SimulatedDma {
        fn idle_block(&mut self, slot: usize) -> Result<*mut u8> {
            while self.blocks.len() <= slot {
                // Fresh blocks hold garbage, as reused pool blocks do.
                self.blocks.push(vec![0xEE; self.chunk]);
            }
            self.run_until(slot);
            Ok(self.blocks[slot].as_mut_ptr())
        }

        fn to_device(&mut self, slot: usize, offset: usize, len: usize) -> Result<()> {
            self.enqueue(slot, offset, len, true);
            Ok(())
        }

        fn to_host(&mut self, slot: usize, offset: usize, len: usize) -> Result<()> {
            self.enqueue(slot, offset, len, false);
            Ok(())
        }
    }

    fn pattern(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    fn config(chunk: usize, ring: usize, threads: usize) -> StagingConfig {
        StagingConfig {
            upload_threshold: 0,
            download_threshold: 0,
            chunk_bytes: chunk,
            ring_blocks: ring,
            threads,
        }
    }

    /// Lengths around every chunk boundary up to four chunks.
    fn lengths(chunk: usize) -> Vec<usize> {
        let mut v = vec![1, 2, chunk / 2];
        for k in 1..=4 {
            v.extend([chunk * k - 1, chunk * k, chunk * k + 1]);
        }
        v
    }

    #[test]
    fn upload_pipeline_is_byte_exact_with_late_and_eager_dma() {
        for eager in [false, true] {
            for chunk in [4096, 3 * 4096 + 5, 512 << 10] {
                for ring in [1, 2, 3, 4] {
                    for len in lengths(chunk) {
                        let src = pattern(len, len as u64);
                        let mut dma = SimulatedDma::new(vec![0xDB; len], chunk, eager);
                        upload_pipeline(&mut dma, &src, config(chunk, ring, 3)).unwrap();
                        dma.finish();
                        assert!(
                            dma.device == src,
                            "upload of {len} bytes, chunk {chunk}, ring {ring}, eager {eager} differs"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn download_pipeline_is_byte_exact_with_late_and_eager_dma() {
        for eager in [false, true] {
            for chunk in [4096, 3 * 4096 + 5, 512 << 10] {
                for ring in [1, 2, 3, 4] {
                    for len in lengths(chunk) {
                        let device = pattern(len, !(len as u64));
                        let mut dma = SimulatedDma::new(device.clone(), chunk, eager);
                        let mut dst = vec![0xDB; len];
                        download_pipeline(&mut dma, &mut dst, config(chunk, ring, 3)).unwrap();
                        assert!(
                            dst == device,
                            "download of {len} bytes, chunk {chunk}, ring {ring}, eager {eager} differs"
                        );
                    }
                }
            }
        }
    }

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
        assert!(c.threads <= host_copy::MAX_THREADS);
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

    #[test]
    fn empty_slices_are_never_pageable() {
        assert!(!is_pageable(&[]));
    }
}
