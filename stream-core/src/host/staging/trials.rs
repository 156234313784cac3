//! What one calibration trial runs: a staged upload and a staged download of the same
//! bytes with one setting, timed. Two kinds: [`ComposedTrials`] run the real staged
//! copies through the pinned pool to device memory on one of the device's internal
//! streams (what a user's copy does, DMA included); [`HostTrials`] run only the host
//! half, against a DMA engine that moves nothing (no device needed, so the unit tests
//! and [`calibrate_staging`](super::calibration::calibrate_staging) without a device use
//! them). See the [calibration](super::calibration) for why the composed ones decide.

use std::sync::Arc;
use std::time::Instant;

use super::config::StagingConfig;
use super::download::StagingStreams;
use super::pipeline::{download_pipeline, upload_pipeline, Dma};
use super::ring::CudaRing;
use crate::device::DeviceInner;
use crate::driver::pool::StreamOrdered;
use crate::driver::stream::RawStream;
use crate::error::{Error, Result};
use crate::memory::StreamRange;

/// Runs one candidate setting's trial.
pub(crate) trait Trials {
    /// GB/s of one upload and one download of the trial's bytes with `config` (threads
    /// and chunk size), downloads writing with streaming stores when `streaming_downloads`.
    fn run(&mut self, config: StagingConfig, streaming_downloads: bool) -> Result<(f64, f64)>;

    /// Whether these are real staged copies (memcpy and DMA), not the host half alone.
    fn composed(&self) -> bool;
}

/// `len` bytes of `byte`, or [`Error::HostOutOfMemory`]: trial memory is allocated
/// fallibly, so that a host short of memory fails the calibration (copies then use the
/// rules) instead of aborting the process in the middle of a user's first copy.
///
/// Written a page at a time with `extend_from_slice` (a memcpy each): `resize` writes
/// byte by byte in an unoptimised build, 0.3 s for the trials' 64 MiB on an H100 host,
/// which the first staged copy of a test build paid before its first trial.
pub(super) fn filled(len: usize, byte: u8) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| Error::HostOutOfMemory { requested: len })?;
    let page = [byte; 4096];
    while v.len() < len {
        let n = (len - v.len()).min(page.len());
        v.extend_from_slice(&page[..n]);
    }
    Ok(v)
}

/// GB/s of `bytes` moved in the time since `start`.
fn gbs(bytes: usize, start: Instant) -> f64 {
    bytes as f64 / start.elapsed().as_nanos().max(1) as f64
}

/// The host half alone: the pipelines against [`HostOnly`], whose ring blocks are plain
/// pre-touched memory (as fast to write as pinned blocks: page-locking changes who may
/// DMA, not the memory's speed).
pub(crate) struct HostTrials {
    /// The pageable side, pre-touched (the user's memory in a real copy usually is).
    user: Vec<u8>,
    engine: HostOnly,
}

impl HostTrials {
    /// Trials of `bytes` with rings of `ring_blocks` blocks of up to `largest_chunk`.
    pub(crate) fn new(bytes: usize, largest_chunk: usize, ring_blocks: usize) -> Result<Self> {
        Ok(HostTrials {
            user: filled(bytes, 0x5A)?,
            engine: HostOnly {
                blocks: (0..ring_blocks.max(1))
                    .map(|_| filled(largest_chunk, 0xA5))
                    .collect::<Result<_>>()?,
            },
        })
    }
}

impl Trials for HostTrials {
    fn run(&mut self, config: StagingConfig, streaming_downloads: bool) -> Result<(f64, f64)> {
        let bytes = self.user.len();
        let t = Instant::now();
        upload_pipeline(&mut self.engine, &self.user, config, 0)?;
        let up = gbs(bytes, t);
        let t = Instant::now();
        download_pipeline(
            &mut self.engine,
            &mut self.user,
            config,
            streaming_downloads,
        )?;
        Ok((up, gbs(bytes, t)))
    }

    fn composed(&self) -> bool {
        false
    }
}

/// A DMA engine that moves nothing.
struct HostOnly {
    blocks: Vec<Vec<u8>>,
}

impl Dma for HostOnly {
    fn idle_block(&mut self, slot: usize) -> Result<&mut [u8]> {
        let count = self.blocks.len();
        Ok(&mut self.blocks[slot % count])
    }

    fn to_device(&mut self, _slot: usize, _offset: usize, _len: usize) -> Result<()> {
        Ok(())
    }

    fn to_host(&mut self, _slot: usize, _offset: usize, _len: usize) -> Result<()> {
        Ok(())
    }
}

/// The real staged copies: pageable memory of the trial's own to device memory of its
/// own (`scratch`) and back, through the device's pinned pool, on an internal stream of
/// the device, so that no user stream waits for them and they wait for no user work.
/// Each upload is timed to its stream's synchronisation (to the data's arrival, as the
/// benchmark times a user's copy); each download to the return of its pipeline, which
/// returns once every byte is in the pageable memory.
pub(crate) struct ComposedTrials<'d> {
    device: &'d Arc<DeviceInner>,
    streams: Arc<StagingStreams>,
    /// An internal stream of `device` and `user.len()` bytes of device memory allocated
    /// on it, used only by the trials' DMAs on that stream; `Some` until the drop frees
    /// the memory on the stream and gives the stream back.
    lease: Option<(RawStream, StreamOrdered)>,
    user: Vec<u8>,
    /// How many of an upload's last chunks are written with streaming stores (the
    /// process's setting: the calibration does not choose it).
    upload_tail: usize,
}

impl<'d> ComposedTrials<'d> {
    /// Trials of `bytes` on `device`: an internal stream, `bytes` of device memory and of
    /// pageable memory. The device's context is bound while this runs.
    pub(crate) fn new(
        device: &'d Arc<DeviceInner>,
        bytes: usize,
        upload_tail: usize,
    ) -> Result<Self> {
        let _bound = device.bind()?;
        let user = filled(bytes, 0x5A)?;
        let streams = StagingStreams::of(device);
        let stream = streams.take(device)?;
        let scratch = match device.alloc_async(&stream, bytes) {
            Ok(scratch) => scratch,
            Err(e) => {
                streams.give_back(stream);
                return Err(e);
            }
        };
        Ok(ComposedTrials {
            device,
            streams,
            lease: Some((stream, scratch)),
            user,
            upload_tail,
        })
    }
}

impl Trials for ComposedTrials<'_> {
    fn run(&mut self, config: StagingConfig, streaming_downloads: bool) -> Result<(f64, f64)> {
        let ComposedTrials {
            device,
            lease,
            user,
            upload_tail,
            ..
        } = self;
        let _bound = device.bind()?;
        let bytes = user.len();
        let Some((stream, scratch)) = lease.as_ref() else {
            return Err(Error::from(crate::error::Library {
                call: "staging calibration",
                message: "the trial's stream is gone".to_owned(),
            }));
        };
        let ring = |config| {
            // SAFETY: `scratch` is `bytes` of device memory allocated on `stream`, an
            // internal stream of `device` (in `new`), used by nothing but these trials'
            // DMAs, all on `stream`, and freed on `stream` after them (`Drop`).
            let scratch = unsafe { StreamRange::new(scratch.ptr(), bytes, stream, device) };
            let ring = CudaRing::new(scratch, config)?;
            ring.ok_or(Error::HostOutOfMemory {
                requested: config.chunk_bytes,
            })
        };
        let t = Instant::now();
        {
            let (mut ring, config) = ring(config)?;
            upload_pipeline(&mut ring, user, config, *upload_tail)?;
        }
        stream.synchronize()?;
        let up = gbs(bytes, t);
        let t = Instant::now();
        {
            let (mut ring, config) = ring(config)?;
            download_pipeline(&mut ring, user, config, streaming_downloads)?;
        }
        Ok((up, gbs(bytes, t)))
    }

    fn composed(&self) -> bool {
        true
    }
}

impl Drop for ComposedTrials<'_> {
    fn drop(&mut self) {
        let Some((stream, scratch)) = self.lease.take() else {
            return;
        };
        // A context that cannot be bound any more (a failed device) keeps the scratch
        // memory until it is destroyed: a leak, never a free while DMAs may run.
        if let Ok(_bound) = self.device.bind() {
            // Every use of `scratch` (the trials' DMAs) was enqueued on `stream` before
            // this point, so the free is ordered after them.
            let _ = scratch.free_on(&stream);
        }
        self.streams.give_back(stream);
    }
}
