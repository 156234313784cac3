//! Finding the GPU once per process, and the shared [`device`] and [`stream`] helpers.

use std::panic::catch_unwind;
use std::sync::{Mutex, OnceLock, PoisonError};

use libtest_mimic::Failed;
use stream_core::{Device, Stream};

use crate::check::panic_message;

/// Environment variable that turns "no GPU" from *ignored* into a failure: set to
/// anything but empty or `0`.
pub const REQUIRE_GPU_ENV: &str = "STREAM_CORE_REQUIRE_GPU";

/// Environment variable `scripts/sanitize.sh` sets to the tool a test binary runs under
/// (`memcheck`, `racecheck`, ...): tests with heavy loads use lighter ones there (the
/// tools run kernels and copies serially, tens of times slower), still checking every
/// result.
pub const SANITIZER_ENV: &str = "STREAM_CORE_SANITIZER";

/// The compute-sanitizer tool this process runs under, as `scripts/sanitize.sh` says
/// ([`SANITIZER_ENV`]); `None` in a normal run.
pub fn sanitizer() -> Option<String> {
    std::env::var(SANITIZER_ENV).ok().filter(|t| !t.is_empty())
}

/// `normal`, or `light` under a sanitizer ([`sanitizer`]): the size of a load test.
pub fn load(normal: usize, light: usize) -> usize {
    if sanitizer().is_some() {
        light
    } else {
        normal
    }
}

/// Whether this process can use a CUDA device, as `Device::count()` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuStatus {
    /// `Device::count()` returned `Ok(n)` with `n > 0`.
    Present(usize),
    /// No usable device; the text says why (no driver, zero devices, a driver error).
    Absent(String),
}

impl GpuStatus {
    /// `true` for [`GpuStatus::Present`].
    pub fn is_present(&self) -> bool {
        matches!(self, GpuStatus::Present(_))
    }
}

/// Asks `Device::count()` once per process (a panic in the driver loader counts as
/// "no GPU", with its message as the reason).
pub fn gpu_status() -> &'static GpuStatus {
    static STATUS: OnceLock<GpuStatus> = OnceLock::new();
    STATUS.get_or_init(|| match catch_unwind(Device::count) {
        Ok(Ok(0)) => GpuStatus::Absent("the CUDA driver loaded but reports 0 devices".into()),
        Ok(Ok(n)) => GpuStatus::Present(n),
        Ok(Err(e)) => GpuStatus::Absent(e.to_string()),
        Err(payload) => GpuStatus::Absent(format!(
            "Device::count() panicked: {}",
            panic_message(payload.as_ref())
        )),
    })
}

/// `true` when `STREAM_CORE_REQUIRE_GPU` is set to anything but empty or `0`.
pub fn require_gpu() -> bool {
    std::env::var_os(REQUIRE_GPU_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The shared device of [`device`], dropped by [`release_device`].
static DEVICE: Mutex<Option<Device>> = Mutex::new(None);

/// Drops the shared device once every test has run, so that its memory pools hand
/// their cached device and pinned memory back before the process exits (which is what
/// compute-sanitizer's leak check looks at). Tests still holding a clone keep it alive.
pub fn release_device() {
    let device = DEVICE.lock().unwrap_or_else(PoisonError::into_inner).take();
    drop(device);
}

/// Device 0, opened once per process and shared by all tests (a [`Device`] is a
/// reference-counted handle, `Send + Sync`).
pub fn device() -> Result<Device, Failed> {
    let mut slot = DEVICE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(dev) = slot.as_ref() {
        return Ok(dev.clone());
    }
    let dev = Device::new(0).map_err(|e| Failed::from(format!("Device::new(0) failed: {e}")))?;
    *slot = Some(dev.clone());
    Ok(dev)
}

/// A new non-blocking stream on device 0 (`stream.device()` gives the device back).
pub fn stream() -> Result<Stream, Failed> {
    device()?
        .new_stream()
        .map_err(|e| Failed::from(format!("Device::new_stream() failed: {e}")))
}
