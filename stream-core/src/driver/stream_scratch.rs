//! [`StreamScratch`]: device memory a stream keeps for the workspaces of the libraries
//! called on it.

use std::sync::{Mutex, PoisonError};

use cudarc::driver::sys;

use super::memory::free_async;
use super::stream::RawStream;
use crate::error::Result;

/// One block of device memory, allocated stream-ordered on the stream that holds it, kept
/// for the workspaces of library calls issued on that stream (cuBLAS needs 4 to 32 MiB
/// per call): a call borrows it instead of allocating and freeing its own.
///
/// The block is lent under a lock for as long as the caller enqueues its work, so two
/// threads issuing on one stream never interleave their uses; the work itself runs in
/// stream order, so uses never overlap on the GPU either. It grows when a caller asks
/// for more (the old block is freed stream-ordered, after every use enqueued so far),
/// and is freed, stream-ordered, when its stream is dropped.
#[derive(Default)]
pub(crate) struct StreamScratch(Mutex<Block>);

/// The block: `bytes` at `ptr`, or nothing yet (`ptr == 0`).
#[derive(Default)]
struct Block {
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl RawStream {
    /// Runs `use_it` with this stream's scratch block, grown first to at least `bytes`
    /// with `alloc` if it is smaller (on failure, the old block is kept and the error
    /// returned). What the block is valid for, which callers' own unsafe calls rely on:
    /// work enqueued on this stream, until it completes. It stays allocated until this
    /// stream is dropped or a later call grows it, and either frees it stream-ordered on
    /// this stream, after all work enqueued on it so far.
    ///
    /// # Safety
    ///
    /// `alloc(n)` returns `n` bytes allocated stream-ordered on this stream (usable by work
    /// enqueued on it from then on), owned by nothing else.
    pub(crate) unsafe fn with_scratch<R>(
        &self,
        bytes: usize,
        alloc: impl FnOnce(usize) -> Result<sys::CUdeviceptr>,
        use_it: impl FnOnce(sys::CUdeviceptr) -> R,
    ) -> Result<R> {
        let mut block = self
            .scratch
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if block.bytes < bytes {
            let grown = alloc(bytes)?;
            let old = std::mem::replace(&mut *block, Block { ptr: grown, bytes });
            if old.ptr != 0 {
                // SAFETY: `old` was allocated stream-ordered on this stream (the contract
                // of the call that made it) and is freed once: it left the block above,
                // so no later caller gets it. It was valid only for work enqueued on
                // this stream (see above), all of which this free is ordered after.
                unsafe { free_async(old.ptr, self) }?;
            }
        }
        Ok(use_it(block.ptr))
    }
}

impl StreamScratch {
    /// Frees the block, stream-ordered after all work enqueued on `stream` so far: called
    /// by `RawStream`'s `Drop`, with the context bound, on the scratch it took out of the
    /// stream (so no caller holds the block).
    pub(super) fn release(self, stream: &RawStream) {
        let block = self.0.into_inner().unwrap_or_else(PoisonError::into_inner);
        if block.ptr != 0 {
            // SAFETY: allocated stream-ordered on `stream`, whose scratch this was
            // (`with_scratch`'s contract), and freed once (the scratch is consumed); it was
            // valid only for work enqueued on `stream`, all of it before now, so the free
            // is ordered after every use.
            let _ = unsafe { free_async(block.ptr, stream) };
        }
    }
}
