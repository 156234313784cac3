//! The order of a staged copy: chunk by chunk through a ring of blocks, the host memcpy
//! of one chunk overlapping the DMA of the others (see the [module docs](super)).

use super::config::StagingConfig;
use super::memcpy;
use crate::error::{Error, Result};

/// The GPU side of a staged copy: a ring of staging blocks and the DMAs between them and
/// one range of device memory. Implemented by [`CudaRing`](super::ring::CudaRing); the unit
/// tests implement it with a simulated, deliberately late DMA engine.
pub(crate) trait Dma {
    /// Ring block `slot` (`slot < ring_blocks`, at least one chunk long), once no DMA
    /// uses it any more (blocking until then). The borrow ends before the next DMA of
    /// any block can be enqueued.
    fn idle_block(&mut self, slot: usize) -> Result<&mut [u8]>;
    /// Enqueues the DMA of `len` bytes from block `slot` to the device range at
    /// `offset`.
    fn to_device(&mut self, slot: usize, offset: usize, len: usize) -> Result<()>;
    /// Enqueues the DMA of `len` bytes from the device range at `offset` into block
    /// `slot`.
    fn to_host(&mut self, slot: usize, offset: usize, len: usize) -> Result<()>;
}

/// The first `len` bytes of `block`, or an error if it is shorter (never: blocks are at
/// least one chunk long).
fn chunk_of(block: &mut [u8], len: usize) -> Result<&mut [u8]> {
    let size = block.len();
    block
        .get_mut(..len)
        .ok_or(Error::from(crate::error::OutOfRange {
            start: 0,
            end: len,
            len: size,
        }))
}

/// Host to device, chunk by chunk through the ring (see the module docs); the blocks of
/// the last `streaming_tail` chunks (`usize::MAX`: all) are written with streaming
/// stores (see [`StreamingStores`](super::stripe::StreamingStores) for why the last).
pub(crate) fn upload_pipeline(
    dma: &mut impl Dma,
    src: &[u8],
    config: StagingConfig,
    streaming_tail: usize,
) -> Result<()> {
    let _nvtx = crate::driver::nvtx::range(c"stream_core::staged_upload");
    let chunk = config.chunk_bytes;
    let chunks = src.len().div_ceil(chunk);
    for (i, piece) in src.chunks(chunk).enumerate() {
        let slot = i % config.ring_blocks;
        let block = chunk_of(dma.idle_block(slot)?, piece.len())?;
        let streaming = chunks - i <= streaming_tail;
        memcpy::copy_bytes(block, piece, config.threads, streaming);
        dma.to_device(slot, i * chunk, piece.len())?;
    }
    Ok(())
}

/// Device to host, the DMA running a ring ahead of the host copy (see the module docs);
/// `dst` is written with streaming stores when `streaming`.
pub(crate) fn download_pipeline(
    dma: &mut impl Dma,
    dst: &mut [u8],
    config: StagingConfig,
    streaming: bool,
) -> Result<()> {
    let _nvtx = crate::driver::nvtx::range(c"stream_core::staged_download");
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
        // `idle_block` returns after the DMA of chunk `i` into the block completed.
        let block = chunk_of(dma.idle_block(slot)?, piece.len())?;
        memcpy::copy_bytes(piece, block, config.threads, streaming);
        if i + ring < chunks {
            let (offset, len) = span(i + ring);
            dma.to_host(slot, offset, len)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::staging::config::config;

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
        fn idle_block(&mut self, slot: usize) -> Result<&mut [u8]> {
            while self.blocks.len() <= slot {
                // Fresh blocks hold garbage, as reused pool blocks do.
                self.blocks.push(vec![0xEE; self.chunk]);
            }
            self.run_until(slot);
            Ok(&mut self.blocks[slot])
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
                        let tail = if eager { usize::MAX } else { 2 };
                        upload_pipeline(&mut dma, &src, config(chunk, ring, 3), tail).unwrap();
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
                        download_pipeline(&mut dma, &mut dst, config(chunk, ring, 3), !eager)
                            .unwrap();
                        assert!(
                            dst == device,
                            "download of {len} bytes, chunk {chunk}, ring {ring}, eager {eager} differs"
                        );
                    }
                }
            }
        }
    }
}
