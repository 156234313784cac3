//! [`Trace`]: timing events around what traced scopes enqueue, kept until written.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::device::{Device, Stream};
use crate::driver::event::RawEvent;
use crate::error::Result;

/// A recorder of the GPU timeline of chosen scopes, written as a Chrome trace (see the
/// [module docs](crate::trace)). `Send` and `Sync`: scopes on several threads, and on
/// several devices, may record into one trace.
///
/// ```no_run
/// use stream_core::{scope, trace::Trace, Device, Error};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dev = Device::new(0)?;
/// let stream = dev.new_stream()?;
/// let trace = Trace::new();
/// let data = vec![0u8; 1 << 20];
/// scope(&stream, |s| {
///     s.trace_into(&trace)?;
///     let x = s.upload(&data)?;
///     s.copy_device(&x, &mut s.alloc::<u8>(data.len())?)
/// })?;
/// assert_eq!(trace.len(), 2); // the upload and the copy
/// let json = trace.to_chrome_json()?;
/// # let _ = json; Ok(()) }
/// ```
pub struct Trace {
    /// The origin of the timeline (time 0 of the written trace).
    created: Instant,
    log: Mutex<Log>,
}

/// What a trace recorded so far.
#[derive(Default)]
pub(super) struct Log {
    /// One per device recorded on, in order of first use.
    pub(super) clocks: Vec<Clock>,
    /// One per stream recorded on, in order of first use.
    pub(super) tracks: Vec<Track>,
    pub(super) slices: Vec<Slice>,
    pub(super) flows: Vec<Flow>,
    /// Records that could not be made (an event not created or not recorded).
    pub(super) lost: u64,
}

/// Where a device's timestamps sit on the timeline: a timing event recorded on an idle
/// stream of the device (so the GPU took its timestamp as the host recorded it), and
/// the host time of that record since the trace was made. Every other event of the
/// device is placed by its GPU time since this one.
pub(super) struct Clock {
    pub(super) device: Device,
    pub(super) base: RawEvent,
    pub(super) host_offset: Duration,
}

/// A stream's track: its device (the clock's index) and its handle, which identifies
/// it while it lives.
pub(super) struct Track {
    pub(super) clock: usize,
    pub(super) stream: usize,
}

/// A point recorded on a stream: its timing event and its track.
pub(crate) struct Mark {
    pub(super) event: RawEvent,
    pub(super) track: usize,
}

/// What kind of operation a slice is (its `cat` in the trace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Category {
    Copy,
    /// One chunk's DMA of a staged copy (inside the copy's own slice).
    Staged,
    Fill,
    Kernel,
    Collective,
    /// A CUDA graph's replay, as one slice.
    Graph,
    Fork,
    Join,
}

impl Category {
    pub(super) fn name(self) -> &'static str {
        match self {
            Category::Copy => "copy",
            Category::Staged => "staged",
            Category::Fill => "fill",
            Category::Kernel => "kernel",
            Category::Collective => "collective",
            Category::Graph => "graph",
            Category::Fork => "fork",
            Category::Join => "join",
        }
    }
}

/// One recorded operation: from its start to its end on its stream (an instant, such
/// as a fork point, has no end).
pub(super) struct Slice {
    pub(super) name: &'static str,
    pub(super) category: Category,
    pub(super) start: Mark,
    pub(super) end: Option<RawEvent>,
    pub(super) bytes: Option<u64>,
}

/// An arrow from one slice to another: the order a fork or a join imposes.
pub(super) struct Flow {
    pub(super) name: &'static str,
    pub(super) from: usize,
    pub(super) to: usize,
}

impl Default for Trace {
    fn default() -> Self {
        Self::new()
    }
}

impl Trace {
    /// An empty trace; its timeline starts now (time 0 of the written trace).
    ///
    /// ```
    /// let trace = stream_core::trace::Trace::new();
    /// assert!(trace.is_empty() && trace.lost() == 0);
    /// ```
    pub fn new() -> Self {
        Trace {
            created: Instant::now(),
            log: Mutex::new(Log::default()),
        }
    }

    /// How many operations (slices, fork and join points included) it holds.
    pub fn len(&self) -> usize {
        self.lock().slices.len()
    }

    /// Whether it holds no operation.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many records could not be made (an event not created or not recorded, say
    /// out of memory): those operations ran, but are missing from the trace.
    pub fn lost(&self) -> u64 {
        self.lock().lost
    }

    /// The trace as Chrome's trace event format (JSON), for Perfetto or
    /// `chrome://tracing`. Never blocks: an [`Error::Trace`](crate::Error::Trace) while
    /// an operation it recorded has not completed on the GPU (write it after the scopes
    /// it records have ended).
    ///
    /// ```no_run
    /// use stream_core::{scope, trace::Trace, Device, Error};
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = Device::new(0)?;
    /// let stream = dev.new_stream()?;
    /// let trace = Trace::new();
    /// let data = vec![1.0f32; 1 << 20];
    /// scope(&stream, |s| {
    ///     s.trace_into(&trace)?;
    ///     let _x = s.upload(&data)?;
    ///     // The upload may still run here: writing now could be an `Error::Trace`.
    ///     Ok::<_, Error>(())
    /// })?;
    /// let json = trace.to_chrome_json()?; // the scope has ended: every time is known
    /// assert!(json.contains("\"copy_to_device\""));
    /// # Ok(()) }
    /// ```
    pub fn to_chrome_json(&self) -> Result<String> {
        super::chrome::write(&self.lock())
    }

    /// Writes [`to_chrome_json`](Self::to_chrome_json) to `path`; its error, or the
    /// file's, as an I/O error.
    pub fn write_chrome_json(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        let json = self.to_chrome_json().map_err(std::io::Error::other)?;
        std::fs::write(path, json)
    }

    fn lock(&self) -> MutexGuard<'_, Log> {
        // A panic while recording leaves at worst a record short: the log stays usable.
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a point on `stream` now (after the work enqueued on it so far), to start
    /// an operation; `None`, counted as lost, if it cannot be recorded.
    pub(crate) fn begin(&self, stream: &Stream) -> Option<Mark> {
        self.lock().mark_or_lose(stream, self.created)
    }

    /// Ends the operation `start` began on `stream`: records its end and keeps the slice.
    /// Returns the slice's index, for [`flow`](Self::flow).
    pub(crate) fn end(
        &self,
        start: Option<Mark>,
        stream: &Stream,
        name: &'static str,
        category: Category,
        bytes: Option<u64>,
    ) -> Option<usize> {
        let start = start?;
        let mut log = self.lock();
        let end = log.mark_or_lose(stream, self.created)?;
        Some(log.keep(Slice {
            name,
            category,
            start,
            end: Some(end.event),
            bytes,
        }))
    }

    /// Records a point of `stream` (a fork or a join) as a slice without duration.
    pub(crate) fn instant(
        &self,
        stream: &Stream,
        name: &'static str,
        category: Category,
    ) -> Option<usize> {
        let mut log = self.lock();
        let start = log.mark_or_lose(stream, self.created)?;
        Some(log.keep(Slice {
            name,
            category,
            start,
            end: None,
            bytes: None,
        }))
    }

    /// An arrow from slice `from` to slice `to` (both kept, or nothing).
    pub(crate) fn flow(&self, name: &'static str, from: Option<usize>, to: Option<usize>) {
        if let (Some(from), Some(to)) = (from, to) {
            self.lock().flows.push(Flow { name, from, to });
        }
    }
}

/// Where the DMAs of a staged copy record their chunks: the trace of the scope that
/// issued the copy, and its stream (the one the DMAs run on).
#[derive(Clone, Copy)]
pub(crate) struct ChunkTrace<'a> {
    pub(crate) trace: &'a Trace,
    pub(crate) stream: &'a Stream,
}

impl ChunkTrace<'_> {
    /// Runs `dma`, which enqueues one chunk's DMA of `bytes` on the stream, as a slice
    /// `name` of [`Category::Staged`].
    pub(crate) fn record<R>(
        &self,
        name: &'static str,
        bytes: usize,
        dma: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let start = self.trace.begin(self.stream);
        let out = dma();
        if out.is_ok() {
            let bytes = Some(bytes as u64);
            self.trace
                .end(start, self.stream, name, Category::Staged, bytes);
        }
        out
    }
}

impl Log {
    /// [`mark`](Self::mark), counting a record that could not be made as lost.
    fn mark_or_lose(&mut self, stream: &Stream, created: Instant) -> Option<Mark> {
        let mark = self.mark(stream, created);
        if mark.is_none() {
            self.lost += 1;
        }
        mark
    }

    /// Keeps `slice`; its index.
    fn keep(&mut self, slice: Slice) -> usize {
        self.slices.push(slice);
        self.slices.len() - 1
    }

    /// A timing event recorded on `stream` now, on its track.
    fn mark(&mut self, stream: &Stream, created: Instant) -> Option<Mark> {
        let track = self.track_of(stream, created)?;
        let event = RawEvent::new_timing(&stream.device.inner.context).ok()?;
        event.record(&stream.raw).ok()?;
        Some(Mark { event, track })
    }

    /// The track of `stream`, made (with its device's clock) at its first record.
    fn track_of(&mut self, stream: &Stream, created: Instant) -> Option<usize> {
        let handle = stream.raw.raw() as usize;
        let ordinal = stream.device.ordinal();
        let clock = match self
            .clocks
            .iter()
            .position(|c| c.device.ordinal() == ordinal)
        {
            Some(clock) => clock,
            None => {
                self.clocks
                    .push(Clock::start(&stream.device, created).ok()?);
                self.clocks.len() - 1
            }
        };
        let known = self
            .tracks
            .iter()
            .position(|t| t.clock == clock && t.stream == handle);
        Some(known.unwrap_or_else(|| {
            self.tracks.push(Track {
                clock,
                stream: handle,
            });
            self.tracks.len() - 1
        }))
    }
}

impl Clock {
    /// Records `device`'s base event on a new, idle stream, and notes when.
    fn start(device: &Device, created: Instant) -> Result<Self> {
        let idle = device.new_stream()?;
        let context = &device.inner.context;
        let base = RawEvent::new_timing(context)?;
        let at = Instant::now();
        base.record(&idle.raw)?;
        base.synchronize(context)?;
        Ok(Clock {
            device: device.clone(),
            base,
            host_offset: at.saturating_duration_since(created),
        })
    }
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let log = self.lock();
        f.debug_struct("Trace")
            .field("operations", &log.slices.len())
            .field("streams", &log.tracks.len())
            .field("lost", &log.lost)
            .finish()
    }
}
