//! Staged downloads that return at once: the copy-out into pageable memory runs on a
//! coordinator thread as each chunk's DMA lands, and the caller waits for it only when
//! it asks (`Pending::wait`) or when its scope ends.
//!
//! # How
//!
//! On the caller's thread, [`start_staged_download`] takes a *snapshot* of the source: a
//! stream-ordered device allocation of the copy's size on the scope's stream, filled by
//! a device-to-device copy (about 2 TB/s: a millisecond for a gigabyte), followed by an
//! event. From then on the scope's stream may go on with anything, writing the source
//! included: the DMAs read the snapshot. A [`DownloadJob`] goes to a coordinator thread,
//! which makes one of the device's internal staging streams wait for that event, runs
//! the ring pipeline from the snapshot into the destination (DMA of a chunk into a pinned
//! block, then the host copy of the block into the destination, on the memcpy workers,
//! as soon as that DMA landed), frees the snapshot stream-ordered after the last DMA, and
//! marks the job done.
//!
//! # Why this is sound
//!
//! Only the coordinator writes the destination, and only until it marks the job done:
//! the DMAs go into the pool's pinned blocks, never into the destination. The
//! destination stays borrowed (`&'env mut`) until the job is known done: `Pending::wait`
//! waits for it, and the scope that owns `'env` waits for every job started in it (and
//! in its forks) at its end, on return and on unwind, in its own frame
//! (`scope::Outstanding`). So forgetting the `Pending` leaks nothing and frees nothing early.
//! A job that fails (a fault, an error of a driver call) stops writing, reports the error
//! to both, and abandons the blocks whose DMA state is unknown.
//!
//! The snapshot needs device memory of the copy's size while the copy-out runs; when
//! that allocation fails, the download takes the synchronous staged path instead.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use super::config::{for_pageable_copy, StagingConfig, STAGED};
use super::pipeline::download_pipeline;
use super::ring::CudaRing;
use crate::device::DeviceInner;
use crate::driver::event::RawEvent;
use crate::driver::memory::copy_device_to_device;
use crate::driver::pool::StreamOrdered;
use crate::driver::stream::RawStream;
use crate::error::{Error, Result};
use crate::memory::StreamRange;

/// A staged download in flight: wait for it, or ask whether it is done. Cloned into the
/// `Pending` and into the scope's [`Outstanding`](crate::scope::Outstanding) list.
#[derive(Clone)]
pub(crate) struct DownloadJob {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<Option<Result<()>>>,
    done: Condvar,
}

impl DownloadJob {
    fn new() -> Self {
        DownloadJob {
            shared: Arc::new(Shared {
                state: Mutex::new(None),
                done: Condvar::new(),
            }),
        }
    }

    /// Blocks until the copy-out has finished (every byte of the destination written,
    /// or the job stopped on an error, which this returns).
    pub(crate) fn wait(&self) -> Result<()> {
        let mut state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(outcome) = state.as_ref() {
                return outcome.clone();
            }
            state = self
                .shared
                .done
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// `true` once the copy-out has finished, without blocking.
    pub(crate) fn is_done(&self) -> bool {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    fn finish(&self, outcome: Result<()>) {
        let mut state = self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        state.get_or_insert(outcome);
        self.shared.done.notify_all();
    }
}

/// What the coordinator needs for one download.
struct Job {
    handle: DownloadJob,
    device: Arc<DeviceInner>,
    /// The snapshot: `len` bytes of stream-ordered device memory, complete once `ready`.
    snapshot: StreamOrdered,
    ready: RawEvent,
    dst: *mut u8,
    len: usize,
    config: StagingConfig,
}

// SAFETY: a `Job` is the exclusive right to write `dst` for `len` bytes until its handle
// is marked done (the contract of `start_staged_download`), and to use and free the snapshot;
// the device handle and the event are `Send`. Nothing else touches them meanwhile.
unsafe impl Send for Job {}

/// How [`start_staged_download`] went.
pub(crate) enum StagedDownload {
    /// The copy-out runs; the job says when it is done.
    Started(DownloadJob),
    /// The copy is below the threshold, or the destination is pinned: copy directly.
    NotStaged,
    /// Staged, but the snapshot did not fit in device memory: use
    /// [`try_download`](super::try_download).
    NoSnapshot,
}

/// Starts a staged download of `src` into `dst` (as many bytes) that returns at once,
/// when the configuration and the memory call for staging: the snapshot copy is
/// enqueued on `src`'s stream now (later work may do anything with `src`), and the
/// copy-out runs on a coordinator thread, whose job is returned.
///
/// # Safety
///
/// `dst` is host memory in which any bytes are valid values, that nothing reads, writes,
/// moves or frees until a returned job is done (its `wait` returned): the caller keeps it
/// borrowed and registers the job with the scope that owns the borrow.
pub(crate) unsafe fn start_staged_download(
    src: StreamRange<'_>,
    dst: &mut [u8],
) -> Result<StagedDownload> {
    Error::check_lengths("a staged download", dst.len(), src.len())?;
    let (stream, device) = (src.stream(), src.device());
    let Some((config, _bound)) = for_pageable_copy(dst, |c| c.download_threshold, device)? else {
        return Ok(StagedDownload::NotStaged);
    };
    let (dst, len) = (dst.as_mut_ptr(), dst.len());
    let Ok(snapshot) = device.alloc_async(stream, len) else {
        return Ok(StagedDownload::NoSnapshot);
    };
    // SAFETY: `src` is `len` bytes (checked) lent to `stream`'s work, which this copy
    // is; `snapshot` is `len` bytes just allocated on `stream`, used by nothing else;
    // they are distinct allocations.
    let copied = unsafe { copy_device_to_device(snapshot.ptr(), src.ptr(), len, stream) };
    let ready = copied.and_then(|()| {
        let ready = RawEvent::new(&device.context)?;
        ready.record(stream)?;
        Ok(ready)
    });
    let ready = match ready {
        Ok(ready) => ready,
        Err(e) => {
            // Its only use (the copy into it, if enqueued) is on `stream` too.
            let _ = snapshot.free_on(stream);
            return Err(e);
        }
    };
    let handle = DownloadJob::new();
    let job = Job {
        handle: handle.clone(),
        device: Arc::clone(device),
        snapshot,
        ready,
        dst,
        len,
        config,
    };
    coordinators().run(job);
    STAGED.with(|c| c.set((c.get().0, c.get().1 + 1)));
    Ok(StagedDownload::Started(handle))
}

/// Runs `job` on the calling (coordinator) thread and marks it done, also if it panics.
fn run(job: Job) {
    struct MarkDone(DownloadJob);
    impl Drop for MarkDone {
        /// Only while unwinding (a bug): the job stopped, so it no longer writes.
        fn drop(&mut self) {
            self.0.finish(Err(Error::from(crate::error::Library {
                call: "staged download",
                message: "the copy-out stopped on an internal panic".to_owned(),
            })));
        }
    }
    let guard = MarkDone(job.handle.clone());
    let handle = job.handle.clone();
    let outcome = copy_out(job);
    std::mem::forget(guard);
    handle.finish(outcome);
}

/// The coordinator's work for one job (see the module docs).
fn copy_out(job: Job) -> Result<()> {
    let Job {
        device,
        snapshot,
        ready,
        dst,
        len,
        config,
        ..
    } = job;
    let streams = StagingStreams::of(&device);
    let stream = streams.take(&device)?;
    let outcome = (|| {
        stream.wait(&ready)?;
        // SAFETY: the snapshot is `len` bytes allocated stream-ordered on the scope's
        // stream and filled before `ready`, which `stream`, an internal stream of the
        // same device, now waits for; nothing but this job uses it until the free below,
        // enqueued on `stream` after every DMA of it.
        let snapshot_range = unsafe { StreamRange::new(snapshot.ptr(), len, &stream, &device) };
        let ring = CudaRing::new(snapshot_range, config)?;
        let Some((mut ring, config)) = ring else {
            return Err(Error::HostOutOfMemory {
                requested: config.chunk_bytes,
            });
        };
        // SAFETY: `start_staged_download`'s contract lends `dst..dst + len` to this job, for
        // writes only by it, until it is marked done (after this function returns).
        let dst = unsafe { std::slice::from_raw_parts_mut(dst, len) };
        download_pipeline(&mut ring, dst, config, super::stripe::streaming_downloads())
    })();
    // Every use of the snapshot (the copy into it on the scope's stream, which `stream`
    // waits for, and the DMAs out of it on `stream`) is ordered before this point.
    let _ = snapshot.free_on(&stream);
    streams.give_back(stream);
    outcome
}

/// The internal streams of a device's staged downloads, reused between jobs (an
/// extension of the device).
#[derive(Default)]
pub(super) struct StagingStreams(Mutex<Vec<RawStream>>);

impl StagingStreams {
    pub(super) fn of(device: &DeviceInner) -> Arc<Self> {
        device.extension(StagingStreams::default)
    }

    pub(super) fn take(&self, device: &DeviceInner) -> Result<RawStream> {
        let reused = self.0.lock().unwrap_or_else(PoisonError::into_inner).pop();
        match reused {
            Some(stream) => Ok(stream),
            None => RawStream::new(&device.context),
        }
    }

    pub(super) fn give_back(&self, stream: RawStream) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(stream);
    }
}

/// The coordinator threads: a job goes to an idle one, or to a new one (threads stay
/// for the process, parked on their channel).
struct Coordinators {
    idle: Mutex<Vec<Sender<Job>>>,
}

fn coordinators() -> &'static Coordinators {
    static COORDINATORS: std::sync::OnceLock<Coordinators> = std::sync::OnceLock::new();
    COORDINATORS.get_or_init(|| Coordinators {
        idle: Mutex::new(Vec::new()),
    })
}

impl Coordinators {
    fn run(&'static self, job: Job) {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let job = match idle {
            Some(sender) => match sender.send(job) {
                Ok(()) => return,
                Err(returned) => returned.0,
            },
            None => job,
        };
        let (sender, receiver) = channel::<Job>();
        let own = sender.clone();
        let spawned = std::thread::Builder::new()
            .name("stream-core-download".to_owned())
            .spawn(move || self.serve(own, receiver));
        let job = match spawned {
            Ok(_) => match sender.send(job) {
                Ok(()) => return,
                Err(returned) => returned.0,
            },
            Err(_) => job,
        };
        // No thread: copy out on the caller's thread (the download then returns only
        // once complete, as the synchronous path does).
        run(job);
    }

    /// A coordinator's loop: run each job, then offer itself as idle again.
    fn serve(&'static self, sender: Sender<Job>, receiver: Receiver<Job>) {
        for job in receiver.iter() {
            run(job);
            self.idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(sender.clone());
        }
    }
}
