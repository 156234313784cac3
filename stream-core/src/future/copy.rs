//! [`Stream::upload_owned`] and [`Stream::download_owned`]: one copy between an owned
//! host buffer and a `DeviceVec`, as a future.
//!
//! Pinned buffers ([`PinnedBuffer`](crate::PinnedBuffer)) are copied by one DMA.
//! Pageable ones (`Vec<T>`, `Box<[T]>`) go through a block of the device's pinned pool
//! that the future owns with them: an upload copies the buffer into the block on the
//! calling thread, then the DMA reads the block; a download's DMA writes the block, and
//! the future copies it into the buffer when it completes, on the polling thread. The
//! driver's own pageable path is never taken: it blocks the calling thread (a download
//! until the data has landed, behind all earlier work of the stream).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::completion::Inflight;
use super::owned_host::{OwnedDeviceVec, OwnedHostBuffer, TOKEN};
use super::watcher::Watcher;
use crate::device::{Device, Stream};
use crate::driver::memory::{copy_device_to_host, copy_host_to_device};
use crate::driver::pool::StreamOrdered;
use crate::error::{byte_len, Error, Result};
use crate::host::pinned_pool::{Block, HostKind, PinnedPool};
use crate::memory::{as_bytes, as_bytes_mut, DeviceVec};
use crate::scope::owned::refuse_capturing;

impl Stream {
    /// Copies `host` into new device memory and returns a future of the
    /// [`DeviceVec`] and `host`, handed back once the copy has completed on the GPU.
    /// No thread blocks on the GPU.
    ///
    /// The copy is enqueued **now**; the future only waits. The memory is allocated
    /// stream-ordered on this stream (not on the device's housekeeping stream, which
    /// [`Device::upload_vec`] waits for), and the `DeviceVec` is handed out only once the
    /// copy has completed, so it is ready for any stream. A pageable `host` (a `Vec`, a
    /// `Box<[T]>`) is first copied into a pinned block of the device's pool on this
    /// thread; a [`PinnedBuffer`](crate::PinnedBuffer) is read by the DMA directly.
    ///
    /// Dropping the future does not cancel the copy: `host`, the device memory and the
    /// block are released once it has completed; forgetting the future leaks them.
    ///
    /// ```no_run
    /// # async fn f(stream: &stream_core::Stream) -> stream_core::Result<()> {
    /// let data: Vec<f32> = (0..4096).map(|i| i as f32).collect();
    /// let (on_gpu, data) = stream.upload_owned(data).await?;
    /// assert_eq!(on_gpu.len(), data.len());
    /// # Ok(()) }
    /// ```
    pub fn upload_owned<H: OwnedHostBuffer>(&self, host: H) -> CopyOwned<DeviceVec<H::Item>, H> {
        let _nvtx = crate::driver::nvtx::range(c"stream_core::upload_owned");
        self.start_upload(host).unwrap_or_else(CopyOwned::ready)
    }

    /// Copies `src` into `host` (of the same length) and returns a future of both,
    /// handed back once the copy has completed on the GPU. No thread blocks on the GPU.
    ///
    /// `src` is owned for the length of the copy: a [`DeviceVec`] by value, or an
    /// `Arc<DeviceVec>` to share one between downloads (see [`OwnedDeviceVec`]). A
    /// borrowed `&DeviceVec` would not do: forgetting the future would end the borrow
    /// while the DMA still reads the memory, which could then be freed or written. A
    /// pageable `host` is filled from a pinned block of the device's pool when the future
    /// completes, on the thread that polls it.
    ///
    /// Returns [`Error::LengthMismatch`] for buffers of different lengths and
    /// [`Error::DeviceMismatch`] for a `DeviceVec` of another device, before enqueuing
    /// anything. Dropping the future does not cancel the copy (see
    /// [`upload_owned`](Self::upload_owned)).
    ///
    /// ```no_run
    /// # async fn f(dev: &stream_core::Device, stream: &stream_core::Stream) -> stream_core::Result<()> {
    /// let weights = dev.upload_vec(&[1.0f32, 2.0, 3.0])?;
    /// let (weights, host) = stream.download_owned(weights, vec![0f32; 3]).await?;
    /// assert_eq!(host, [1.0, 2.0, 3.0]);
    /// # drop(weights); Ok(()) }
    /// ```
    pub fn download_owned<D, H>(&self, src: D, host: H) -> CopyOwned<D, H>
    where
        D: OwnedDeviceVec,
        H: OwnedHostBuffer<Item = D::Item>,
    {
        let _nvtx = crate::driver::nvtx::range(c"stream_core::download_owned");
        self.start_download(src, host)
            .unwrap_or_else(CopyOwned::ready)
    }

    fn start_upload<H: OwnedHostBuffer>(&self, host: H) -> Started<DeviceVec<H::Item>, H> {
        let device = &self.device;
        let _bound = device.inner.bind().map_err(Err)?;
        refuse_capturing(self).map_err(Err)?;
        // Before any work: a completion thread that cannot start fails the call here.
        let watcher = Watcher::of(device).map_err(Err)?;
        let len = host.elements(TOKEN).len();
        let bytes = byte_len::<H::Item>(len).map_err(Err)?;
        // Before the allocation: if it fails, nothing is enqueued yet.
        let mut staging = match H::PINNED || bytes == 0 {
            true => None,
            false => {
                Some(StagingBlock::filled(device, as_bytes(host.elements(TOKEN))).map_err(Err)?)
            }
        };
        let memory = match bytes {
            0 => None,
            _ => Some(device.inner.alloc_async(&self.raw, bytes).map_err(Err)?),
        };
        let ptr = memory.as_ref().map_or(0, StreamOrdered::ptr);
        // SAFETY: `memory` was just allocated stream-ordered on this stream for `len`
        // elements (or is `None` with `len == 0`). The `DeviceVec` goes
        // into the payload below, which `Inflight` holds until the completion thread has
        // seen an event recorded after the copy complete (or leaks, if none can be
        // recorded or waited for); only then is it handed out or dropped.
        let vec = unsafe { DeviceVec::from_stream_ordered(device, memory, len) };
        if bytes == 0 {
            return Err(Ok((vec, host)));
        }
        let src = match &mut staging {
            Some(block) => block.ptr_mut().cast_const(),
            None => host.elements(TOKEN).as_ptr().cast::<u8>(),
        };
        // SAFETY: `ptr` is `bytes` bytes of device memory allocated just above on this
        // stream, used by nothing else, and freed only after the event after this copy
        // has completed. `src` is `bytes` bytes of pinned host memory: the elements of a
        // `PinnedBuffer`, or the staging block filled above (at least `bytes` long). Both
        // are owned by the payload below, and moving the payload moves only their
        // handles; `Inflight` keeps it untouched until the completion thread has seen an
        // event recorded after this copy complete, or leaks it.
        let copied = unsafe { copy_host_to_device(ptr, src, bytes, &self.raw) };
        let payload = Payload {
            device: vec,
            host,
            staging,
            fill_host: false,
        };
        let inflight = Inflight::after(&watcher, self, payload).map_err(Err)?;
        Ok(CopyOwned::waiting(inflight, copied.err()))
    }

    fn start_download<D, H>(&self, src: D, mut host: H) -> Started<D, H>
    where
        D: OwnedDeviceVec,
        H: OwnedHostBuffer<Item = D::Item>,
    {
        let device = &self.device;
        let _bound = device.inner.bind().map_err(Err)?;
        refuse_capturing(self).map_err(Err)?;
        let watcher = Watcher::of(device).map_err(Err)?;
        device
            .ensure_same_device(src.vec(TOKEN).device())
            .map_err(Err)?;
        let len = src.vec(TOKEN).len();
        Error::check_lengths("download_owned", len, host.elements(TOKEN).len()).map_err(Err)?;
        let bytes = byte_len::<H::Item>(len).map_err(Err)?;
        if bytes == 0 {
            return Err(Ok((src, host)));
        }
        // This stream waits for the vec's ready event, if it has one (a vec converted
        // from cudarc), before the copy below.
        let raw = src.vec(TOKEN).raw_on(&self.raw).map_err(Err)?;
        let mut staging = match H::PINNED {
            true => None,
            false => Some(StagingBlock::take(device, bytes).map_err(Err)?),
        };
        let dst = match &mut staging {
            Some(block) => block.ptr_mut(),
            None => host.elements_mut(TOKEN).as_mut_ptr().cast::<u8>(),
        };
        // SAFETY: `raw` is `bytes` bytes of device memory owned by `src` (a `DeviceVec` or
        // an `Arc` of one), ready for this stream (made by a blocking `DeviceVec` call,
        // handed out by a completed future or scope, or converted from cudarc with a
        // ready event this stream now waits for) and written by nothing while the
        // payload holds `src` (a write needs `&mut DeviceVec`); it is freed only when the
        // payload is released. `dst` is `bytes` bytes of pinned host memory: the elements
        // of a `PinnedBuffer` (any bytes are a valid element, `DeviceRepr`) or the
        // staging block taken above (idle, at least `bytes` long), owned by the payload,
        // which `Inflight` keeps untouched until the completion thread has seen an event
        // recorded after this copy complete, or leaks.
        let copied = unsafe { copy_device_to_host(dst, raw.ptr, bytes, &self.raw) };
        let payload = Payload {
            device: src,
            host,
            staging,
            fill_host: true,
        };
        let inflight = Inflight::after(&watcher, self, payload).map_err(Err)?;
        Ok(CopyOwned::waiting(inflight, copied.err()))
    }
}

/// A copy's future waiting for the GPU, or (`Err`) its output, known without any GPU
/// work to wait for (an error before anything was enqueued, or an empty copy).
type Started<D, H> = std::result::Result<CopyOwned<D, H>, Result<(D, H)>>;

/// What a copy's future owns while the GPU may use it.
struct Payload<D, H> {
    device: D,
    host: H,
    /// The pinned block a pageable `host` goes through.
    staging: Option<StagingBlock>,
    /// A download through `staging`: copy the block into `host` on completion.
    fill_host: bool,
}

impl<D, H: OwnedHostBuffer> Payload<D, H> {
    /// The copy has completed: fill a pageable download's buffer from its block, and
    /// hand the block back to the pool.
    fn finish(mut self) -> (D, H) {
        if let (true, Some(block)) = (self.fill_host, self.staging.as_mut()) {
            let dst = as_bytes_mut(self.host.elements_mut(TOKEN));
            let len = dst.len();
            if let Some(bytes) = block.bytes_mut() {
                dst.copy_from_slice(&bytes[..len]);
            }
        }
        (self.device, self.host)
    }
}

/// A block of the device's pinned pool that a pageable buffer's bytes pass through,
/// owned by a payload and given back to the pool when dropped, which is only once the
/// GPU is done with it.
struct StagingBlock {
    /// `None` only inside `drop`.
    block: Option<Block>,
    pool: Arc<PinnedPool>,
    /// Bytes of the copy (the block may be larger).
    bytes: usize,
}

impl StagingBlock {
    /// An idle block of at least `bytes`.
    fn take(device: &Device, bytes: usize) -> Result<Self> {
        let pool = PinnedPool::of(&device.inner);
        let block = pool.take(bytes, HostKind::Normal)?;
        if block.size() < bytes {
            pool.give_back(block);
            return Err(Error::HostOutOfMemory { requested: bytes });
        }
        Ok(StagingBlock {
            block: Some(block),
            pool,
            bytes,
        })
    }

    /// A block holding a copy of `source`.
    fn filled(device: &Device, source: &[u8]) -> Result<Self> {
        let mut staging = Self::take(device, source.len())?;
        if let Some(bytes) = staging.bytes_mut() {
            bytes.copy_from_slice(source);
        }
        Ok(staging)
    }

    /// The copy's bytes of the block (the pool hands out idle blocks, and these are
    /// never armed: their DMAs are covered by the payload's completion event instead).
    fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        let bytes = self.bytes;
        self.block.as_mut()?.bytes_mut().map(|b| &mut b[..bytes])
    }

    /// The first byte (null only inside `drop`, where it is not asked for).
    fn ptr_mut(&mut self) -> *mut u8 {
        self.block
            .as_ref()
            .map_or(std::ptr::null_mut(), |b| b.ptr().as_ptr())
    }
}

impl Drop for StagingBlock {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            self.pool.give_back(block);
        }
    }
}

/// The future of [`Stream::upload_owned`] and [`Stream::download_owned`]: resolves to
/// the device memory and the host buffer once the copy has completed on the GPU.
/// Dropping it does not cancel the copy (see [`crate::future`]).
#[must_use = "the copy runs anyway; await the future to get the buffers back"]
pub struct CopyOwned<D: Send + 'static, H: Send + 'static> {
    state: CopyState<D, H>,
}

enum CopyState<D: Send + 'static, H: Send + 'static> {
    Waiting {
        inflight: Inflight<Payload<D, H>>,
        /// A failed enqueue of the copy itself: reported once the work before it is done.
        enqueue_error: Option<Error>,
    },
    /// Resolved without GPU work to wait for; `None` once taken.
    Ready(Option<Result<(D, H)>>),
}

impl<D: Send + 'static, H: OwnedHostBuffer> CopyOwned<D, H> {
    fn ready(output: Result<(D, H)>) -> Self {
        CopyOwned {
            state: CopyState::Ready(Some(output)),
        }
    }

    fn waiting(inflight: Inflight<Payload<D, H>>, enqueue_error: Option<Error>) -> Self {
        CopyOwned {
            state: CopyState::Waiting {
                inflight,
                enqueue_error,
            },
        }
    }
}

// Nothing of the state is pinned: the buffers are moved out by value when the copy has
// completed, and no `Pin<&mut _>` to a field is ever made.
impl<D: Send + 'static, H: OwnedHostBuffer> Unpin for CopyOwned<D, H> {}

impl<D: Send + 'static, H: OwnedHostBuffer> Future for CopyOwned<D, H> {
    type Output = Result<(D, H)>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.state {
            CopyState::Ready(output) => match output.take() {
                Some(output) => Poll::Ready(output),
                None => panic!("a stream_core future was polled after it completed"),
            },
            CopyState::Waiting {
                inflight,
                enqueue_error,
            } => {
                let payload = match inflight.poll_complete(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(done) => done,
                };
                Poll::Ready(match (enqueue_error.take(), payload) {
                    (Some(e), _) | (None, Err(e)) => Err(e),
                    (None, Ok(payload)) => Ok(payload.finish()),
                })
            }
        }
    }
}

impl<D: Send + 'static, H: OwnedHostBuffer> std::fmt::Debug for CopyOwned<D, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waiting = matches!(self.state, CopyState::Waiting { .. });
        f.debug_struct("CopyOwned")
            .field("waiting_for_gpu", &waiting)
            .finish()
    }
}
