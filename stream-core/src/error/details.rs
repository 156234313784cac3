//! The payloads of [`Error`]'s rarer variants, each boxed in its variant so that
//! `Result<T, Error>` stays three words: each has the variant's name, its fields and
//! its message, and converts into the variant with `From` (`Error::from(OutOfRange {
//! start, end, len })`).

use super::{Error, LaunchLimit};

/// A device allocation failed for lack of memory, even after the pool's cached memory
/// was handed back to the driver and the allocation retried once; or at once, when it
/// asked for more than the device has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct OutOfMemory {
    /// Bytes requested.
    pub requested: usize,
    /// Bytes free on the device after the retry failed (cached memory already
    /// released), or, for a request larger than the device, when it was refused.
    pub free: usize,
    /// Total bytes on the device.
    pub total: usize,
}

impl OutOfMemory {
    fn message(&self) -> String {
        let Self {
            requested,
            free,
            total,
        } = self;
        if requested > total {
            return format!(
                "out of GPU memory: asked for {requested} bytes, more than the device's \
                 {total} bytes ({free} free), so no release of cached memory can make room; \
                 ask for less, or split the data into chunks or across GPUs"
            );
        }
        format!(
            "out of GPU memory: asked for {requested} bytes while {free} of {total} bytes \
             are free, after releasing this process's cached device memory and retrying \
             once; drop buffers and DeviceVecs you no longer need, ask for less, or check \
             with nvidia-smi whether another process holds the memory"
        )
    }
}

/// Source and destination of a copy have different lengths.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "length mismatch in {what}: the source has {source_len} elements but the destination has \
     {destination_len} ({source_len} != {destination_len}); pass slices of equal length"
)]
pub struct LengthMismatch {
    /// The operation.
    pub what: &'static str,
    /// Elements in the source.
    pub source_len: usize,
    /// Elements in the destination.
    pub destination_len: usize,
}

/// Device memory does not have the number of elements a shape implies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "shape mismatch in {what}: the shape needs {expected} elements but the memory has {actual}; \
     pass memory of exactly that many elements"
)]
pub struct ShapeMismatch {
    /// The operation and the operand, e.g. `sgemm: a (m * k)`.
    pub what: &'static str,
    /// Elements the shape needs.
    pub expected: usize,
    /// Elements the memory has.
    pub actual: usize,
}

/// A sub-range does not fit in the memory it was taken from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "range {start}..{end} is out of bounds for device memory of {len} elements; \
     ranges must satisfy start <= end <= {len}"
)]
pub struct OutOfRange {
    /// First element of the range.
    pub start: usize,
    /// One past the last element of the range.
    pub end: usize,
    /// Length of the memory the range was taken from.
    pub len: usize,
}

/// NVRTC rejected a kernel's CUDA source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kernel `{kernel}` failed to compile; fix its CUDA source. NVRTC's log:\n{log}")]
pub struct KernelCompile {
    /// The kernel whose module failed.
    pub kernel: String,
    /// NVRTC's compile log.
    pub log: String,
}

/// A kernel's module does not contain the kernel's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "kernel `{kernel}` was not found in its module; declare it `extern \"C\" __global__` \
     in the CUDA source, with the same name"
)]
pub struct KernelNotFound {
    /// The kernel's name.
    pub kernel: String,
}

/// A launch configuration is outside what the kernel's `#[kernel]` declaration admits
/// (its `block`, `max_threads` or `shared` argument), or outside a limit of the
/// device or the kernel. Nothing was loaded or launched when the declaration refused
/// it.
///
/// ```
/// use stream_core::{error::InvalidLaunch, Error, LaunchLimit};
/// let e = Error::from(InvalidLaunch {
///     kernel: "sum_partials_f32",
///     what: "block.x",
///     value: 1024,
///     limit: LaunchLimit::Exactly(256),
///     source_of_limit: "`#[kernel(block = 256)]` on `sum_partials_f32`",
/// });
/// assert_eq!(
///     e.to_string(),
///     "invalid launch of `sum_partials_f32`: block.x is 1024, but `#[kernel(block = 256)]` \
///      on `sum_partials_f32` admits exactly 256; nothing was launched: pass a LaunchConfig \
///      within this limit"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid launch of `{kernel}`: {what} is {value}, but {source_of_limit} admits {limit}; \
     nothing was launched: pass a LaunchConfig within this limit"
)]
pub struct InvalidLaunch {
    /// The kernel (its CUDA name).
    pub kernel: &'static str,
    /// The offending part of the configuration, e.g. `block.x`, `threads per block`,
    /// `dynamic shared memory (bytes)`.
    pub what: &'static str,
    /// The value asked for.
    pub value: u64,
    /// What the limit admits: at most, exactly or at least a number.
    pub limit: LaunchLimit,
    /// Where the limit comes from: the declaration (e.g. ``"`#[kernel(block = 256)]`
    /// on `sum_partials_f32`"``), the device (e.g. `"the device
    /// (CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)"`), the kernel's registers, or CUDA itself.
    pub source_of_limit: &'static str,
}

/// A CUDA library other than the driver (cuBLAS, ...) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {message}")]
pub struct Library {
    /// The library function.
    pub call: &'static str,
    /// What the library reported.
    pub message: String,
}

/// A CUDA driver call failed. When `code` is a kernel fault (an illegal address or
/// instruction, a trap, a failed launch), the context is unusable from then on and
/// the message says so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "CUDA driver call {call} failed with {name}: {description}; {}",
    super::driver_advice(*.code)
)]
pub struct Driver {
    /// The driver function, e.g. `cuStreamSynchronize`.
    pub call: &'static str,
    /// The driver's error code (`CUresult`).
    pub code: u32,
    /// The driver's name for it, e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`.
    pub name: String,
    /// The driver's description of it.
    pub description: String,
}

/// A managed allocation that does not fit in the device's free memory, refused
/// before the driver was asked (see
/// [`Device::alloc_managed`](crate::Device::alloc_managed)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "managed allocation of {requested} bytes refused: the device has {free} bytes free; \
     less the {managed} bytes of managed memory this process already holds on it and a \
     margin of {margin} bytes, {available} bytes are available. Managed memory beyond \
     the free device memory oversubscribes the GPU, which can stall or hang it while \
     pages migrate; ask for less, drop ManagedVecs, buffers and DeviceVecs you no longer \
     need, or opt in to oversubscription with Device::alloc_managed_oversubscribed"
)]
pub struct ManagedExceedsFreeMemory {
    /// Bytes requested.
    pub requested: usize,
    /// Bytes free on the device (`cuMemGetInfo`), after the pool's cached memory was
    /// released.
    pub free: usize,
    /// Bytes of live managed allocations of this process on the device, counted as
    /// if they were on it.
    pub managed: usize,
    /// Bytes kept free for the driver and other allocations.
    pub margin: usize,
    /// `free - managed - margin` (zero when negative).
    pub available: usize,
}

/// An operation on managed memory that only a device with concurrent managed access
/// allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} needs concurrent managed access, which this memory does not have: its device \
     reports concurrentManagedAccess = 0 (or it was allocated with \
     ManagedAccess::StreamAttached), and then the host may not touch managed memory that \
     a running kernel may use; {instead}"
)]
pub struct ManagedNeedsConcurrentAccess {
    /// The refused operation.
    pub what: &'static str,
    /// What to do instead.
    pub instead: &'static str,
}

/// The thread that completes this crate's futures (see [`crate::future`]) could not
/// be started; nothing was enqueued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "could not start stream_core's completion thread ({reason}); no work was enqueued: \
     the process may have reached its thread or memory limit"
)]
pub struct CompletionThread {
    /// What the operating system reported.
    pub reason: String,
}

/// The driver invalidated a graph capture: work it cannot record reached the
/// capture's stream (through raw handles: a wait on an event recorded outside the
/// capture, a synchronisation of a capturing stream, ...), or a thread of the process
/// synchronised the whole device while it ran (cudarc's first stream of an
/// event-tracking context does; done repeatedly, that has crashed the driver: see
/// [`interop`](crate::interop)). No graph was made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the graph capture was invalidated ({cause}): work that a capture cannot record \
     reached its stream, such as a wait on an event recorded outside the capture or a \
     synchronisation of a capturing stream, or a thread of the process synchronised the \
     whole device meanwhile (a context synchronisation, the legacy default stream; \
     cudarc does so when a context with event tracking makes its first stream); no \
     graph was made: capture again without it"
)]
pub struct GraphCaptureInvalidated {
    /// What the driver reported.
    pub cause: String,
}

/// A graph could not be updated in place; it is unchanged, and its replays run what
/// it ran before.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the graph could not be updated in place: {reason}; the graph is unchanged: capture \
     a new graph with Device::capture instead"
)]
pub struct GraphUpdate {
    /// What differs, or what the driver refused.
    pub reason: String,
}

/// A kernel argument of a graph could not be named or changed as asked; nothing was
/// changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot change a kernel argument of a graph: {reason}; nothing was changed")]
pub struct GraphArgument {
    /// Which argument, and why.
    pub reason: String,
}

/// A cudarc value (a context, a stream, a slice) cannot be converted to this crate's
/// types, or this crate's memory to a cudarc slice of the given stream (see
/// [`interop`](crate::interop#cudarc)).
///
/// ```
/// use stream_core::{error::CudarcConversion, Error};
/// let e = Error::from(CudarcConversion {
///     what: "CudaStream",
///     reason: "it is the per-thread default stream",
/// });
/// assert_eq!(e.to_string(), "cannot convert cudarc's CudaStream: it is the per-thread default stream");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot convert cudarc's {what}: {reason}")]
pub struct CudarcConversion {
    /// What was being converted: `CudaContext`, `CudaStream`, `CudaSlice`, or
    /// `DeviceVec` (into a `CudaSlice`).
    pub what: &'static str,
    /// Why it cannot be, and what to do instead.
    pub reason: &'static str,
}

/// An NCCL call failed: NCCL's code, its name and description, and NCCL's own last
/// error message (set `NCCL_DEBUG=WARN` for more).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "NCCL call {call} failed with {name} ({code}): {description}{}; set NCCL_DEBUG=WARN \
     for NCCL's own account, and check that every rank makes the same calls with the \
     same counts, types and roots",
    if last_error.is_empty() { String::new() } else { format!(" ({last_error})") }
)]
pub struct Nccl {
    /// The NCCL function, e.g. `ncclAllReduce`.
    pub call: &'static str,
    /// NCCL's `ncclResult_t`.
    pub code: u32,
    /// Its name, e.g. `ncclInvalidArgument`.
    pub name: String,
    /// NCCL's description of the code (`ncclGetErrorString`).
    pub description: String,
    /// NCCL's last error message (`ncclGetLastError`), empty when it has none.
    pub last_error: String,
}

/// The launcher's environment does not describe a world this process can join.
///
/// ```
/// use stream_core::{error::LaunchEnvironment, Error};
/// let e = Error::from(LaunchEnvironment {
///     variable: "WORLD_SIZE".into(),
///     problem: "is missing (RANK is set)".into(),
/// });
/// assert!(e.to_string().starts_with("launch environment: WORLD_SIZE is missing"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("launch environment: {variable} {problem}")]
pub struct LaunchEnvironment {
    /// The variable (or variables) at fault.
    pub variable: String,
    /// What is wrong with it, and what to do.
    pub problem: String,
}

/// The ranks of a world could not meet at rank 0's address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "rendezvous at {address} failed: {reason}; check that every rank was started with \
     the same MASTER_ADDR and MASTER_PORT, that the port is free on rank 0's host and \
     reachable from the others, and that no rank failed before it arrived"
)]
pub struct Rendezvous {
    /// Rank 0's address, `host:port`.
    pub address: String,
    /// What went wrong.
    pub reason: String,
}

/// Two ranks of this process made calls that NCCL would match with each other, with
/// lengths (or operations) that disagree; the later one was not issued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "ranks {other_rank} and {rank} of this process disagree on their {position} on one \
     communicator: rank {other_rank} issued {other_call}, rank {rank} asked for {call}. Every \
     rank must make the matching call with the same lengths and reduction; rank {rank}'s call \
     was not issued, and this process's members of the communicator cannot be used again \
     (make a new one on every rank)"
)]
pub struct RanksDisagree {
    /// Which call: `collective number 3`, `send number 0 from rank 1 to rank 0`.
    pub position: String,
    /// The rank whose call was refused.
    pub rank: usize,
    /// Its call, `all_reduce (sum) of 4194304 × f32`.
    pub call: String,
    /// The rank that issued the call of that number first.
    pub other_rank: usize,
    /// That call.
    pub other_call: String,
}

/// `From<Payload> for Error` for each boxed variant: the variant of the same name.
macro_rules! boxed_into_error {
    ($($name:ident),* $(,)?) => {$(
        impl From<$name> for Error {
            #[cold]
            fn from(details: $name) -> Self {
                Error::$name(Box::new(details))
            }
        }
    )*};
}

boxed_into_error!(
    Nccl,
    RanksDisagree,
    LaunchEnvironment,
    Rendezvous,
    OutOfMemory,
    LengthMismatch,
    ShapeMismatch,
    OutOfRange,
    KernelCompile,
    KernelNotFound,
    InvalidLaunch,
    Library,
    Driver,
    ManagedExceedsFreeMemory,
    ManagedNeedsConcurrentAccess,
    CompletionThread,
    GraphCaptureInvalidated,
    GraphUpdate,
    GraphArgument,
    CudarcConversion,
);

#[cfg(test)]
mod tests {
    use super::OutOfMemory;

    /// A request the card could hold once memory is freed says what the library did
    /// before it gave up; one larger than the card says that nothing can make room.
    #[test]
    fn out_of_memory_says_why_nothing_more_could_be_done() {
        let (free, total) = (1 << 30, 80 << 30);
        let retried = OutOfMemory {
            requested: 4 << 30,
            free,
            total,
        };
        let refused = OutOfMemory {
            requested: 2 * total,
            free,
            total,
        };
        let (retried, refused) = (retried.to_string(), refused.to_string());
        assert!(retried.contains("4294967296 bytes"), "{retried}");
        assert!(retried.contains("retrying once"), "{retried}");
        assert!(refused.contains("171798691840 bytes"), "{refused}");
        assert!(
            refused.contains("more than the device's 85899345920 bytes"),
            "{refused}"
        );
        assert!(!refused.contains("retrying"), "{refused}");
        for message in [retried, refused] {
            assert!(message.contains("; "), "no advice: {message}");
        }
    }
}
