//! For tests: a word of pinned host memory that a stream waits for on the GPU
//! (`cuStreamWaitValue32`) until the host raises it. A stall that is GPU work, as an NCCL
//! kernel spinning on its peers' flags is, rather than a host function (the driver runs
//! host functions on a thread of its own, where one that blocks holds up all the others).
//! A kernel of one thread spinning on the flag gave the same figures in the tests of
//! `scope/outstanding/tests/other_threads.rs` (one H200, 2026-11-29).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use cudarc::driver::{result, sys};

use super::context::PrimaryContext;
use super::stream::RawStream;
use crate::error::{DriverResultExt, Error, Result};

/// A lowered flag in pinned host memory, mapped into the GPU, which a stream can wait
/// for ([`wait_on`](Self::wait_on)) until the host [`raise`](Self::raise)s it. Never
/// freed by itself (a free waits for the whole GPU, a stream waiting on the flag
/// included), so it is freed with its context, when the context is destroyed: each copy
/// keeps the context alive, as a stream waiting on it does. (Once a `Copy` that kept
/// nothing alive: a stall's deadline thread raised its flag after the last `Device` of
/// the process had gone and the context with it, and the lib's tests crashed with
/// SIGSEGV in most parallel runs on one H200.)
#[derive(Clone)]
pub(crate) struct HostFlag {
    /// The word, valid while `context` lives (never handed out beyond `&self`).
    word: &'static AtomicU32,
    device: sys::CUdeviceptr,
    /// The context whose allocation the word is: alive for as long as this copy.
    context: Arc<PrimaryContext>,
}

impl HostFlag {
    /// A new lowered flag, allocated in `context` (a page of pinned memory, leaked).
    pub(crate) fn new(context: &Arc<PrimaryContext>) -> Result<Self> {
        let _bound = context.bind()?;
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        let size = std::mem::size_of::<AtomicU32>();
        // SAFETY: a plain allocation in the bound context, read only as the atomic below.
        let raw = unsafe { result::malloc_host(size, flags) }.call("cuMemHostAlloc")?;
        if raw.is_null() || !raw.cast::<AtomicU32>().is_aligned() {
            return Err(Error::HostOutOfMemory { requested: size });
        }
        // SAFETY: `raw` is `size` bytes of host memory (page-aligned, checked aligned for an
        // `AtomicU32`), never freed but with `context`, which every copy of the flag keeps
        // alive, and the reference is only reached through `&self` of a copy (the
        // `'static` never leaves this type); nothing else knows it yet, and from here on
        // the host reaches it only through this atomic.
        let word = unsafe { AtomicU32::from_ptr(raw.cast::<u32>()) };
        word.store(0, Ordering::SeqCst);
        let mut device = 0;
        // SAFETY: `device` is a live out-pointer; `raw` is a mapped (`DEVICEMAP`) pinned
        // allocation of the bound context.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, raw, 0) }
            .result()
            .call("cuMemHostGetDevicePointer")?;
        Ok(HostFlag {
            word,
            device,
            context: Arc::clone(context),
        })
    }

    /// Makes `stream`'s later work wait, on the GPU, until the flag is raised.
    pub(crate) fn wait_on(&self, stream: &RawStream) -> Result<()> {
        let (flag_device, stream_device) = (self.context.device(), stream.context().device());
        if flag_device != stream_device {
            return Err(Error::DeviceMismatch {
                memory: flag_device.raw().max(0) as usize,
                stream: stream_device.raw().max(0) as usize,
            });
        }
        let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: `stream` is live (borrowed); `self.device` maps the flag's word, freed only
        // with its context, which `stream` keeps alive for as long as the wait can last
        // (the stream is of the flag's device, whose primary context both keep: checked
        // above).
        unsafe { sys::cuStreamWaitValue32_v2(stream.raw(), self.device, 1, geq) }
            .result()
            .call("cuStreamWaitValue32")
    }

    /// Raises the flag: every wait on it ends (the GPU sees the write shortly after).
    pub(crate) fn raise(&self) {
        self.word.store(1, Ordering::SeqCst);
    }
}
