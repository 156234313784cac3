//! Compile-time-checked asynchronous CUDA streams.
//!
//! GPU programs overlap copies and kernels on streams. One forgotten synchronisation
//! means reading half-copied memory, freeing a buffer the GPU still writes, or a stall
//! of the whole device. This crate makes those mistakes compile errors, at the cost of
//! the raw driver calls.
//!
//! ```no_run
//! use stream_core::{scope, Device, Error};
//! # fn main() -> stream_core::Result<()> {
//! let dev = Device::new(0)?;
//! let stream = dev.new_stream()?;
//! let input: Vec<f32> = (0..1 << 20).map(|i| i as f32).collect();
//! let mut out = vec![0f32; input.len()];
//! scope(&stream, |s| {
//!     let x = s.upload(&input)?;                  // async; `input` is now read-only
//!     let pending = s.copy_to_host(&x, &mut out)?; // async; `out` is now untouchable
//!     let host = pending.wait()?;                  // one event sync, then host access
//!     assert_eq!(host[7], 7.0);
//!     Ok::<_, Error>(())
//! })?;                                             // the stream is synchronised here
//! # Ok(()) }
//! ```
//!
//! # Layers
//!
//! ```text
//!   interop/  raw handles for other crates, a stream's scratch memory for their
//!     |       workspaces; cudarc's context, streams and slices converted both ways
//!   future/   owned-buffer futures: Stream::run_owned, upload_owned, download_owned,
//!     |       a completion thread per device, a doorbell for the head-of-line bypass
//!   nccl/     Communicator, collectives on a scope's branded memory and in a capture
//!     |       (replay_with), nccl::group, World (torchrun, srun, mpirun), rendezvous
//!   graph/    Device::capture, Graph, replay, held memory, kernel-node scalars, the
//!     |       communicators its collectives keep
//!   managed/  ManagedVec: managed memory whose residency is a type (attach, prefetch,
//!     |       advice)
//!   timing/   GpuTimer: GPU time between timing events recorded in scopes
//!     |
//!   scope/    scope(), Scope and every operation it issues, Pending, fork, hand_off,
//!     |       Lend (what a scope's or a capture's fork lends)
//!     +-------------------+-------------------+
//!   memory/             host/               kernel/
//!   device memory:      pinned buffers,     declarations, launch shapes,
//!   brand, views,       the pinned pool,    configurations, the module
//!   DeviceBuffer,       staged copies       cache
//!   DeviceVec, pool
//!     +-------------------+-------------------+
//!   trace/    Trace: timing events around traced scopes' operations (and staged
//!     |       copies' chunks), written as a Chrome trace
//!   device/   Device, Stream, events that order streams
//!     |
//!   driver/   the only code that calls cudarc's `result`/`sys`: RAII handles and
//!             raw operations as `unsafe fn`
//! ```
//!
//! Each folder uses only the ones below it (`host/` and `kernel/` also use `memory/`'s
//! element types, `scope/` all four, `managed/` and `graph/` everything below them), and
//! `error/` (the one [`Error`] type, below everything). Inside `driver/` too, each file
//! uses only the files below it: `device` (queries) under `context` (the primary
//! context and its binding), under `stream`, under `event`, `memory` and the rest.
//! Source tests in `ui-tests` check both orders (`ui_source_layers.rs`) and the table
//! below (`ui_source_invariants.rs`).
//!
//! Outside `driver/`, every `unsafe` block's proof is about memory: host memory a DMA
//! uses, device memory a kernel or copy uses, or the scope that makes both safe. The
//! number of `unsafe` blocks in each folder, which the same source test keeps true (a
//! change that adds one updates this table, and says why in its review):
//!
//! | folder      | unsafe blocks | what they prove |
//! |-------------|---------------|-----------------|
//! | `driver/`   | 160 | the driver's own rules for each raw call (38 of them NCCL's, in `driver/nccl.rs`, `driver/nccl_comm.rs`, `driver/nccl_join.rs`, `driver/nccl_abort.rs`, `driver/nccl_reduction.rs` and `driver/nccl_user_op.rs`, whose calls take a reduction NCCL made as C's `int`, which cudarc's `ncclRedOp_t` enum cannot hold; 7 the C ABI of entry points some CUDA bindings lack, in `driver/versions.rs`; 18 NVTX's injection protocol, in `driver/nvtx.rs`, 7 of them its tests acting as a tool; 4 the tests' stall on the GPU, a wait for a flag in host memory, in `driver/host_flag.rs`; what an owner releases, a stream-ordered allocation, a pinned block, managed memory, a module, is released by a safe consuming method there, as a `Box` is dropped: the proofs are at the uses) |
//! | `memory/`   | 9  | byte views of element slices; `DeviceVec`'s blocking copies; the waits for this thread's open scopes' streams (an out-of-memory retry's, and before a call that waits for the whole device); the process's list of watched streams (a scope's stream lent through a lease while the scope borrows it: another thread's query of it, or the watchdog's progress marker recorded on it, under the lease's lock, which the scope's end takes before the stream can go) (a scope's memory reaches the staged copies as a `StreamRange`, made safely from its brand and borrow; stream-ordered allocations are owned `StreamOrdered` values, freed safely) |
//! | `host/`     | 12 | pinned memory as typed slices; staged copies' DMAs, copy-out thread and streaming stores; the download snapshot's and the calibration's device memory (as `StreamRange`s) |
//! | `scope/`    | 11 | DMA into borrowed host memory, launch arguments, a scope's and a fork's creation |
//! | `managed/`  | 8  | host access to managed memory, attachment, migration (a new allocation is zeroed by `driver/`) |
//! | `graph/`    | 12 | a capture's own scope and tokens, graph launches (and a replay's graph taken back unwaited to launch it again: `InFlight`), held views, kernel-node arguments (a kernel's arguments carry their promise in `KernelArgs`, made only by the `unsafe fn` `launch` in `scope/launch.rs`; a capture's stream captures from its creation, `driver::graph::new_capturing_stream`) |
//! | `future/`   | 4  | DMA of owned buffers, an owned scope, a `DeviceVec` of a stream-ordered allocation |
//! | `nccl/`     | 5  | a collective's buffers: branded, borrowed until it is on the stream; a group's kept values (a stand-in's scratch memory, boxed, lent for the group and freed after its end: three); a factor on the GPU (`all_reduce_scaled`): one element of the scope's memory, borrowed as a send buffer is, read when the collective runs |
//! | `interop/`  | 4  | device memory changing owner, the stream scratch's allocation |
//! | `kernel/`, `timing/`, `trace/`, `device/`, `error/` | 0 | |
//!
//! ## Where a new capability goes
//!
//! A capability gets a folder of its own, at the height of what it uses, and its
//! `mod.rs` says in its first lines what the folder does and what it may use. Its raw
//! driver or library calls go into `driver/` as RAII handles (safe methods) or as
//! `unsafe fn` with a `# Safety` section that states only the driver's rule; the
//! folder's own `unsafe` blocks then say only why the memory is valid (a borrow, a
//! brand, a hold), citing the types that enforce it. What the capability allocates is
//! an owning value of `driver/` whose release is safe (`driver::pool::StreamOrdered`,
//! `PinnedAllocation`, `ManagedAllocation`): the proof that the memory outlives the GPU
//! work belongs to the `unsafe` call that enqueues the work, not to the free. Add the
//! folder to `FOLDER_USES` in `ui-tests/tests/ui_source_layers.rs` and to the table
//! above (checked by `ui_source_invariants.rs`).
//!
//! The several-GPU work is the worked example:
//!
//! * **Peer access and work across devices** turned out to need no folder of its own,
//!   because the fork is where it happens, and `scope/` must not use a folder above it:
//!   the two raw calls (`cuDeviceCanAccessPeer`, `cuMemPoolSetAccess`) are safe methods
//!   in `driver/device.rs` and `driver/pool.rs`; which device pools granted which
//!   devices access is recorded with the owner's context (`driver/context.rs`), and
//!   granted once per pair by `device/peer.rs`, which says why pool memory needs it;
//!   `scope/fork.rs` forks onto another device's stream (the child's context bound, an
//!   event of each side's context) and `scope/hand_off.rs` hands a buffer across, both
//!   after granting the child every device whose memory the parent's brand may be on
//!   (the scope keeps that set). No `unsafe` block was added outside `driver/`: a
//!   cross-device child is made by the same two blocks as any fork.
//! * **NCCL collectives** (`nccl/`): cudarc's `nccl` `result` layer is called only from
//!   `driver/nccl.rs` (the library, its errors, group brackets), `driver/nccl_comm.rs`
//!   (a communicator as an RAII handle whose drop destroys it, each collective an
//!   `unsafe fn` stating NCCL's rule: the buffers hold `count` elements of the type on
//!   the communicator's device), and from `driver/nccl_join.rs` (a
//!   communicator made within a time limit: NCCL's non-blocking mode, its config, the
//!   split into a blocking member; `driver/nccl_abort.rs`, an abort on a thread of its
//!   own; `driver/nccl_group.rs`, whether a group is open, which keeps the aborts asked
//!   for inside it for its end). `nccl/` sits above `graph/`: it uses `scope/` to
//!   enqueue on a scope's stream (and to bound the scope's end with a watch
//!   that aborts a communicator whose peer died), `memory/` for branded send and
//!   receive views, `device/` for ordinals, and `graph/` to record collectives into a
//!   capture (`nccl/captured.rs`). Its collectives' one proof is a kernel's:
//!   the collective runs on the scope's stream, so call-length borrows suffice, except
//!   inside `nccl::group`, whose borrows last until the group's end (see [`nccl`]). The
//!   group's other three blocks keep a value (a stand-in's scratch memory) boxed until
//!   that end, when NCCL has enqueued what uses it: plain Rust memory, no NCCL call.
//! * **The trace recorder** (`trace/`) sits under `host/` and `scope/`, just above
//!   `device/`: scopes record their operations into it, and the staging ring in `host/`
//!   its chunks' DMAs, so it may use only `device/` and `driver/` (timing events are
//!   `driver/event.rs`'s safe methods). It needs no `unsafe` at all; a scope reaches it
//!   through one wrapper (`Scope::traced`, `scope/tracing.rs`) that untraced scopes pass
//!   with one atomic load.
//! * The launcher's environment (`torchrun`, Slurm, Open MPI) and the TCP exchange of
//!   NCCL's unique id are host code with no `unsafe` at all, so they sit in `nccl/`
//!   beside the communicator they make.
//! * **Collectives in CUDA graphs** touch two folders, and go in the higher one:
//!   `nccl/captured.rs` records a collective through the capture's own scope, with
//!   `request.rs`'s checks and proof, and gives `Scope::replay_with`. What the graph must
//!   keep is below both, a driver handle (`driver::nccl_comm::GraphKeep`: the
//!   communicator is destroyed after the graph, and aborted on a thread of its own while
//!   a graph keeps it, since NCCL's abort waits for such graphs), so `graph/` keeps it
//!   (`graph/collectives.rs`) and checks it at replay without knowing `nccl/`. No
//!   `unsafe` block was added.
//! * **A value a binding cannot hold** goes to `driver/` with its calls: NCCL's handle
//!   for a reduction it made (`nccl::PreMulSum`) is an `int` that cudarc's
//!   `ncclRedOp_t` enum may not hold, so `driver/nccl_user_op.rs` keeps it as `c_int`
//!   and calls the five entry points that take it through their C signatures (as
//!   `driver/versions.rs` does for the CUDA driver), below `driver/nccl.rs`, whose
//!   `Collective` carries it; `driver/nccl_reduction.rs`, above `driver/nccl_comm.rs`,
//!   makes and destroys one; `nccl/pre_mul_sum.rs` is safe code that ties it to its
//!   communicator by a borrow.
//! * An operation composed of existing ones adds no `unsafe` either: `nccl/all_to_all.rs`
//!   (the all-to-all NCCL has no call for before 2.28) is a group of the sends and
//!   receives whose checks and proof `nccl/request.rs` already has; it splits its
//!   buffers with the views' own safe `split_at` and opens its group through
//!   `nccl::group`, whose borrows already last until the group's end; `gather` and
//!   `scatter` (`nccl/gather_scatter.rs`) are that exchange with the blocks that do not
//!   involve the root empty.
//!
//! The macros (`#[gpu_scope]`, `#[kernel]`) generate calls into [`fn@scope`] and the launch
//! entry, and [`#[derive(DeviceRepr)]`](derive@DeviceRepr) makes a `#[repr(C)]` struct
//! an element type; [`interop`] gives raw handles to other crates and converts cudarc's
//! values ([`docs::coming_from_cudarc`] is the porting guide;
//! [`docs::coming_from_torch_distributed`] maps `torch.distributed` onto [`nccl`]),
//! [`staging`] tunes staged
//! copies, [`GpuTimer`] measures GPU time between two points of scopes' streams, [`trace`]
//! records chosen scopes' GPU timeline as a Chrome trace, and
//! [`future`] runs scopes and copies as futures that own their buffers, on any
//! executor, without blocking its threads.
//!
//! # Safety model
//!
//! 1. **One synchronisation the user cannot skip.** [`fn@scope`] runs its closure, then
//!    synchronises *that stream* in its own stack frame, on return and on unwind.
//!    Nothing the user holds is needed for safety, so `mem::forget` is at worst a leak.
//!    If that synchronisation fails while unwinding, the process aborts.
//! 2. **A fresh, invariant brand per scope.** The closure is
//!    `for<'s> FnOnce(&'s Scope<'s, 'env>) -> Result<T, E>`; branded types are
//!    invariant in `'s`, so nothing branded escapes a scope or enters another.
//! 3. **Host memory is borrowed until the scope's end.** Upload sources are borrowed
//!    `&'env [T]`, download destinations `&'env mut [T]` (and attached [`DeviceVec`]s
//!    likewise): the borrow checker rejects writes, reads, drops and moves of host
//!    memory a transfer may still be using. `'env` lasts until the outermost scope's
//!    final synchronisation, which also covers [forked](Scope::fork) children.
//! 4. **Device memory made in a scope is branded.** [`DeviceBuffer`] is allocated and
//!    freed stream-ordered on the scope's stream, so same-stream work needs only
//!    call-length borrows.
//! 5. **Early host access is a typestate.** A download returns a [`Pending`];
//!    [`Pending::wait`] synchronises on one event and hands the slice back.
//! 6. **Several streams are ordered by events.** [`Scope::fork`] runs a child scope on
//!    another stream (of this device or another), started and joined by events; parent
//!    memory is lent to it for the whole fork (shared or exclusive), and
//!    [`Scope::hand_off`] moves a buffer, and the duty to free it, to another scope's
//!    stream. [`scope_all!`] opens sibling scopes on several streams this way.
//! 7. **No hidden synchronisation, never device-wide.** Only `scope`'s exit,
//!    [`Pending::wait`] and calls documented as blocking (creating or reading a
//!    [`DeviceVec`], [`Device::trim_memory`], [`Device::trim_pinned_memory`], copies of
//!    pageable host memory, and an allocation that finds the device out of memory,
//!    which waits for the streams of this thread's open scopes before it retries, see
//!    [`Scope::alloc`]) block the host, each on streams or one event.
//! 8. **Only concrete types cross the unsafe boundary.** Device memory is accepted
//!    through the sealed [`DeviceMemory`]/[`DeviceMemoryMut`] traits, which no user
//!    type can implement.
//!
//! Every synchronisation (a scope's end, a fork's join, [`Pending::wait`], the blocking
//! [`DeviceVec`] calls) first binds its own device's context on the calling thread,
//! whatever context the thread has current then, and every call of this crate that
//! binds a context gives the thread its previous one back ([`interop::bind`] is the
//! same guard).
//!
//! The assumption the model rests on is the CUDA driver API's wording for its *sticky*
//! errors (`CUDA_ERROR_ILLEGAL_ADDRESS`, `CUDA_ERROR_LAUNCH_FAILED` and the other kernel
//! faults): "This leaves the process in an inconsistent state and any further CUDA work
//! will return the same error. To continue using CUDA, the process must be terminated
//! and relaunched." (for `CUDA_ERROR_ASSERT`: "The context cannot be used anymore, and
//! must be destroyed."). So a synchronisation that fails with a sticky error
//! ([`Error::is_sticky`]) proves that no DMA into host memory continues, and a scope
//! may return that error and release its borrows. A synchronisation that fails with any
//! other error proves nothing, so the process aborts instead.
//!
//! # Pinned and pageable host memory
//!
//! The GPU's DMA engines move only page-locked ("pinned") host memory.
//!
//! * [`PinnedBuffer`] ([`Device::alloc_pinned`]) is pinned memory from the device's
//!   pool: copies from and to it (and its sub-slices) are single asynchronous DMAs at
//!   full bus speed. Dropping it returns its block to the pool, where the next
//!   allocation of its size class reuses it; [`Device::pinned_memory_stats`] reports
//!   the pool's bytes in use, cached and peak, and [`Device::trim_pinned_memory`] frees
//!   the cache. [`Device::alloc_pinned_write_combined`] gives write-combined memory,
//!   for data the host writes once and only the GPU reads.
//! * Any other host memory (a `Vec`, a stack array) is pageable. Copies of at least
//!   1 MiB of it are **staged**: split into chunks that go through a ring of four
//!   pinned blocks of the pool, the host memcpy of one chunk (on every core but two, up
//!   to 16, with at least 512 KiB of chunk per thread; see [`staging`]) overlapping the
//!   DMA of the others, which is several times faster than
//!   the driver's own pageable path. An upload returns once the data has left the source
//!   (the DMA may still run), as the driver's pageable path does. A download returns at
//!   once: the source is snapshotted on the device and a background thread copies each
//!   chunk out as it lands; [`Pending::wait`] and the scope's end wait for that copy-out.
//!   Smaller copies take the driver's path. They wait only for their own stream's work.
//!
//! Staging changes nothing in the safety model: staged uploads run on the scope's
//! stream; a staged download's destination stays borrowed until its copy-out is known
//! done (`wait`, or the scope's end, which waits for it in its own frame); and a staging
//! block is reused only once an event recorded after its last DMA has completed.
//!
//! # Kernels
//!
//! A kernel's Rust signature is declared once with [`macro@kernel`], which generates a safe
//! wrapper taking the scope, a [`LaunchConfig`] and branded device memory (`&` for what
//! the kernel reads, `&mut` for what it writes):
//!
//! ```ignore
//! #[kernel(cuda = SOURCE, block = 256)]
//! pub unsafe fn block_sums_f32(x: &[f32], sums: &mut [f32]);
//! ```
//!
//! Writing `unsafe fn` is the declaration's one promise: the CUDA kernel takes exactly
//! these parameters (each slice as a pointer and a `size_t` length), stays within the
//! lengths and writes only through `&mut` slices, **for every launch shape the
//! declaration admits**. The declaration states those shapes: `block = 256`,
//! `block = (32, 8)` or `max_threads = 512` for the block, `shared = BYTES` or
//! `shared = |(x, y, z)| BYTES` for the dynamic shared memory the kernel needs. The
//! wrapper refuses any other [`LaunchConfig`] with an [`Error::InvalidLaunch`] naming the
//! declaration, before the kernel is loaded or anything is enqueued. **A declaration
//! without a block promises that the kernel is memory-safe for every block the device
//! accepts, and one without `shared` that it is memory-safe with any dynamic shared
//! memory:** a kernel with a fixed-size `__shared__` array indexed by `threadIdx`, or
//! that assumes its `blockDim`, must declare its shape.
//!
//! A CUDA source compiles (NVRTC, for the device's architecture, once per process for
//! devices of one compute capability) at the first launch of one of its kernels on a
//! device, or before it with [`Device::prepare_kernels`], which compiles several sources
//! side by side and reports a compile error at once: what a server does at start-up.
//!
//! # Managed memory
//!
//! A [`ManagedVec`] ([`Device::alloc_managed`]) is unified memory whose residency is a
//! type: the host reads and writes it ([`ManagedVec::host_mut`]) while no scope has it;
//! [`Scope::attach_managed`] borrows it for the scope, whose kernels, copies and fills
//! then use the view while the host cannot touch it; [`Scope::prefetch_to_device`]
//! moves its pages ahead of the kernels, and [`Scope::prefetch_to_host`] consumes the
//! view and returns a [`Pending`] that hands the host the elements inside the scope. An
//! allocation larger than the device has free is an error, never a request
//! ([`Device::alloc_managed_oversubscribed`] opts in). Devices without concurrent
//! managed access get the same types, with the memory attached to streams underneath
//! (see [`ManagedAccess`]).
//!
//! # Misuse is a compile error
//!
//! Each of these has a twin in `ui-tests` with the full compiler message.
//!
//! Writing an upload's source while the scope runs
//! (`ui-tests/tests/ui/host/write-upload-source.rs`):
//!
//! ```compile_fail,E0502
//! # use stream_core::{scope, Error, Stream};
//! # fn f(stream: &Stream) -> Result<(), Error> {
//! let mut input = vec![1f32; 16];
//! scope(stream, |s| {
//!     let _x = s.upload(&input)?;
//!     input[0] = 2.0; // error: `input` is borrowed by the pending upload
//!     Ok::<_, Error>(())
//! })
//! # }
//! ```
//!
//! Using one scope's buffer in another scope (`ui-tests/tests/ui/brand/buffer-into-other-scope.rs`):
//!
//! ```compile_fail
//! # use stream_core::{scope, Error, Stream};
//! # fn f(a: &Stream, b: &Stream) -> Result<(), Error> {
//! let mut out = vec![0f32; 16];
//! scope(a, |s| {
//!     let x = s.alloc_zeroed::<f32>(16)?;
//!     scope(b, |t| {
//!         t.copy_to_host(&x, &mut out)?.wait()?; // error: `x` is branded by the outer scope
//!         Ok::<_, Error>(())
//!     })
//! })
//! # }
//! ```
//!
#![doc = include_str!("errors_doc.md")]
#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod device;
#[allow(unsafe_code)]
mod driver;
pub mod error;
#[allow(unsafe_code)]
pub mod future;
#[allow(unsafe_code)]
mod graph;
#[allow(unsafe_code)]
mod host;
#[allow(unsafe_code)]
mod kernel;
#[allow(unsafe_code)]
mod managed;
#[allow(unsafe_code)]
mod memory;
#[allow(unsafe_code)]
pub mod nccl;
#[allow(unsafe_code)]
mod scope;
mod sealed;

#[doc(hidden)]
pub mod __private;
pub mod docs;
#[allow(unsafe_code)]
pub mod interop;
pub mod staging;
mod timing;
pub mod trace;

#[cfg(test)]
mod auto_traits;

pub use device::{Device, Stream};
pub use error::{Error, LaunchLimit, Result};
pub use graph::{
    Capture, Enqueue, Graph, Hold, KernelNode, PinnedMemory, PinnedMemoryMut, PinnedSlice,
    PinnedSliceMut, Recorded, ScalarParam,
};
pub use host::{PinnedBuffer, PinnedMemoryStats};
pub use kernel::{KernelSource, LaunchConfig};
pub use managed::{
    ManagedAccess, ManagedAdvice, ManagedLocation, ManagedMemory, ManagedMemoryStats, ManagedSlice,
    ManagedSliceMut, ManagedVec,
};
pub use memory::{
    DeviceBuffer, DeviceMemory, DeviceMemoryMut, DeviceMemoryStats, DeviceRepr, DeviceSlice,
    DeviceSliceMut, DeviceVec,
};
pub use scope::{scope, Lend, Pending, Scope};
pub use stream_macros::{gpu_scope, kernel, DeviceRepr};
pub use timing::GpuTimer;
