//! cudarc's context and streams as a [`Device`] and [`Stream`]: [`Device::from_cudarc`],
//! [`Device::cudarc_context`] and [`Stream::from_cudarc`], at the cost of a few handle
//! comparisons (the device itself is made once per cudarc context and then found again).

use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use cudarc::driver::{CudaContext, CudaStream};

use crate::device::{Device, DeviceInner, Stream};
use crate::driver::context::PrimaryContext;
use crate::driver::cudarc_bridge::{bind_if_same, handle_kind, StreamHandle};
use crate::driver::device::DeviceId;
use crate::driver::stream::RawStream;
use crate::error::{DriverResultExt, Error, Result};

/// The cudarc context a [`Device`] was made from or handed out, kept (as a per-device
/// extension) for as long as the device: dropped with the device's context bound, so
/// cudarc's drop finds its context current and displaces nothing.
#[derive(Default)]
struct HeldCudarcContext(OnceLock<Arc<CudaContext>>);

/// The devices made from, or handing out, each cudarc context, so that converting
/// cudarc values of one context gives handles of one [`Device`] (one housekeeping stream,
/// one kernel cache). An entry whose device is gone is dropped at the next lookup; while
/// the device lives it holds the context (its [`HeldCudarcContext`]), so the context's
/// address cannot be reused by another one.
static CUDARC_DEVICES: Mutex<Vec<(Weak<CudaContext>, Weak<DeviceInner>)>> = Mutex::new(Vec::new());

/// Why a cudarc context is refused.
const NOT_PRIMARY: &str = "it is not the device's primary context (it was made by \
    CudaContext::new_non_primary, new_cig or from_raw_context); this crate works in primary \
    contexts only: make the cudarc context with CudaContext::new(ordinal), or take it from \
    Device::cudarc_context";

/// Why a cudarc context whose device handle does not match its ordinal is refused.
const WRONG_DEVICE: &str = "its device handle is not the device of its ordinal; make the \
    cudarc context with CudaContext::new(ordinal)";

/// Why cudarc's default stream is refused as a [`Stream`].
const LEGACY_STREAM: &str = "it is the default stream (CudaContext::default_stream), \
    whose handle names the legacy stream of whichever context is current rather than one \
    stream; make the stream with CudaContext::new_stream (or CudaStream::fork) instead. \
    (Slices on the default stream convert with DeviceVec::from_cudarc.)";

/// Why cudarc's per-thread stream is refused.
pub(super) const PER_THREAD_STREAM: &str = "it is the per-thread default stream \
    (CudaContext::per_thread_stream), which is a different stream on every host thread; use a \
    stream made with CudaContext::new_stream";

/// The device registered for `context`, if it is still alive.
fn registered(
    devices: &mut Vec<(Weak<CudaContext>, Weak<DeviceInner>)>,
    context: &Arc<CudaContext>,
) -> Option<Device> {
    devices.retain(|(_, device)| device.strong_count() > 0);
    devices
        .iter()
        .find(|(held, _)| std::ptr::eq(held.as_ptr(), Arc::as_ptr(context)))
        .and_then(|(_, device)| device.upgrade())
        .map(|inner| Device { inner })
}

/// `context`'s device's primary context (retained) when `context` is that context
/// (checked by handle), else the [`Error::CudarcConversion`] that says why not.
fn check_primary(context: &CudaContext) -> Result<Arc<PrimaryContext>> {
    let refuse = |reason| {
        Error::from(crate::error::CudarcConversion {
            what: "CudaContext",
            reason,
        })
    };
    let device = DeviceId::get(context.ordinal())?;
    if device.raw() != context.cu_device() {
        return Err(refuse(WRONG_DEVICE));
    }
    let primary = PrimaryContext::of(device)?;
    let (bound, same) = bind_if_same(&primary, context.cu_ctx())?;
    drop(bound);
    if same {
        Ok(primary)
    } else {
        Err(refuse(NOT_PRIMARY))
    }
}

impl Device {
    /// The device of a cudarc context, sharing it: the same primary context, so cudarc's
    /// work and this crate's run side by side on the same GPU memory and streams.
    ///
    /// The context is kept alive as long as the device (any of its handles). Converting
    /// the same context again (or a stream or slice of it) returns a handle of the same
    /// device, for as long as one is alive; it is made, like [`Device::new`], on the
    /// first conversion (which sets the pool's release threshold, see
    /// [`Device::new`]).
    ///
    /// Returns [`Error::CudarcConversion`] for a context that is not its device's
    /// primary context (`CudaContext::new_non_primary`, `new_cig`, `from_raw_context`):
    /// this crate's events, pools and modules are per primary context. Nothing is copied.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use cudarc::driver::CudaContext;
    /// use stream_core::Device;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ctx: Arc<CudaContext> = CudaContext::new(0)?; // the cudarc program's context
    /// let dev = Device::from_cudarc(ctx.clone())?;
    /// let stream = dev.new_stream()?; // a stream of this crate, in cudarc's context
    /// assert!(Arc::ptr_eq(&dev.cudarc_context()?, &ctx));
    /// # Ok(()) }
    /// ```
    pub fn from_cudarc(context: Arc<CudaContext>) -> Result<Device> {
        let mut devices = CUDARC_DEVICES
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(device) = registered(&mut devices, &context) {
            return Ok(device);
        }
        // Held until the device holds it too, so that it is retained once, not twice.
        let _primary = check_primary(&context)?;
        let device = Device::new(context.ordinal())?;
        let held = device.inner.extension(HeldCudarcContext::default);
        // A new device holds no cudarc context yet: this one is kept.
        let kept = held.0.get_or_init(|| Arc::clone(&context));
        devices.push((Arc::downgrade(kept), Arc::downgrade(&device.inner)));
        Ok(device)
    }

    /// This device's context as a cudarc `CudaContext`, for cudarc code that works next
    /// to this crate: the context the device was made from ([`Device::from_cudarc`]), or
    /// else one made once, with `CudaContext::new` (which retains the same primary
    /// context), and kept as long as the device. Every call returns the same `Arc`, so
    /// cudarc's per-context state (its event tracking, its count of streams) is shared
    /// by every slice and stream made from it.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dev = stream_core::Device::new(0)?;
    /// let ctx = dev.cudarc_context()?;
    /// let cudarc_stream = ctx.new_stream()?;
    /// let ours = stream_core::Stream::from_cudarc(&cudarc_stream)?;
    /// assert_eq!(ours.device().ordinal(), dev.ordinal());
    /// # Ok(()) }
    /// ```
    pub fn cudarc_context(&self) -> Result<Arc<CudaContext>> {
        let held = self.inner.extension(HeldCudarcContext::default);
        if let Some(context) = held.0.get() {
            return Ok(Arc::clone(context));
        }
        let mut devices = CUDARC_DEVICES
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // With the context bound, cudarc's `new` (which binds its context with
        // `cuCtxSetCurrent`) finds it current and displaces nothing.
        let _bound = self.inner.bind()?;
        let made = CudaContext::new(self.ordinal()).call("CudaContext::new")?;
        let (_again, same) = bind_if_same(&self.inner.context, made.cu_ctx())?;
        if !same {
            return Err(Error::from(crate::error::CudarcConversion {
                what: "CudaContext",
                reason: NOT_PRIMARY,
            }));
        }
        // Another thread may have set one meanwhile: then `made` is dropped, bound.
        let context = Arc::clone(held.0.get_or_init(|| made));
        devices.retain(|(_, device)| device.strong_count() > 0);
        devices.push((Arc::downgrade(&context), Arc::downgrade(&self.inner)));
        Ok(context)
    }
}

impl Stream {
    /// A cudarc stream as a [`Stream`]: the same `CUstream`, not a copy, so scopes on it
    /// are ordered with the cudarc code's work on that stream (work issued before a
    /// scope runs before the scope's work, and work issued after a scope's end runs
    /// after it). The stream stays cudarc's: the `Arc` is held as long as the `Stream`,
    /// which never destroys the handle.
    ///
    /// Each scope on it synchronises it at its end (which also waits for cudarc work
    /// another thread enqueued meanwhile), and refuses to start while the stream is being
    /// captured into a graph ([`Error::StreamCapturing`]): cudarc code may start a
    /// capture on it at any time, so every scope asks the driver. A capture started by
    /// another thread while a scope runs makes that scope's final synchronisation fail,
    /// and the process aborts rather than release host memory a copy may still use.
    ///
    /// Returns [`Error::CudarcConversion`] for cudarc's default stream
    /// (`CudaContext::default_stream`, whose handle names whichever context is current)
    /// and per-thread stream (`per_thread_stream`, a different stream on every thread),
    /// and for a stream of a non-primary context (see [`Device::from_cudarc`]).
    ///
    /// ```no_run
    /// use cudarc::driver::CudaContext;
    /// use stream_core::{scope, Error, Stream};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ctx = CudaContext::new(0)?;
    /// let cudarc_stream = ctx.new_stream()?;
    /// let data = cudarc_stream.clone_htod(&[1.0f32, 2.0, 3.0])?; // cudarc work...
    /// let stream = Stream::from_cudarc(&cudarc_stream)?;
    /// let mut out = [0f32; 3];
    /// scope(&stream, |s| {
    ///     let x = s.upload(&[4.0f32, 5.0, 6.0])?; // ...then this crate's, in order
    ///     s.copy_to_host(&x, &mut out)?.wait()?;
    ///     Ok::<_, Error>(())
    /// })?;
    /// # drop(data); Ok(()) }
    /// ```
    pub fn from_cudarc(stream: &Arc<CudaStream>) -> Result<Stream> {
        let refuse = |reason| {
            Error::from(crate::error::CudarcConversion {
                what: "CudaStream",
                reason,
            })
        };
        match handle_kind(stream) {
            StreamHandle::LegacyDefault => return Err(refuse(LEGACY_STREAM)),
            StreamHandle::PerThread => return Err(refuse(PER_THREAD_STREAM)),
            StreamHandle::Object => {}
        }
        let device = Device::from_cudarc(Arc::clone(stream.context()))?;
        // `None` only for a stream of another context, which `from_cudarc` just refused.
        let raw = RawStream::from_cudarc(&device.inner.context, stream)?
            .ok_or_else(|| refuse(NOT_PRIMARY))?;
        debug_assert!(raw.is_foreign());
        Ok(Stream::foreign(device, raw))
    }
}
