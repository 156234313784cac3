//! [`StreamScratch`]: device memory a stream keeps for the workspaces of the libraries
//! called on it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use cudarc::driver::sys;

use super::memory::free_async;
use super::stream::RawStream;
use crate::error::{Error, Result};

/// One block of device memory, allocated stream-ordered on the stream that holds it, kept
/// for the workspaces of library calls issued on that stream (cuBLAS needs 4 to 32 MiB
/// per call): a call borrows it instead of allocating and freeing its own.
///
/// The block is lent under a lock for as long as the caller enqueues its work, so two
/// threads issuing on one stream never interleave their uses; the work itself runs in
/// stream order, so uses never overlap on the GPU either. It grows when a caller asks
/// for more (the old block is freed stream-ordered, after every use enqueued so far),
/// and is freed, stream-ordered, when its stream is dropped. A thread asking again while
/// the block is lent to it (from inside its own `use_it`) gets an error, not a deadlock.
pub(crate) struct StreamScratch {
    /// The stream this scratch belongs to: [`lend`](Self::lend) and
    /// [`release`](Self::release) refuse any other (a live stream's handle is unique).
    /// Its address, only compared.
    stream: usize,
    block: Mutex<Block>,
    /// The thread the block is lent to ([`this_thread`]), 0 while it is not lent.
    lent_to: AtomicUsize,
}

thread_local! {
    /// Only its address is used: it names the thread.
    static THREAD_MARK: u8 = const { 0 };
}

/// A number unique to the calling thread among live threads (the address of its
/// [`THREAD_MARK`]), never 0.
fn this_thread() -> usize {
    THREAD_MARK.with(|mark| std::ptr::from_ref(mark) as usize)
}

/// Marks the block as no longer lent when dropped (also when `use_it` unwinds).
struct Lent<'a>(&'a AtomicUsize);

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// The block: `bytes` at `ptr`, or nothing yet (`ptr == 0`).
#[derive(Default)]
struct Block {
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl StreamScratch {
    /// An empty scratch for `stream`.
    pub(crate) fn new(stream: &RawStream) -> Self {
        StreamScratch {
            stream: stream.raw() as usize,
            block: Mutex::default(),
            lent_to: AtomicUsize::new(0),
        }
    }

    /// Runs `use_it` with the scratch block of `stream` (the stream that holds this
    /// scratch), grown first to at least `bytes`
    /// with `alloc` if it is smaller (on failure, the old block is kept and the error
    /// returned). What the block is valid for, which callers' own unsafe calls rely on:
    /// work enqueued on this stream, until it completes. It stays allocated until this
    /// stream is dropped or a later call grows it, and either frees it stream-ordered on
    /// this stream, after all work enqueued on it so far.
    ///
    /// # Safety
    ///
    /// `alloc(n)` returns `n` bytes allocated stream-ordered on
    /// `stream` (usable by work enqueued on it from then on), owned by nothing else.
    pub(crate) unsafe fn lend<R>(
        &self,
        stream: &RawStream,
        bytes: usize,
        alloc: impl FnOnce(usize) -> Result<sys::CUdeviceptr>,
        use_it: impl FnOnce(sys::CUdeviceptr) -> R,
    ) -> Result<R> {
        let scratch = self;
        if stream.raw() as usize != self.stream {
            return Err(Error::from(crate::error::Library {
                call: "interop::with_stream_scratch",
                message: "the scratch of one stream was asked for with another".to_owned(),
            }));
        }
        let me = this_thread();
        // Only the thread holding the lock stores its own mark, so seeing it here means
        // this thread holds the lock already: locking again would never return.
        if scratch.lent_to.load(Ordering::Relaxed) == me {
            return Err(Error::from(crate::error::Library {
                call: "interop::with_stream_scratch",
                message: "called again, on the same stream, from inside the closure it lends \
                          the stream's scratch to; ask for the larger size once, outside"
                    .to_owned(),
            }));
        }
        let mut block = scratch.block.lock().unwrap_or_else(PoisonError::into_inner);
        scratch.lent_to.store(me, Ordering::Relaxed);
        let _lent = Lent(&scratch.lent_to);
        if block.bytes < bytes {
            let grown = alloc(bytes)?;
            let old = std::mem::replace(&mut *block, Block { ptr: grown, bytes });
            if old.ptr != 0 {
                // SAFETY: `old` was allocated stream-ordered on `stream` (the contract
                // of the call that made it) and is freed once: it left the block above,
                // so no later caller gets it. It was valid only for work enqueued on
                // `stream` (see above), all of which this free is ordered after.
                unsafe { free_async(old.ptr, stream) }?;
            }
        }
        Ok(use_it(block.ptr))
    }
}

impl StreamScratch {
    /// Frees the block, stream-ordered after all work enqueued on `stream` so far: called
    /// by the `Drop` of the stream that holds this scratch, before that stream is
    /// destroyed, on the scratch it took out (so no caller holds the block). Given
    /// another stream, it leaks the block rather than free it out of order.
    pub(crate) fn release(self, stream: &RawStream) {
        if stream.raw() as usize != self.stream {
            return;
        }
        let _bound = stream.context().bind();
        let block = self
            .block
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        if block.ptr != 0 {
            // SAFETY: allocated stream-ordered on `stream`, whose scratch this was
            // (`lend` and this function check the handle), and freed once (the scratch is consumed); it was
            // valid only for work enqueued on `stream`, all of it before now, so the free
            // is ordered after every use.
            let _ = unsafe { free_async(block.ptr, stream) };
        }
    }
}
