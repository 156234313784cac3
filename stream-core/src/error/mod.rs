//! [`Error`]: the one error type of the library, and [`Result`].

mod details;
pub(crate) mod driver_codes;

use cudarc::driver::result::DriverError;

pub use details::{
    CompletionThread, CudarcConversion, Driver, GraphArgument, GraphCaptureInvalidated,
    GraphUpdate, InvalidLaunch, KernelCompile, KernelNotFound, LaunchEnvironment, LengthMismatch,
    Library, ManagedExceedsFreeMemory, ManagedNeedsConcurrentAccess, Nccl, OutOfMemory, OutOfRange,
    RanksDisagree, Rendezvous, ShapeMismatch,
};
use driver_codes::{driver_advice, is_sticky_code};
pub(crate) use driver_codes::{is_out_of_memory, DriverResultExt};

/// What went wrong, written so that the message says what happened and what to do.
///
/// Every fallible operation returns it; bad input is an `Err`, never a panic.
///
/// ```
/// use stream_core::{error::LengthMismatch, Error};
/// let e = Error::from(LengthMismatch { what: "copy_to_host", source_len: 3, destination_len: 4 });
/// assert_eq!(
///     e.to_string(),
///     "length mismatch in copy_to_host: the source has 3 elements but the destination has 4 (3 != 4); pass slices of equal length"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CUDA driver library (`libcuda.so` / `nvcuda.dll`) could not be loaded.
    #[error(
        "no CUDA driver found: the NVIDIA driver library (libcuda) could not be loaded; \
         this program needs an NVIDIA GPU with its driver installed"
    )]
    NoDriver,

    /// The driver loaded, but there is no device with this ordinal.
    #[error(
        "no CUDA device {ordinal}: this machine has {count} CUDA device(s); \
         use an ordinal below {count}, or run on a machine with an NVIDIA GPU"
    )]
    NoDevice {
        /// The ordinal that was asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },

    /// A device allocation failed for lack of memory, even after the pool's cached memory
    /// was handed back to the driver and the allocation retried once.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`OutOfMemory`].
    #[error("{0}")]
    OutOfMemory(Box<OutOfMemory>),

    /// Page-locked host memory could not be allocated.
    #[error(
        "out of pinned host memory: could not page-lock {requested} bytes; ask for less, \
         free pinned buffers you no longer need (between scopes, Device::trim_pinned_memory \
         gives the pool's cached blocks back to the system), or raise the locked-memory \
         limit (ulimit -l)"
    )]
    HostOutOfMemory {
        /// Bytes requested.
        requested: usize,
    },

    /// Source and destination of a copy have different lengths.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`LengthMismatch`].
    #[error("{0}")]
    LengthMismatch(Box<LengthMismatch>),

    /// Device memory does not have the number of elements a shape implies.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`ShapeMismatch`].
    #[error("{0}")]
    ShapeMismatch(Box<ShapeMismatch>),

    /// A sub-range does not fit in the memory it was taken from.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`OutOfRange`].
    #[error("{0}")]
    OutOfRange(Box<OutOfRange>),

    /// `len * size_of::<T>()` does not fit in `usize`.
    #[error(
        "size overflow: {len} elements of {elem_size} bytes do not fit in the address space; \
         ask for fewer elements"
    )]
    SizeOverflow {
        /// Elements requested.
        len: usize,
        /// Bytes per element.
        elem_size: usize,
    },

    /// Memory of one device was used with a stream of another.
    #[error(
        "device mismatch: memory of CUDA device {memory} was used on a stream of device {stream}; \
         make the memory on the stream's device"
    )]
    DeviceMismatch {
        /// Ordinal of the memory's device.
        memory: usize,
        /// Ordinal of the stream's device.
        stream: usize,
    },

    /// Work on one device needed the memory of another, and the first cannot reach the
    /// second's memory: a fork onto another device's stream, or a hand-off to a scope on
    /// another device, where the pair has no peer access (`cuDeviceCanAccessPeer`).
    #[error(
        "no peer access: CUDA device {device} cannot reach the memory of device {peer} \
         (no NVLink or PCIe peer-to-peer path between them); copy through the host, or keep \
         the work on device {peer}"
    )]
    PeerAccessUnavailable {
        /// Ordinal of the device whose work needed the memory.
        device: usize,
        /// Ordinal of the device that holds the memory.
        peer: usize,
    },

    /// A stream priority outside the device's range
    /// ([`Device::stream_priorities`](crate::Device::stream_priorities)) was asked for.
    ///
    /// ```
    /// let e = stream_core::Error::InvalidStreamPriority { priority: 1, most_urgent: -5, least_urgent: 0 };
    /// assert_eq!(
    ///     e.to_string(),
    ///     "stream priority 1 is outside this device's range -5..=0 (lower numbers are more \
    ///      urgent; 0 is the default); pick one from Device::stream_priorities"
    /// );
    /// ```
    #[error(
        "stream priority {priority} is outside this device's range {most_urgent}..={least_urgent} \
         (lower numbers are more urgent; {least_urgent} is the default); pick one from \
         Device::stream_priorities"
    )]
    InvalidStreamPriority {
        /// The priority asked for.
        priority: i32,
        /// The most urgent priority the device offers (the lowest number).
        most_urgent: i32,
        /// The least urgent one (the highest number, the default).
        least_urgent: i32,
    },

    /// A scope was opened on a stream that is being captured into a CUDA graph.
    #[error(
        "the stream is being captured into a CUDA graph: a scope synchronises its stream on exit, \
         which capture forbids; end the capture first or use another stream"
    )]
    StreamCapturing,

    /// NVRTC rejected a kernel's CUDA source.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`KernelCompile`].
    #[error("{0}")]
    KernelCompile(Box<KernelCompile>),

    /// The NVRTC library (`libnvrtc`) could not be loaded.
    #[error(
        "the NVRTC runtime compiler (libnvrtc) could not be loaded; install the CUDA toolkit's \
         NVRTC library or load the kernel from precompiled PTX"
    )]
    NvrtcNotFound,

    /// A kernel's module does not contain the kernel's name.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`KernelNotFound`].
    #[error("{0}")]
    KernelNotFound(Box<KernelNotFound>),

    /// A launch configuration is outside what the kernel's `#[kernel]` declaration admits
    /// (its `block`, `max_threads` or `shared` argument), or outside a limit of the
    /// device or the kernel. Nothing was loaded or launched when the declaration refused
    /// it.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`InvalidLaunch`].
    #[error("{0}")]
    InvalidLaunch(Box<InvalidLaunch>),

    /// A CUDA library other than the driver (cuBLAS, ...) failed.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`Library`].
    #[error("{0}")]
    Library(Box<Library>),

    /// A CUDA driver call failed. When `code` is a kernel fault (an illegal address or
    /// instruction, a trap, a failed launch), the context is unusable from then on and
    /// the message says so.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`Driver`].
    #[error("{0}")]
    Driver(Box<Driver>),

    /// The device cannot allocate managed (unified) memory at all.
    #[error(
        "CUDA device {ordinal} does not support managed memory \
         (CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 0); use a DeviceVec and explicit copies instead"
    )]
    ManagedMemoryUnsupported {
        /// Ordinal of the device.
        ordinal: usize,
    },

    /// A managed allocation that does not fit in the device's free memory, refused
    /// before the driver was asked (see
    /// [`Device::alloc_managed`](crate::Device::alloc_managed)).
    ///
    /// The details are boxed, so that every `Result` stays small: see [`ManagedExceedsFreeMemory`].
    #[error("{0}")]
    ManagedExceedsFreeMemory(Box<ManagedExceedsFreeMemory>),

    /// An operation on managed memory that only a device with concurrent managed access
    /// allows.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`ManagedNeedsConcurrentAccess`].
    #[error("{0}")]
    ManagedNeedsConcurrentAccess(Box<ManagedNeedsConcurrentAccess>),

    /// The thread that completes this crate's futures (see [`crate::future`]) could not
    /// be started; nothing was enqueued.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`CompletionThread`].
    #[error("{0}")]
    CompletionThread(Box<CompletionThread>),

    /// The driver invalidated a graph capture: work it cannot record reached the
    /// capture's stream (through raw handles: a wait on an event recorded outside the
    /// capture, a synchronisation of a capturing stream, ...). No graph was made.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`GraphCaptureInvalidated`].
    #[error("{0}")]
    GraphCaptureInvalidated(Box<GraphCaptureInvalidated>),

    /// A graph could not be updated in place; it is unchanged, and its replays run what
    /// it ran before.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`GraphUpdate`].
    #[error("{0}")]
    GraphUpdate(Box<GraphUpdate>),

    /// A kernel argument of a graph could not be named or changed as asked; nothing was
    /// changed.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`GraphArgument`].
    #[error("{0}")]
    GraphArgument(Box<GraphArgument>),

    /// A [`GpuTimer`](crate::GpuTimer) was read before its time existed: its start or
    /// stop was not recorded, its stop has not completed on the GPU yet, or the stop ran
    /// before the start.
    ///
    /// ```
    /// let e = stream_core::Error::Timer { reason: "its start was never recorded" };
    /// assert_eq!(e.to_string(), "cannot read the GPU timer: its start was never recorded");
    /// ```
    #[error("cannot read the GPU timer: {reason}")]
    Timer {
        /// Why, and what to do.
        reason: &'static str,
    },

    /// A [`Trace`](crate::trace::Trace) cannot be written yet, or a scope cannot record
    /// into it.
    ///
    /// ```
    /// let e = stream_core::Error::Trace { reason: "this scope already records into another trace" };
    /// assert_eq!(e.to_string(), "cannot trace: this scope already records into another trace");
    /// ```
    #[error("cannot trace: {reason}")]
    Trace {
        /// Why, and what to do.
        reason: &'static str,
    },

    /// A cudarc value (a context, a stream, a slice) cannot be converted to this crate's
    /// types, or this crate's memory to a cudarc slice of the given stream (see
    /// [`interop`](crate::interop#cudarc)).
    ///
    /// The details are boxed, so that every `Result` stays small: see [`CudarcConversion`].
    #[error("{0}")]
    CudarcConversion(Box<CudarcConversion>),

    /// The NCCL library (`libnccl`) could not be loaded; no communicator was made.
    #[error(
        "the NCCL library (libnccl.so.2) could not be loaded; install NCCL (the \
         nvidia-nccl-cu12 or -cu13 Python package that PyTorch uses ships it, or NVIDIA's \
         libnccl2 package) and make it findable, e.g. through LD_LIBRARY_PATH"
    )]
    NcclNotFound,

    /// An NCCL call failed.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`Nccl`].
    #[error("{0}")]
    Nccl(Box<Nccl>),

    /// A communicator that was aborted, or that reported a failure (a peer died, a
    /// collective timed out), was used again. Nothing was enqueued.
    #[error(
        "the NCCL communicator cannot be used: {reason}; a failed or aborted communicator \
         stays unusable, so make a new one (every rank must)"
    )]
    CommunicatorAborted {
        /// Why it is unusable.
        reason: &'static str,
    },

    /// A collective did not complete within its communicator's timeout (a peer died, hung
    /// or never made the matching call): the communicator was aborted, so the scope's
    /// stream could drain, and it cannot be used again.
    #[error(
        "an NCCL collective did not complete within {timeout:?}: a peer died, hangs, or did \
         not make the matching call; the communicator was aborted (make a new one on every \
         rank), and the collective's receive buffers hold unspecified values. Raise the \
         limit with Communicator::set_timeout or STREAM_CORE_NCCL_TIMEOUT_S if the work is \
         just slow"
    )]
    CollectiveTimedOut {
        /// The communicator's timeout.
        timeout: std::time::Duration,
    },

    /// [`Device::trim_pinned_memory`](crate::Device::trim_pinned_memory), which waits for
    /// the whole GPU, found a collective issued in a scope on another thread of the process
    /// past its communicator's timeout, that thread not waiting for it (busy on the host,
    /// or blocked elsewhere), and the watchdog's abort not ending it (the abort waits for a
    /// call on the communicator still inside NCCL). Nothing was freed; call again later.
    #[error(
        "this call waits for the whole GPU, and an NCCL collective issued in a scope on \
         another thread is past its communicator's timeout, while that thread is not waiting \
         for it and the communicator's abort has not ended it (a call on it is still inside \
         NCCL): nothing was freed; call this again later"
    )]
    HeldUpByAnotherThread,

    /// [`Communicator::join_within`](crate::nccl::Communicator::join_within): the ranks
    /// did not all join within the time limit (a rank died, hangs, was never started,
    /// or was given another id or size). Nothing was made; the ranks that did join gave
    /// up too, or will at their own limit.
    #[error(
        "the communicator's ranks did not all join within {timeout:?}: a rank died, hangs, \
         was not started, or was given another UniqueId or size; nothing was made (start \
         every rank again with a new UniqueId), or raise the limit if they are just slow"
    )]
    JoinTimedOut {
        /// The time limit.
        timeout: std::time::Duration,
    },

    /// NCCL collectives and CUDA graphs, used as they cannot be: a graph with
    /// collectives replayed without one of the communicators they run on
    /// ([`Scope::replay`](crate::Scope::replay) instead of
    /// [`Scope::replay_with`](crate::Scope::replay_with), or a communicator missing from
    /// its list; nothing was launched), or a collective captured on a communicator whose
    /// peers could reach this rank's buffers during replays (see
    /// [`Capture::all_reduce`](crate::Capture::all_reduce); nothing was recorded).
    #[error("NCCL collectives in a CUDA graph: {reason}")]
    GraphCommunicators {
        /// What was missing, and what to do instead.
        reason: &'static str,
    },

    /// A [`PreMulSum`](crate::nccl::PreMulSum) made on one communicator was passed to a
    /// collective on another (NCCL numbers each communicator's reductions on their own,
    /// so its handle would name another reduction, or none). Nothing was enqueued.
    #[error(
        "a pre_mul_sum reduction was made on another communicator than the collective's; \
         make one with Communicator::pre_mul_sum on each communicator it reduces on"
    )]
    ReductionOfAnotherCommunicator,

    /// NCCL's group calls were used in a way that could leave a collective unissued
    /// while its buffers are released, or deadlock the thread; nothing was enqueued.
    #[error("NCCL group misuse: {reason}")]
    NcclGroup {
        /// What was wrong, and what to do instead.
        reason: &'static str,
    },

    /// Two ranks of this process made matching calls (the same collective's number, or
    /// a send and its receive) whose lengths or operations disagree: the later call was
    /// not issued, and every member of the communicator in this process refuses every
    /// later call (each scope that issued one of its calls ends with this error).
    ///
    /// The details are boxed, so that every `Result` stays small: see
    /// [`RanksDisagree`].
    #[error("{0}")]
    RanksDisagree(Box<RanksDisagree>),

    /// A rank outside a communicator (a root, a peer) was named.
    #[error(
        "rank {rank} is not in the communicator, which has {size} ranks; name a rank below {size}"
    )]
    InvalidRank {
        /// The rank named.
        rank: usize,
        /// The communicator's size.
        size: usize,
    },

    /// The launcher's environment (`torchrun`, Slurm, Open MPI) does not describe a
    /// world this process can join: a variable is missing, not a number, or contradicts
    /// another.
    ///
    /// The details are boxed, so that every `Result` stays small: see
    /// [`LaunchEnvironment`].
    #[error("{0}")]
    LaunchEnvironment(Box<LaunchEnvironment>),

    /// The ranks of a world could not meet: rank 0 could not listen, another rank could
    /// not reach it, or a rank did not arrive in time.
    ///
    /// The details are boxed, so that every `Result` stays small: see [`Rendezvous`].
    #[error("{0}")]
    Rendezvous(Box<Rendezvous>),
}

/// What a limit in an [`Error::InvalidLaunch`] admits: at most, exactly or at least a
/// number.
///
/// ```
/// use stream_core::LaunchLimit;
/// assert_eq!(LaunchLimit::AtMost(1024).to_string(), "at most 1024");
/// assert_eq!(LaunchLimit::Exactly(256).to_string(), "exactly 256");
/// assert_eq!(LaunchLimit::AtLeast(4096).value(), 4096);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchLimit {
    /// The value may not exceed this (a device limit, `max_threads = N`).
    AtMost(u64),
    /// The value must be this (`block = ...`).
    Exactly(u64),
    /// The value may not be below this (a block dimension, `shared = ...`).
    AtLeast(u64),
}

impl LaunchLimit {
    /// The number the limit names.
    pub fn value(&self) -> u64 {
        match *self {
            LaunchLimit::AtMost(v) | LaunchLimit::Exactly(v) | LaunchLimit::AtLeast(v) => v,
        }
    }
}

impl std::fmt::Display for LaunchLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchLimit::AtMost(v) => write!(f, "at most {v}"),
            LaunchLimit::Exactly(v) => write!(f, "exactly {v}"),
            LaunchLimit::AtLeast(v) => write!(f, "at least {v}"),
        }
    }
}

/// `Result<T, stream_core::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps a failed driver call, naming it.
    pub(crate) fn driver(call: &'static str, err: DriverError) -> Self {
        let text = |r: std::result::Result<&std::ffi::CStr, DriverError>| {
            r.map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "unknown error".to_owned())
        };
        // Only a capturing stream's work fails so: whatever the call, the capture it was
        // part of is over, which is what the user needs to know.
        if err.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED {
            return Error::from(GraphCaptureInvalidated {
                cause: format!(
                    "{call} failed with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: {}",
                    text(err.error_string())
                ),
            });
        }
        Error::from(Driver {
            call,
            code: err.0 as u32,
            name: text(err.error_name()),
            description: text(err.error_string()),
        })
    }

    /// `Ok` when a source of `source_len` elements and a destination of
    /// `destination_len` agree, else [`Error::LengthMismatch`] naming `what`. The one
    /// length check of every copy and kernel wrapper.
    ///
    /// ```
    /// use stream_core::Error;
    /// assert!(Error::check_lengths("axpy", 4, 4).is_ok());
    /// assert!(matches!(Error::check_lengths("axpy", 4, 5), Err(Error::LengthMismatch { .. })));
    /// ```
    #[inline]
    pub fn check_lengths(
        what: &'static str,
        source_len: usize,
        destination_len: usize,
    ) -> Result<()> {
        if source_len == destination_len {
            Ok(())
        } else {
            Err(Error::length_mismatch(what, source_len, destination_len))
        }
    }

    #[cold]
    fn length_mismatch(what: &'static str, source_len: usize, destination_len: usize) -> Self {
        Error::from(LengthMismatch {
            what,
            source_len,
            destination_len,
        })
    }

    /// The driver's `CUresult` code, if this error came from a driver call.
    pub fn driver_code(&self) -> Option<u32> {
        match self {
            Error::Driver(driver) => Some(driver.code),
            _ => None,
        }
    }

    /// `true` for a *sticky* driver error: a kernel faulted (illegal address, trap,
    /// failed launch, ...) and the CUDA context has stopped for good. Every later call on
    /// the device fails with the same error; only a new process can use the GPU again.
    ///
    /// ```
    /// use stream_core::{error::LengthMismatch, Error};
    /// let e = Error::from(LengthMismatch { what: "copy_to_host", source_len: 3, destination_len: 4 });
    /// assert!(!e.is_sticky());
    /// ```
    pub fn is_sticky(&self) -> bool {
        self.driver_code().is_some_and(is_sticky_code)
    }
}

/// Byte size of `len` elements of `T`, or [`Error::SizeOverflow`].
#[inline]
pub(crate) fn byte_len<T>(len: usize) -> Result<usize> {
    let elem_size = std::mem::size_of::<T>();
    len.checked_mul(elem_size)
        .ok_or(Error::SizeOverflow { len, elem_size })
}

// Every hot path returns `Result<_, Error>`: keep it three words (the rare payloads are
// boxed in their variants), so an `Ok` moves no more than the value and a tag.
const _: () = assert!(std::mem::size_of::<Error>() <= 24);
