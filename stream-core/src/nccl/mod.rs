//! Several GPUs, several processes, several hosts: NCCL collectives on a scope's
//! branded memory, communicators made in one process or across a launcher's ranks, and
//! the launcher's world.
//!
//! NCCL is loaded at run time through cudarc's `nccl` module: building needs no NCCL,
//! and a missing `libnccl` is [`Error::NcclNotFound`](crate::Error::NcclNotFound) when a
//! communicator is made.
//!
//! ```no_run
//! use stream_core::{nccl::{Communicator, Sum, World}, scope, Error};
//! # fn main() -> stream_core::Result<()> {
//! // Under `torchrun --no-python --nproc-per-node=2 ./train`, `srun` or `mpirun`:
//! let world = World::from_env()?;
//! let device = world.device()?;                 // LOCAL_RANK picks the GPU
//! let comm = world.communicator(&device)?;      // rank 0's id, handed out over TCP
//! let stream = device.new_stream()?;
//! let local_grad = vec![world.rank() as f32; 1 << 20];
//! scope(&stream, |s| {
//!     let mut grad = s.upload(&local_grad)?;
//!     s.all_reduce_in_place(&comm, &mut grad, Sum)?;
//!     Ok::<_, Error>(())
//! })?;
//! # Ok(()) }
//! ```
//!
//! # Why a collective borrows its buffers only for the call
//!
//! A collective is enqueued on the scope's stream like a kernel (NCCL's "CUDA stream
//! semantics"): it reads the send buffer and writes the receive buffer while it runs
//! *there*, and not before or after. Peers reach this rank's memory only through NCCL's
//! own staging buffers, which this rank's kernel copies from and to while it runs; this
//! crate never registers user buffers with NCCL (`ncclCommRegister`, `ncclMemAlloc`),
//! which is what would let a peer keep a reference past that. So the same argument as
//! for [`Scope::copy_device`](crate::Scope::copy_device) and kernel launches holds: the
//! operation is on the stream when the call returns, every later use of the memory
//! through this scope (a kernel, a download, the stream-ordered free of a
//! `DeviceBuffer`, a fork's lend, which waits on an event recorded after it) is ordered
//! after it on the stream, and a download's host memory stays borrowed until its own
//! synchronisation, as always. The peer's schedule decides *when* the operation
//! completes, never *where* it writes.
//!
//! Two places where "on the stream when the call returns" would not hold are closed:
//! inside [`fn@group`], operations are enqueued only at the group's end, so [`Group`]'s
//! methods borrow their buffers until then (reading a receive buffer inside the group
//! does not compile), and a scope's own methods are refused while a group is open on
//! the thread. (A group opened by other code through NCCL directly, e.g. cudarc's
//! `nccl::result::group_start`, is invisible to this crate: collectives issued inside
//! it would break the argument, as they break cudarc's own.)
//!
//! NCCL defers to a group's end more than the collectives: an abort called inside a group
//! would free the communicator there before the group's calls are launched on it, and a
//! communicator made inside one would be made only there. So an abort asked for inside
//! a group ([`Communicator::abort`], or a scope's watch) counts at once and is made just
//! after the group's end, and communicators are made outside groups
//! ([`Error::NcclGroup`](crate::Error::NcclGroup) otherwise), as they are split. (One
//! dropped inside a group is destroyed at its end too, which is harmless: the group
//! holds none of its calls, since those borrow it until then.)
//!
//! # When a peer dies
//!
//! A collective whose peer died, hangs or never made the matching call never
//! completes, so neither would the scope's synchronisation. A scope that issued a
//! collective ends by polling instead: NCCL's error state (`ncclCommGetAsyncError`)
//! and the time waited. On a reported failure, or past the communicator's timeout
//! ([`DEFAULT_TIMEOUT`], [`Communicator::set_timeout`], `STREAM_CORE_NCCL_TIMEOUT_S`), it
//! aborts the communicator (`ncclCommAbort`, which stops its kernels), waits for the
//! stream, which now drains, and returns the error. The receive buffers then hold
//! unspecified values, which are still valid numbers (every bit pattern of an
//! [`NcclElement`] is), and host memory is released only after the stream is idle. The
//! communicator is unusable from then on (NCCL frees an aborted communicator, so a
//! scope's collectives borrow the communicator until the scope ends: no other thread
//! can be enqueuing on it when the scope's end aborts it). Collectives ask NCCL's error
//! state themselves only on the first call and every 64th (asking on every call cost
//! about 12 ns of a small collective's 105 ns enqueue on an H200);
//! [`Communicator::check`] asks at once.
//!
//! What the abort leaves the peers: the aborted rank's part of the collective may have
//! run before it was stopped, and NCCL then lets a peer's matching call complete on it.
//! Measured on 2x H200 (NCCL 2.28.3): a rank's all_reduce made after its peer timed out
//! and was aborted returned at once, with half its values reduced and half its own or
//! zeros; only its next collective waited, until its own timeout. Ranks of this process
//! are told (the ledger, below: their later calls are refused and their queued ones
//! stopped, with [`Error::CommunicatorAborted`](crate::Error::CommunicatorAborted));
//! ranks of other processes cannot be, from here. So an error from a scope's
//! collective on any rank means that what every rank received since its last step
//! known to be good is suspect: end the job on every rank, or restart every rank from a
//! checkpoint with new communicators (PyTorch's default on a collective timeout tears
//! the process down, for the same reason).
//!
//! The host waits inside such a scope are bounded the same way:
//!
//! * a download's [`Pending::wait`](crate::Pending::wait) (and a replay's, a
//!   prefetch's) polls its event with the scope's watches;
//! * a copy between device memory and pageable host memory, which holds the host until
//!   the stream reaches it (the driver's pageable path, the staging ring), first waits
//!   for the stream's earlier work, bounded (pinned memory's copies return at once and
//!   skip this);
//! * an allocation that finds the device out of memory, whose retry waits for the
//!   streams of the scopes open on its thread (their frees may release what it needs);
//! * a device's blocking calls (`upload_vec` and the like) once its housekeeping stream
//!   waits for such a scope's stream (a `CudaSlice` of it converted with
//!   `DeviceVec::from_cudarc`);
//! * the calls that wait for the whole device, a [`ManagedVec`](crate::ManagedVec)'s
//!   drop (`cuMemFree`),
//!   [`Device::trim_pinned_memory`](crate::Device::trim_pinned_memory) (`cuMemFreeHost`)
//!   and the drop of the last clone of a [`Device`](crate::Device) (its pinned memory
//!   and its modules: another handle of the GPU than the scope's), which first wait for
//!   the streams of the scopes open on their thread;
//! * [`Stream::run_owned`](crate::Stream::run_owned), whose end is no synchronisation,
//!   waits for its closure's collectives before it returns (only the thread that issued
//!   them may abort their communicator).
//!
//! A thread that computes on the host does not wait, so its watches are asked by the
//! **watchdog** meanwhile, a thread of the process (`memory/watched_streams.rs`; named
//! `stream-core-watchdog`, started by the first scope that issues a collective; its
//! markers are recorded by `stream-core-markers`, started at the first) that every
//! 10 ms looks at the watched streams whose thread is not waiting and, for one
//! still busy, asks its watches as that thread's wait would, counting the time it has
//! been busy unattended with no progress (an event it records on the stream tells when
//! the work queued before it has completed; the count then starts again, so a stream its
//! thread keeps feeding is not taken for a hang unless more than the timeout's worth of
//! work is queued ahead): a collective past its timeout, or one NCCL reports failed, is
//! aborted there (every NCCL call on a communicator enters an abort handshake, so that
//! the abort is made only between the owner's calls: `driver/abort_handshake.rs`), and
//! the scope's next wait or its end returns the error (`STREAM_CORE_NCCL_WATCHDOG=0`
//! leaves the watchdog out: such a collective is then checked at its thread's next wait
//! only). A call above that waits for the whole device, made on another thread, first
//! waits on the host for the other threads' watched streams, so for the watchdog; when
//! even an abort cannot drain one (a call
//! stuck inside NCCL), [`Device::trim_pinned_memory`](crate::Device::trim_pinned_memory)
//! frees nothing and returns
//! [`Error::HeldUpByAnotherThread`](crate::Error::HeldUpByAnotherThread) once the
//! collective is past its timeout by the watchdog's grace (5 s), and the drops, which
//! cannot return it, wait in the driver. Other calls (new streams and devices, blocking
//! copies, `trim_memory`, `alloc_managed`) do not wait for the stall at all
//! (`scope/outstanding/tests/other_threads.rs`, `beside_another_threads_stall.rs`).
//!
//! Such a wait's error is returned by the scope's end again: the abort drained the
//! stream, but the collective did not complete. Data that crosses the bus every step
//! belongs in a [`PinnedBuffer`](crate::PinnedBuffer) made once (a pageable copy waits
//! for the stream's earlier work first): the `expert_parallel` example's
//! step took 358-387 us with its 1 MiB of tokens and results pageable, 170-185 us
//! pinned (two H200s, one process), and constant data is uploaded once.
//!
//! Not bounded either: a call that NCCL itself blocks inside while it waits for a
//! peer. Communicators are made in NCCL's blocking mode (as PyTorch's default), where
//! making one (and splitting one, [`Communicator::split`]) waits for every rank, and the
//! first collective that needs a connection
//! NCCL has not set up yet (NCCL sets them up lazily) waits for the peer inside the
//! call. A rank that dies between the rendezvous and that point leaves the others
//! waiting there. NCCL's non-blocking mode would bound those waits too; measured on two
//! H200s, it made every small all-reduce wait for NCCL's background thread (8 B: 0.14x
//! of blocking calls' bandwidth, enqueue 1.34x), so no communicator stays in it.
//! [`Communicator::join_within`] uses it only to be made: the wait for every rank is
//! bounded (a rank that never comes is [`Error::JoinTimedOut`](crate::Error::JoinTimedOut)
//! at the limit), and the member it returns is an ordinary blocking one, split from the
//! non-blocking one (on two H200s, ~100 ms against ~40 ms for `join`, warm).
//!
//! # Lengths that disagree across ranks
//!
//! Every rank makes the matching call with the same lengths (the same counts, for
//! [`Scope::all_to_all_v`](crate::Scope::all_to_all_v)), the same element type,
//! reduction and root (a [`PreMulSum`] on every rank where one is used; each rank's
//! factor is its own). Each rank's own buffers are checked against its own lengths;
//! what else keeps a disagreement from writing past a buffer depends on where the ranks
//! are:
//!
//! * **A rank and itself.** NCCL copies a send to the rank itself into the receive it
//!   pairs it with using the send's length (measured: 1016 elements written past an
//!   8-element receive). Both are this thread's calls in one group, so they are paired
//!   here as NCCL pairs them, and the half that disagrees is refused with
//!   [`Error::LengthMismatch`](crate::Error::LengthMismatch) before NCCL sees it; so is
//!   an `all_to_all_v` whose counts for the rank itself differ.
//! * **Ranks of one process** (one thread each through [`Communicator::join`], one
//!   thread for all through [`Communicator::for_devices`], and the parts of their
//!   splits). NCCL may reach these ranks' buffers directly (what
//!   `NCCL_P2P_DIRECT_DISABLE` documents it forbids), so their calls are compared
//!   before they are issued: numbered as NCCL matches them (collectives in order, a
//!   send with its receive in order per pair of ranks), the first call of each number
//!   recorded, every later one compared with it. One that disagrees is not issued and
//!   returns [`Error::RanksDisagree`](crate::Error::RanksDisagree); instead its rank
//!   issues the recorded call on scratch memory of its own (zeros where it sends), so
//!   that the other rank's call completes rather than waiting forever, possibly inside
//!   NCCL, which sets up a collective's connections inside its first call. Every rank
//!   of the process then reports the disagreement at its scope's end and refuses every
//!   later call: the received values are not a result. Inside a group (a program's
//!   own [`fn@group`], and the one `all_to_all` and `all_to_all_v` open) NCCL uses the
//!   stand-in's scratch memory only from the group's end on, so the group keeps it
//!   until then, and an exchange goes on with its other pairs after a refused one, so
//!   that no call of the other rank is left without a partner. A member alone in its
//!   process compares nothing: one branch. The comparison costs ~65 ns a call on an
//!   H200 host (a lock and a few lookups): where one thread issues many small calls
//!   (two GPUs' `all_to_all` of 32 KiB per rank, ~22 µs and 8 NCCL calls a group, host
//!   bound) that is ~2-4 % of the time; a rank per process pays none of it.
//! * **Ranks of different processes.** NCCL reaches no user buffer across processes
//!   unless the buffer was registered with it (`ncclCommRegister`, `ncclMemAlloc`,
//!   collectives captured in CUDA graphs while `NCCL_GRAPH_REGISTER` is on), which this
//!   crate never does (it captures collectives only with that variable `0`, see
//!   [`Capture::all_reduce`](crate::Capture::all_reduce)): each rank's
//!   kernels copy between its own buffers, with its own lengths, and NCCL's staging
//!   buffers. Ranks that disagree write nothing past their own buffers and none waits
//!   past its timeout, but they are not always told: measured on 2x H200 (NCCL 2.28.3,
//!   lengths four times apart, both ways round), an all_reduce or all_gather timed out
//!   on both ranks (the abort, an `Err`), a broadcast on the rank that was not its
//!   root, while the root's returned `Ok`, and a send with a shorter or longer receive
//!   returned `Ok` on both (the receive holding as much of the send as fit, then zeros)
//!   (`test_nccl_peer_faults`). Lengths across processes are the program's to agree
//!   on, as in every NCCL program; this crate cannot see the other process's.
//!
//! # Overlapping a collective with computation
//!
//! A collective on a fork's child runs beside the parent's kernels, as DDP overlaps a
//! gradient's all-reduce with the rest of the backward pass. The gradient is lent to
//! the fork, so nothing on the parent can read or overwrite it before the join, which
//! orders the parent's later work after the sum. Make the child's stream the device's
//! most urgent ([`Device::new_stream_with_priority`](crate::Device::new_stream_with_priority)):
//! a kernel that fills the GPU otherwise keeps NCCL's blocks from starting until its
//! own have run, and the step takes as long as without the overlap. Measured on two
//! H200s (`bench --case nccl`, a 64 MiB all-reduce beside a kernel as long): 811 us per
//! step with the all-reduce between the kernels, 827 us on a second stream of the
//! default priority, 600 us on an urgent one; ours took 0.988x-1.009x the time of the
//! same raw calls in every such row, 8 MiB to 256 MiB, across runs.
//! In a CUDA graph, record the branch with
//! [`Capture::fork_with_priority`](crate::Capture::fork_with_priority): a captured
//! node otherwise runs at its replay stream's priority, and the overlap is lost. The
//! `data_parallel` example trains a two-layer model this way, issued or replayed, one
//! process or one per GPU.
//!
//! ```no_run
//! use stream_core::{nccl::{Communicator, Sum}, scope, Device, Error, Scope};
//! # fn rest_of_backward<'s>(_: &'s Scope<'s, '_>) -> stream_core::Result<()> { Ok(()) }
//! # fn main() -> stream_core::Result<()> {
//! let device = Device::new(0)?;
//! let comm = Communicator::for_devices(std::slice::from_ref(&device))?.remove(0);
//! let stream = device.new_stream()?;
//! let urgent = device.new_stream_with_priority(*device.stream_priorities()?.start())?;
//! scope(&stream, |s| {
//!     let mut grad = s.alloc_zeroed::<f32>(1 << 20)?; // the last layer's gradient
//!     s.fork(&urgent, (&mut grad,), |c, (mut grad,)| {
//!         c.all_reduce_in_place(&comm, &mut grad, Sum)?; // on `urgent`
//!         rest_of_backward(s) // on `stream`, meanwhile
//!     })?;
//!     // Joined: `grad` holds the sum from here on.
//!     Ok::<_, Error>(())
//! })?;
//! # Ok(()) }
//! ```
//!
//! A helper generic over the scope's lifetimes takes the communicator for `'env`, as it
//! takes host memory: `fn step<'s, 'env>(s: &'s Scope<'s, 'env>, comm: &'env
//! Communicator, ...)`. Inside the helper's fork the child's brand is only known to lie
//! within `'env`, so a `&'s Communicator` does not reach the child's collectives.
//!
//! # One process driving several GPUs: load every kernel first
//!
//! CUDA loads a kernel at its first launch (lazy loading, the default since CUDA 12.2),
//! and the load waits for the kernels running on its GPU, on every stream ("Lazy
//! Loading", "Possible issues": concurrent execution). In one process, a GPU running a
//! collective or a receive that waits for another GPU's part is not idle until that
//! part is launched; when the thread that would launch it is itself loading a kernel,
//! neither goes on, for good: the threads are inside the driver, where no
//! communicator's timeout reaches. Seen with the `pipeline_parallel` example on two
//! H200s (NCCL 2.28.3): stage 1 received a micro-batch, then launched an SGEMM of a
//! shape new to it, while stage 0 launched its own new SGEMM before the send; 4 of 9
//! runs in one process hung there. Symmetric steps, where every rank launches the same
//! kernels before the same collective, did not hang (`data_parallel` 10 runs,
//! `expert_parallel` 4), but nothing rules it out. So a program whose threads drive
//! several GPUs (one each through [`Communicator::join`]) launches each kernel it uses
//! once on every device before the first collective, as that example's `warm_up` does
//! (8 runs after: none hung), or runs with `CUDA_MODULE_LOADING=EAGER` (6 runs without
//! the warm-up: none hung), or runs one process per GPU under a launcher ([`World`]).
//! For kernels declared with `#[kernel]`,
//! [`Device::prepare_kernels`](crate::Device::prepare_kernels) loads every function of
//! their modules at once; a library such as cuBLAS picks its kernel by shape, so each
//! shape is launched once. One thread driving every GPU through
//! [`Communicator::for_devices`] launches every part of a collective at its group's
//! end, before anything else, so no part waits for a thread that is loading.
//!
//! # In CUDA graphs
//!
//! A [`Capture`](crate::Capture) records collectives with the same methods as a scope
//! (`g.all_reduce(&comm, ...)`), checked the same way; each replay runs them, for the
//! cost of one launch, with [`Scope::replay_with`](crate::Scope::replay_with), which
//! borrows the communicators as a scope's own collectives do and bounds the scope's
//! end by their watches. On two H200s, a step of 32 all-reduces of 64 KiB (one rank)
//! replays in 42 us, as raw NCCL captured by hand (43 us), against 196 us for the calls
//! one by one. The graph keeps its communicators; a collective is recorded only where no
//! peer can reach this rank's buffers during replays with lengths it did not agree to
//! (see [`Capture::all_reduce`](crate::Capture::all_reduce)); ranks of one process have
//! each replay's calls compared by the ledger, as a scope's. Inside a [`fn@group`] opened
//! in captures, the group's methods take a capture where they take a scope
//! ([`GroupTarget`]): paired sends and receives are captured so, and one thread
//! captures the communicators of [`Communicator::for_devices`], a capture per device
//! (see [`Group`]); replays of a graph per device chained without host waits
//! ([`Scope::replay_again_with`](crate::Scope::replay_again_with)) keep the devices in
//! step, as a training loop needs.
//!
//! # Launchers
//!
//! [`World::from_env`] reads what `torchrun`, Slurm's `srun`, the `mpirun` of Open MPI,
//! MPICH, Intel MPI (both through Hydra) and MVAPICH2, HPE Cray PALS's `mpiexec` and
//! Flux's `flux run` set ([`Launcher`]);
//! [`World::communicator`] has rank 0 make the [`UniqueId`] and hand it to the others
//! over TCP (see [`World`] for the address), or uses NCCL's own bootstrap when
//! `NCCL_COMM_ID` is set.
//!
//! Owns: communicators, unique ids, the typed elements and reductions (`PreMulSum`
//! among them), collectives and groups, collectives recorded into a capture and
//! `Scope::replay_with`, the ledger of one process's ranks and its stand-ins, the
//! launcher's world and its rendezvous.
//! Uses: `driver/` (NCCL calls), `graph/` (a capture's scope, a graph's communicators),
//! `scope/` (the stream, the scope's end), `memory/` (views), `device/`, `error`.

mod all_to_all;
mod barrier;
mod captured;
mod collective;
mod communicator;
mod element;
mod gather_scatter;
mod group;
mod group_target;
mod ledger;
mod pre_mul_sum;
mod rendezvous;
mod request;
mod self_pairs;
mod slurm;
mod stand_in;
mod unique_id;
mod world;

pub use communicator::{Communicator, DEFAULT_TIMEOUT};
pub use element::{Avg, Max, Min, NcclElement, Prod, ReduceOp, Sum};
pub use group::{group, Group};
pub use group_target::GroupTarget;
pub use pre_mul_sum::PreMulSum;
pub use unique_id::UniqueId;
pub use world::{Launcher, World};

/// `true` when the NCCL library can be loaded on this machine (without loading it for
/// good); a program can choose a one-GPU path without it.
pub fn is_available() -> bool {
    crate::driver::nccl::library_present()
}

/// NCCL's version as `(major, minor, patch)`, e.g. `(2, 28, 5)`.
pub fn version() -> crate::Result<(u32, u32, u32)> {
    let code = crate::driver::nccl::version()?.max(0) as u32;
    // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9 (X*1000 + Y*100 + Z before).
    Ok(if code >= 10000 {
        (code / 10000, (code % 10000) / 100, code % 100)
    } else {
        (code / 1000, (code % 1000) / 100, code % 100)
    })
}
