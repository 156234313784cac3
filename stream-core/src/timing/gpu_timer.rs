//! [`GpuTimer`]: the GPU time between a start and a stop recorded in scopes.

use std::cell::Cell;
use std::time::Duration;

use crate::device::Device;
use crate::driver::event::RawEvent;
use crate::error::{Error, Result};
use crate::scope::Scope;

/// Measures GPU time: [`start`](Self::start) and [`stop`](Self::stop) record a timing
/// event each on a scope's stream, and [`elapsed`](Self::elapsed) reads the time between
/// them once the stop has completed (`cuEventRecord`, `cuEventElapsedTime`; resolution
/// about half a microsecond). Recording costs what a raw `cuEventRecord` costs, and
/// timing through this type keeps the stream's handle inside the crate, unlike raw
/// events on [`interop::raw_stream`](crate::interop::raw_stream).
///
/// The time is the GPU's clock between the two records: it includes any time the GPU
/// spent waiting for the host to enqueue the work between them (a kernel's first launch,
/// which compiles it, or a host that enqueues slower than the GPU runs). To time the
/// GPU's work alone, launch each kernel once before the measurement.
///
/// The start and the stop may be recorded in different scopes, on different streams of
/// the timer's device (a fork's child, say), as long as the stop is ordered after the
/// start on the GPU. Each [`start`](Self::start) begins a new measurement. Reading the
/// time is never unsafe: before it exists it is an [`Error::Timer`] that says why.
///
/// `Send`, not `Sync`: one thread at a time records with it. Sharing one between threads
/// does not compile (see `ui-tests/tests/ui/thread/timer-shared-between-threads.rs`):
///
/// ```compile_fail,E0277
/// # use stream_core::{scope, GpuTimer, Stream};
/// # fn f(timer: &GpuTimer, a: &Stream, b: &Stream) {
/// std::thread::scope(|threads| {
///     threads.spawn(|| scope(a, |s| timer.start(s)));
///     threads.spawn(|| scope(b, |s| timer.start(s))); // error: `GpuTimer` is not `Sync`
/// });
/// # }
/// ```
///
/// ```no_run
/// use stream_core::{scope, Device, Error, GpuTimer};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let stream = dev.new_stream()?;
/// let timer = GpuTimer::new(&dev)?;
/// let input = vec![1.0f32; 1 << 24];
/// scope(&stream, |s| {
///     timer.start(s)?;
///     let _x = s.upload(&input)?;
///     timer.stop(s)?;
///     Ok::<_, Error>(())
/// })?;                                   // the stop has completed here
/// let t = timer.elapsed()?;
/// println!("64 MiB uploaded in {t:?}: {:.1} GB/s", 64.0 * 1.048576e-3 / t.as_secs_f64());
/// # Ok(()) }
/// ```
pub struct GpuTimer {
    start: RawEvent,
    stop: RawEvent,
    /// Keeps the events' context alive.
    device: Device,
    /// Which ends of the current measurement have been recorded.
    recorded: Cell<Recorded>,
}

/// The ends of a measurement recorded so far.
#[derive(Clone, Copy, Default)]
struct Recorded {
    start: bool,
    stop: bool,
}

impl GpuTimer {
    /// A timer of `device` (two timing events), to record in scopes on its streams.
    pub fn new(device: &Device) -> Result<Self> {
        let context = &device.inner.context;
        Ok(GpuTimer {
            start: RawEvent::new_timing(context)?,
            stop: RawEvent::new_timing(context)?,
            device: device.clone(),
            recorded: Cell::new(Recorded::default()),
        })
    }

    /// Records the start on the scope's stream, after the work enqueued on it so far: a
    /// new measurement begins (a stop recorded before it no longer counts). Returns
    /// [`Error::DeviceMismatch`] for a scope on another device.
    pub fn start(&self, s: &Scope<'_, '_>) -> Result<()> {
        s.device().ensure_same_device(&self.device)?;
        self.start.record(&s.stream.raw)?;
        self.recorded.set(Recorded {
            start: true,
            stop: false,
        });
        Ok(())
    }

    /// Records the stop on the scope's stream, after the work enqueued on it so far.
    /// Returns [`Error::DeviceMismatch`] for a scope on another device.
    pub fn stop(&self, s: &Scope<'_, '_>) -> Result<()> {
        s.device().ensure_same_device(&self.device)?;
        self.stop.record(&s.stream.raw)?;
        let recorded = self.recorded.get();
        self.recorded.set(Recorded {
            stop: true,
            ..recorded
        });
        Ok(())
    }

    /// The GPU time from the start to the stop. Never blocks: it is an
    /// [`Error::Timer`] while the stop has not completed (read it after the scope that
    /// recorded the stop has ended, or after a [`Pending::wait`](crate::Pending::wait)
    /// that covers it), when the start or the stop was not recorded, or when the stop
    /// ran before the start on the GPU.
    pub fn elapsed(&self) -> Result<Duration> {
        let recorded = self.recorded.get();
        if !recorded.start {
            return Err(timer_error(
                "its start was never recorded; call start, then stop, in a scope",
            ));
        }
        if !recorded.stop {
            return Err(timer_error(
                "its stop was not recorded after its start; call stop in a scope",
            ));
        }
        let context = &self.device.inner.context;
        match self.stop.elapsed_ms_since(&self.start, context)? {
            None => Err(timer_error(
                "its stop has not completed on the GPU yet; read it after the scope that \
                 recorded the stop has ended, or after a wait that covers it",
            )),
            Some(ms) if ms < 0.0 => Err(timer_error(
                "its stop ran before its start on the GPU; record the stop on the start's \
                 stream, or on a stream ordered after it",
            )),
            Some(ms) => Ok(Duration::from_secs_f64(f64::from(ms) / 1e3)),
        }
    }

    /// The device whose streams the timer records on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

impl std::fmt::Debug for GpuTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let recorded = self.recorded.get();
        f.debug_struct("GpuTimer")
            .field("device", &self.device.ordinal())
            .field("start_recorded", &recorded.start)
            .field("stop_recorded", &recorded.stop)
            .finish()
    }
}

fn timer_error(reason: &'static str) -> Error {
    Error::Timer { reason }
}
