//! [`CudaRing`]: the ring of pinned pool blocks of one staged copy, and its DMAs.

use std::sync::Arc;

use super::config::{StagingConfig, PENDING_CAP_RINGS};
use super::pipeline::Dma;
use crate::driver::memory::{copy_device_to_host, copy_host_to_device};
use crate::error::{Error, Result};
use crate::host::pinned_pool::{Block, PinnedPool};
use crate::memory::StreamRange;
use crate::trace::ChunkTrace;

/// The ring of pool blocks of one staged copy, and the device range it copies to or
/// from on `stream`. Dropping it gives the blocks back to the pool, armed with the
/// events of their last DMA.
pub(super) struct CudaRing<'p> {
    /// The pinned pool of the stream's device, where the blocks come from.
    pool: Arc<PinnedPool>,
    /// The device bytes copied to or from, lent to the work of its stream, on which
    /// the DMAs are enqueued.
    range: StreamRange<'p>,
    /// `None` for a slot whose block was abandoned after a failure.
    blocks: Vec<Option<Block>>,
    /// Where each chunk's DMA is recorded, in a traced scope.
    chunks: Option<ChunkTrace<'p>>,
}

impl<'p> CudaRing<'p> {
    /// Takes the ring's blocks from the pinned pool of `range`'s device (one per chunk,
    /// at most `ring_blocks`) and returns the ring with the effective configuration, its
    /// `ring_blocks` the number of blocks taken. `Ok(None)` when not even one block can
    /// be page-locked: the caller then copies directly, which needs no pinned memory of
    /// ours.
    pub(super) fn new(
        range: StreamRange<'p>,
        config: StagingConfig,
    ) -> Result<Option<(Self, StagingConfig)>> {
        let (stream, device_len) = (range.stream(), range.len());
        let mut config = config.effective();
        let wanted = device_len
            .div_ceil(config.chunk_bytes)
            .min(config.ring_blocks);
        let cap = config.ring_blocks * PENDING_CAP_RINGS;
        let mut ring = CudaRing {
            pool: PinnedPool::of(range.device()),
            range,
            blocks: Vec::with_capacity(wanted),
            chunks: None,
        };
        while ring.blocks.len() < wanted {
            match ring
                .pool
                .take_staging(config.chunk_bytes, stream.raw(), cap)
            {
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

    /// Records each chunk's DMA into `chunks` (a traced scope's trace, on this ring's
    /// stream).
    pub(super) fn record_chunks(&mut self, chunks: Option<ChunkTrace<'p>>) {
        self.chunks = chunks;
    }

    /// Block `slot`, or an error when it has none (an abandoned block).
    fn block(&mut self, slot: usize) -> Result<&mut Block> {
        self.blocks
            .get_mut(slot)
            .and_then(Option::as_mut)
            .ok_or(Error::from(crate::error::OutOfRange {
                start: slot,
                end: slot + 1,
                len: 0,
            }))
    }

    /// Checks that a DMA of `len` bytes at `offset` stays inside the device range and
    /// inside block `slot`.
    fn check(&mut self, slot: usize, offset: usize, len: usize) -> Result<()> {
        let end = offset.checked_add(len).filter(|&e| e <= self.range.len());
        let fits = self.block(slot)?.size() >= len;
        match end {
            Some(_) if fits => Ok(()),
            _ => Err(Error::from(crate::error::OutOfRange {
                start: offset,
                end: offset.saturating_add(len),
                len: self.range.len(),
            })),
        }
    }

    /// Records block `slot`'s event after the DMA `enqueued` reports on, or abandons
    /// the block when the DMA's completion cannot be tracked.
    fn arm(&mut self, slot: usize, enqueued: Result<()>) -> Result<()> {
        let stream = self.range.stream();
        let armed = enqueued.and_then(|()| self.block(slot)?.arm(stream));
        if armed.is_err() {
            // A DMA may have been enqueued that no event covers: never reuse the block.
            if let Some(block) = self.blocks.get_mut(slot).and_then(Option::take) {
                self.pool.abandon(block);
            }
        }
        armed
    }
}

impl Dma for CudaRing<'_> {
    fn idle_block(&mut self, slot: usize) -> Result<&mut [u8]> {
        let context = Arc::clone(self.range.stream().context());
        let waited = self.block(slot)?.wait_idle(&context);
        if let Err(e) = waited {
            if let Some(block) = self.blocks.get_mut(slot).and_then(Option::take) {
                self.pool.abandon(block);
            }
            return Err(e);
        }
        // Idle (waited for above): no DMA uses it, and none is enqueued while this borrow
        // of `self` lasts.
        let size = self.block(slot)?.size();
        self.block(slot)?
            .bytes_mut()
            .ok_or(Error::from(crate::error::OutOfRange {
                start: slot,
                end: slot + 1,
                len: size,
            }))
    }

    fn to_device(&mut self, slot: usize, offset: usize, len: usize) -> Result<()> {
        self.check(slot, offset, len)?;
        if !self.range.is_writable() {
            return Err(Error::from(crate::error::Library {
                call: "staged upload",
                message: "the device range was lent for reading only".to_owned(),
            }));
        }
        let (stream, dst) = (self.range.stream(), self.range.ptr() + offset as u64);
        let src = self.block(slot)?.ptr().as_ptr();
        // SAFETY: `dst..dst + len` lies in the device range (checked above), a writable
        // `StreamRange` lent to `stream`'s work for `'p`, which this ring lives in, and
        // this copy is enqueued on `stream`. `src` is the block's first `len <= size`
        // bytes (checked), just written by the host copy, which returned before this
        // call; the block stays allocated and unwritten until the event recorded below
        // reports this DMA complete (the pool hands out, and frees, only idle blocks).
        let dma = || unsafe { copy_host_to_device(dst, src, len, stream) };
        let enqueued = match self.chunks {
            Some(chunks) => chunks.record("staged upload chunk", len, dma),
            None => dma(),
        };
        self.arm(slot, enqueued)
    }

    fn to_host(&mut self, slot: usize, offset: usize, len: usize) -> Result<()> {
        self.check(slot, offset, len)?;
        let (stream, src) = (self.range.stream(), self.range.ptr() + offset as u64);
        let dst = self.block(slot)?.ptr().as_ptr();
        // SAFETY: `src..src + len` lies in the device range (checked above), a
        // `StreamRange` lent to `stream`'s work for `'p`, which this ring lives in, and
        // this copy is enqueued on `stream`. `dst` is the block's first `len <= size`
        // bytes (checked), idle (the pipeline called `idle_block` first); the host reads it
        // only after waiting for the event recorded below, and the pool neither hands out
        // nor frees it before that event completed. Any bytes are valid in a byte buffer.
        let dma = || unsafe { copy_device_to_host(dst, src, len, stream) };
        let enqueued = match self.chunks {
            Some(chunks) => chunks.record("staged download chunk", len, dma),
            None => dma(),
        };
        self.arm(slot, enqueued)
    }
}

impl Drop for CudaRing<'_> {
    fn drop(&mut self) {
        for block in self.blocks.drain(..).flatten() {
            self.pool.give_back(block);
        }
    }
}
