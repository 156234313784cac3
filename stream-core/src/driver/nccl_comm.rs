//! A communicator as an RAII handle ([`RawComm`]), the part of it any thread may use
//! ([`CommControl`]: its error state and abort) and what keeps it for a CUDA graph
//! ([`GraphKeep`]), and [`enqueue`], each collective and point-to-point call on it as an
//! `unsafe fn` whose contract is NCCL's rule for its buffers.
//!
//! NCCL's contract for buffers (its user guide, "CUDA stream semantics"): a collective
//! or a send/receive is enqueued on the given stream like a kernel, reads its send buffer
//! and writes its receive buffer while it runs there, and the buffers may be reused or
//! freed once it has completed on that stream. This crate never registers buffers with
//! NCCL (`ncclCommRegister`, `ncclMemAlloc`), so no peer keeps a reference to them after
//! the operation has completed on this rank's stream.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cudarc::nccl::{result, sys};

use super::abort_handshake::{AbortHandshake, HoldsHandshake, InCall};
use super::context::PrimaryContext;
use super::nccl::{
    check, group_end, group_start, require_library, require_split, Collective, DataType, DevicePtr,
    RawUniqueId, Reduction, NCCL_SPLIT_NOCOLOR,
};
use super::nccl_abort::abort_elsewhere;
use super::nccl_group;
use super::stream::RawStream;
use crate::error::{Error, Result};

/// The part of a communicator that any thread may use at any time: its error state and
/// its abort (NCCL's user guide: `ncclCommGetAsyncError` and `ncclCommAbort` may be
/// called from another thread while an operation on the communicator is blocked or
/// running, which is how a watchdog ends a hang). Every call on the communicator enters
/// its [`AbortHandshake`], so that an abort from any thread is made only while no call
/// is under way and none can start after it (`abort_handshake.rs`). It owns the communicator: the last
/// reference destroys it (`ncclCommDestroy`), or nothing more once it was aborted
/// (`ncclCommAbort` frees it), and a communicator that reported an error is aborted
/// rather than destroyed, since destroying waits for operations a failed peer never
/// finishes.
pub(crate) struct CommControl {
    comm: sys::ncclComm_t,
    context: Arc<PrimaryContext>,
    /// Marked by [`abort`](Self::abort), which NCCL makes (freeing the communicator) once
    /// no call is under way.
    handshake: AbortHandshake,
    /// What to wait for before this communicator is destroyed (not before an abort,
    /// which may come when a peer died): for one made by `join_within`, the abort of its
    /// parent on a thread of its own (`nccl_abort::wait_for_aborts`).
    before_destroy: Option<fn()>,
    /// How many CUDA graphs (and captures under way) keep this communicator
    /// ([`GraphKeep`]): while there are any, an abort runs on a thread of its own.
    /// Shared with the abort, which may run after this value's last use.
    graphs: Arc<AtomicUsize>,
}

impl HoldsHandshake for CommControl {
    fn handshake(&self) -> &AbortHandshake {
        &self.handshake
    }
}

// SAFETY: `comm` is passed to NCCL only inside the handshake (no call under way when the
// abort frees it, none after), by `ncclCommGetAsyncError`, which NCCL documents as
// callable from any thread concurrently with the communicator's other calls, by the
// abort, and to `ncclCommDestroy` in `Drop` (one thread, no other reference left); the
// calls that NCCL requires of one thread at a time go through `RawComm`, which is not
// `Sync`. The handshake and the count are atomic and the context is `Send + Sync`.
unsafe impl Send for CommControl {}
// SAFETY: as for `Send`.
unsafe impl Sync for CommControl {}

impl CommControl {
    /// The error NCCL's background threads found on this communicator since it was made
    /// (a peer that failed, a network error), without blocking: `Ok(())` while there is
    /// none (`ncclCommGetAsyncError`); an error once it is aborted.
    pub(crate) fn async_error(&self) -> Result<()> {
        let Some(_call) = AbortHandshake::enter(self) else {
            return Err(aborted());
        };
        let mut error = sys::ncclResult_t::ncclSuccess;
        // SAFETY: `self.comm` is a live communicator: the call is inside the handshake
        // (`_call`), so its abort, which frees it, has not run and cannot until the call
        // has left; `error` is a live value NCCL writes.
        let status = unsafe { sys::ncclCommGetAsyncError(self.comm, &raw mut error) }.result();
        check("ncclCommGetAsyncError", status, Some(self.comm))?;
        check(
            "a collective (reported by ncclCommGetAsyncError)",
            error.result(),
            Some(self.comm),
        )
    }

    /// Aborts the communicator (`ncclCommAbort`): its operations still queued or running
    /// on any stream stop, so those streams can be synchronised, and NCCL frees it.
    /// Nothing may be enqueued on it afterwards (every call checks); aborting again does
    /// nothing.
    ///
    /// While a CUDA graph that captured collectives on it exists ([`GraphKeep`]), NCCL's
    /// abort sets the flags that stop its kernels at once but then waits until every
    /// such graph has been destroyed; that abort runs on a thread of its own
    /// (`nccl_abort.rs`), and returns here once it is started: the streams drain all the
    /// same, and the graphs, which no longer replay, finish it when they are dropped.
    ///
    /// Asked for while this thread has a group open, the abort is made after the group's
    /// end, also on a thread of its own (`nccl_group.rs` says why); the communicator
    /// counts as aborted at once.
    ///
    /// Any thread may ask (a watchdog's, while the owner computes on the host): the
    /// handshake makes the abort once no call on the communicator is under way, on this
    /// thread, or on the owner's when its call, or its group's end, returns.
    pub(crate) fn abort(&self) {
        // A handle is not `Send`: the abort carries its address.
        let comm = self.comm.expose_provenance();
        let (context, graphs) = (Arc::clone(&self.context), Arc::clone(&self.graphs));
        self.handshake
            .abort(move || make_abort(comm, &context, &graphs));
    }

    /// `true` once [`abort`](Self::abort) was asked for (every later call is refused).
    #[inline(always)]
    pub(crate) fn is_aborted(&self) -> bool {
        self.handshake.is_aborted()
    }
}

/// NCCL's abort of the communicator at address `comm`, run by the handshake once no call
/// on it is under way and none can start (on whichever thread gets there: the one that
/// asked, or the one whose call left last). While that thread has a group open the abort
/// waits for the group's end, and while a graph keeps the communicator it runs on a
/// thread of its own (see [`CommControl::abort`]).
fn make_abort(comm: usize, context: &Arc<PrimaryContext>, graphs: &AtomicUsize) {
    let comm: sys::ncclComm_t = std::ptr::with_exposed_provenance_mut(comm);
    let later = {
        let context = Arc::clone(context);
        move || abort_elsewhere(comm, &context)
    };
    if nccl_group::defer_abort_if_in_group(later).is_none() {
        return;
    }
    if graphs.load(Ordering::Acquire) > 0 {
        abort_elsewhere(comm, context);
        return;
    }
    let _bound = context.bind();
    // SAFETY: `comm` is a live communicator: the handshake runs this once, after the
    // abort was marked (no call enters after it) and once no call is under way, and only
    // the abort frees it (`Drop` destroys only one never aborted). No group is open on
    // this thread (checked above), so NCCL holds none of its calls for a later group end.
    let _ = unsafe { result::comm_abort(comm) };
}

impl Drop for CommControl {
    fn drop(&mut self) {
        if self.is_aborted() {
            return;
        }
        if self.async_error().is_err() {
            self.abort();
            return;
        }
        if let Some(wait) = self.before_destroy {
            wait();
        }
        let _bound = self.context.bind();
        // SAFETY: `self.comm` is a live communicator, destroyed once, here, by the last
        // reference. Every operation on it was enqueued on a scope's stream, and the
        // scope keeps a reference until it has synchronised that stream, so none is
        // pending.
        let _ = unsafe { result::comm_destroy(self.comm) };
    }
}

/// A communicator kept by a CUDA graph (or a capture under way) that recorded
/// collectives on it: it is not destroyed before the graph, whose nodes name it (NCCL's
/// destruction would wait for the graph anyway), and its abort, while any is kept, runs
/// on a thread of its own (see [`CommControl::abort`]). Dropped after the graph.
pub(crate) struct GraphKeep(Arc<CommControl>);

impl GraphKeep {
    pub(crate) fn new(control: &Arc<CommControl>) -> Self {
        control.graphs.fetch_add(1, Ordering::AcqRel);
        GraphKeep(Arc::clone(control))
    }

    /// The communicator kept.
    pub(crate) fn control(&self) -> &Arc<CommControl> {
        &self.0
    }
}

impl Drop for GraphKeep {
    fn drop(&mut self) {
        self.0.graphs.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A communicator: one rank's member of a clique of ranks, on the device whose primary
/// context it was made in, through which collectives are enqueued. `Send`, not `Sync`:
/// NCCL's calls on one communicator must not run concurrently (its user guide:
/// communicators are not thread-safe), so only the thread that holds it enqueues.
pub(crate) struct RawComm {
    control: Arc<CommControl>,
    /// Not `Sync` (see the type's docs).
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
}

impl RawComm {
    pub(super) fn made(comm: sys::ncclComm_t, context: &Arc<PrimaryContext>) -> Self {
        Self::owning(comm, context, None)
    }

    /// `comm`, a made communicator nothing else uses, on the device of `context`, which
    /// runs `before_destroy` before it is destroyed.
    pub(super) fn owning(
        comm: sys::ncclComm_t,
        context: &Arc<PrimaryContext>,
        before_destroy: Option<fn()>,
    ) -> Self {
        RawComm {
            control: Arc::new(CommControl {
                comm,
                context: Arc::clone(context),
                handshake: AbortHandshake::default(),
                before_destroy,
                graphs: Arc::new(AtomicUsize::new(0)),
            }),
            _not_sync: std::marker::PhantomData,
        }
    }

    /// This rank's member of a communicator of `size` ranks named by `id`, as rank
    /// `rank`, on the device of `context`. Blocks until every rank has joined.
    pub(crate) fn init_rank(
        context: &Arc<PrimaryContext>,
        size: i32,
        id: &RawUniqueId,
        rank: i32,
    ) -> Result<Self> {
        require_library()?;
        let _bound = context.bind()?;
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: `comm` is a live pointer NCCL writes the new communicator to; NCCL
        // uses the device of the context bound above.
        let status = unsafe { result::comm_init_rank(&raw mut comm, size, id.0, rank) };
        check("ncclCommInitRank", status, None)?;
        Ok(RawComm::made(comm, context))
    }

    /// One communicator per device of `devices` (ordinals), ranks in that order, for one
    /// process that drives them all; `contexts[i]` is the primary context of
    /// `devices[i]`.
    pub(crate) fn init_all(contexts: &[Arc<PrimaryContext>], devices: &[i32]) -> Result<Vec<Self>> {
        require_library()?;
        let count = c_int::try_from(devices.len()).unwrap_or(c_int::MAX);
        let mut comms: Vec<sys::ncclComm_t> = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `comms` has room for `devices.len()` communicators and `devices` holds
        // that many ordinals; NCCL writes one communicator per device.
        let status = unsafe { result::comm_init_all(comms.as_mut_ptr(), count, devices.as_ptr()) };
        check("ncclCommInitAll", status, None)?;
        Ok(comms
            .into_iter()
            .zip(contexts)
            .map(|(comm, context)| RawComm::made(comm, context))
            .collect())
    }

    /// Splits the communicators of `members` (every member of one communicator that this
    /// thread drives, or one member of a communicator whose other ranks call this in
    /// their own processes or threads): member `i` joins the new communicator of the
    /// members, of every rank, that pass the same `colors[i]`, ranked by `keys[i]`
    /// (`ncclCommSplit`); with `None` (`NCCL_SPLIT_NOCOLOR`) it takes part and joins
    /// none. Several members are split inside one NCCL group, as NCCL requires of one
    /// thread. Blocks until every rank of the communicator has called it. Each result is
    /// the new member with its rank and size, or `None`.
    pub(crate) fn split(
        members: &[&RawComm],
        colors: &[Option<u16>],
        keys: &[i32],
    ) -> Result<Vec<Option<(RawComm, usize, usize)>>> {
        require_split("ncclCommSplit")?;
        // Inside every member's handshake until the split's own group has ended.
        let calls: Option<Vec<InCall<&CommControl>>> = members
            .iter()
            .map(|m| AbortHandshake::enter(&*m.control))
            .collect();
        let Some(_calls) = calls else {
            return Err(Error::CommunicatorAborted {
                reason: "it was aborted, so it cannot be split",
            });
        };
        let grouped = members.len() > 1;
        if grouped {
            group_start()?;
        }
        let mut made: Vec<sys::ncclComm_t> = vec![std::ptr::null_mut(); members.len()];
        let mut first_error = Ok(());
        for (((member, color), key), new) in members.iter().zip(colors).zip(keys).zip(&mut made) {
            let color = color.map_or(NCCL_SPLIT_NOCOLOR, c_int::from);
            let called = member.context().bind().and_then(|_bound| {
                // SAFETY: `member.raw()` is a live communicator (inside its handshake:
                // `_calls`, so its abort, which frees it, waits until after this call);
                // `new` is a live slot NCCL writes the new communicator (or
                // null, for no color) to; a null config asks for the defaults. The
                // symbol exists: the version was checked above.
                let status = unsafe {
                    sys::ncclCommSplit(member.raw(), color, *key, new, std::ptr::null_mut())
                }
                .result();
                check("ncclCommSplit", status, Some(member.raw()))
            });
            if first_error.is_ok() {
                first_error = called;
            }
        }
        if grouped {
            // The group is ended whatever happened inside it.
            let ended = group_end();
            if first_error.is_ok() {
                first_error = ended;
            }
        }
        let results: Vec<Option<RawComm>> = made
            .into_iter()
            .zip(members)
            .map(|(comm, member)| (!comm.is_null()).then(|| RawComm::made(comm, member.context())))
            .collect();
        // A failure leaves the communicators made so far to their owners' drops.
        first_error?;
        results
            .into_iter()
            .map(|new| {
                new.map(|comm| comm.rank_and_size().map(|(r, n)| (comm, r, n)))
                    .transpose()
            })
            .collect()
    }

    /// This member's rank and its communicator's size (`ncclCommUserRank`,
    /// `ncclCommCount`).
    fn rank_and_size(&self) -> Result<(usize, usize)> {
        let _call = enter(self)?;
        let (mut rank, mut count): (c_int, c_int) = (0, 0);
        // SAFETY: `self.raw()` is a live communicator (just made, and inside its
        // handshake: `_call`); NCCL writes `rank`, a live local.
        let ranked = unsafe { sys::ncclCommUserRank(self.raw(), &raw mut rank) }.result();
        check("ncclCommUserRank", ranked, Some(self.raw()))?;
        // SAFETY: as above; NCCL writes `count`.
        let counted = unsafe { sys::ncclCommCount(self.raw(), &raw mut count) }.result();
        check("ncclCommCount", counted, Some(self.raw()))?;
        Ok((
            usize::try_from(rank).unwrap_or(0),
            usize::try_from(count).unwrap_or(0),
        ))
    }

    /// The part any thread may use: error state and abort.
    #[inline(always)]
    pub(crate) fn control(&self) -> &Arc<CommControl> {
        &self.control
    }

    /// The device context the communicator was made in.
    #[inline(always)]
    pub(crate) fn context(&self) -> &Arc<PrimaryContext> {
        &self.control.context
    }

    /// `true` when the communicator was made in `stream`'s context (so on its device:
    /// one primary context per device at a time, which both hold alive).
    #[inline(always)]
    pub(crate) fn is_of(&self, stream: &RawStream) -> bool {
        Arc::ptr_eq(self.context(), stream.context())
    }

    /// The handle, for the collectives below and the reductions made on it
    /// (`nccl_reduction.rs`).
    #[inline(always)]
    pub(super) fn raw(&self) -> sys::ncclComm_t {
        self.control.comm
    }
}

/// The stream as NCCL's `cudaStream_t` (the same handle as the driver's `CUstream`).
fn nccl_stream(stream: &RawStream) -> sys::cudaStream_t {
    stream.raw().cast()
}

/// Enters a call on `comm` (its handshake): `Err` once an abort was asked for (NCCL
/// frees an aborted communicator: this is what keeps it from being used), else the guard
/// to keep until NCCL is done with the call. NCCL's own error state is the caller's to
/// ask (`nccl/` does on the first call and every 64th); a call on a communicator in that
/// state fails in NCCL, it does not misbehave.
#[inline(always)]
pub(super) fn enter(comm: &RawComm) -> Result<InCall<&CommControl>> {
    AbortHandshake::enter(&*comm.control).ok_or_else(aborted)
}

/// A collective's call inside its communicator's handshake, until NCCL is done with it:
/// when the call returns, or, inside an open group, at the group's end, when NCCL makes
/// the group's calls (`nccl_group::keep_until_end`). In a group, the first call on a
/// communicator enters its handshake and is kept until the end; the later ones on it are
/// inside that (an `all_to_all` of two ranks makes four calls per rank: one entry and
/// one count of the communicator, where each call took its own, and no allocation: the
/// kept call holds the control as an `Arc<dyn HoldsHandshake>`, in a list that keeps its
/// capacity).
#[allow(
    dead_code,
    reason = "each guard is held for its drop, which leaves the handshake"
)]
enum CollectiveCall<'a> {
    Now(InCall<&'a CommControl>),
    /// The group's first call on the communicator `.1` names (`nccl_group::keeps`).
    Grouped(nccl_group::GroupedCall, usize),
    /// A later call on it in the same group: inside the handshake the group keeps.
    Covered,
}

impl<'a> CollectiveCall<'a> {
    #[inline(always)]
    fn enter(comm: &'a RawComm) -> Result<Self> {
        if !nccl_group::is_open() {
            return AbortHandshake::enter(&*comm.control)
                .map(CollectiveCall::Now)
                .ok_or_else(aborted);
        }
        let key = Arc::as_ptr(&comm.control) as usize;
        if nccl_group::keeps(key) {
            // The group keeps a call on this communicator inside its handshake until the
            // group's end, so no abort frees it before; a call after an abort was asked
            // for is refused, as the handshake refuses it.
            return match comm.control.handshake().is_aborted() {
                true => Err(aborted()),
                false => Ok(CollectiveCall::Covered),
            };
        }
        let holder: Arc<dyn HoldsHandshake> = Arc::clone(&comm.control) as _;
        AbortHandshake::enter(holder)
            .map(|call| CollectiveCall::Grouped(call, key))
            .ok_or_else(aborted)
    }

    /// The call returned: it leaves the handshake, or is kept for the group's end.
    #[inline(always)]
    fn returned(self) {
        if let CollectiveCall::Grouped(call, key) = self {
            nccl_group::keep_until_end(key, call);
        }
    }
}

/// The error of a use of an aborted communicator.
#[cold]
pub(crate) fn aborted() -> Error {
    Error::CommunicatorAborted {
        reason: "it was aborted",
    }
}

/// Enqueues `collective` on `stream` through `comm`: `count` elements of `datatype` per
/// rank (see [`Collective`] for which buffer holds how many).
///
/// # Safety
///
/// * `send` and `recv` are device memory of the communicator's device holding at least
///   [`Collective::elements`] elements of `datatype` each (a buffer the operation does
///   not use may be 0), allocated until the operation has completed on `stream`; no
///   other work writes `send` or touches `recv` meanwhile; they are the same address
///   (in place) or do not overlap.
/// * Every bit pattern of `datatype` is a valid value of the type `recv` holds.
/// * `comm` was made in `stream`'s context ([`RawComm::is_of`]).
/// * Outside a group, the call is enqueued on `stream` when it returns; inside one
///   (between [`group_start`] and [`group_end`]), at `group_end`, so the memory stays
///   allocated and untouched until after that and until the operation has completed.
///
/// (Every rank must make the matching call, or the ranks wait for each other: a hang,
/// not a memory error, which the caller bounds with the communicator's abort. A
/// [`Reduction::PreMulSum`](super::nccl::Reduction) NCCL does not know on `comm`, or
/// made for another `datatype`, is an `Err` of NCCL's checks, not a memory error.)
#[inline(always)] // the caller's `collective` is a constant: one arm is left
pub(crate) unsafe fn enqueue(
    collective: Collective,
    send: DevicePtr,
    recv: DevicePtr,
    count: usize,
    datatype: DataType,
    comm: &RawComm,
    stream: &RawStream,
) -> Result<()> {
    let call = CollectiveCall::enter(comm)?;
    let (send, recv) = (send as *const c_void, recv as *mut c_void);
    let (raw, on) = (comm.raw(), nccl_stream(stream));
    let (name, status) = match collective {
        // SAFETY: this function's contract (`comm` is of the stream's context); `comm` is
        // live (inside its handshake: `call`, kept until NCCL has made the call, at the
        // group's end inside one), the stream is live (borrowed).
        Collective::AllReduce(Reduction::Builtin(op)) => ("ncclAllReduce", unsafe {
            result::all_reduce(send, recv, count, datatype, op, raw, on)
        }),
        // SAFETY: as above; a reduction NCCL made takes the same call (NCCL checks that
        // it is of `comm` and `datatype`).
        Collective::AllReduce(Reduction::PreMulSum(op)) => ("ncclAllReduce", unsafe {
            op.all_reduce(send, recv, count, datatype, raw, on)
        }),
        // SAFETY: as above.
        Collective::Broadcast { root } => ("ncclBroadcast", unsafe {
            result::broadcast(send, recv, count, datatype, root, raw, on)
        }),
        // SAFETY: as above.
        Collective::Reduce(Reduction::Builtin(op), root) => ("ncclReduce", unsafe {
            result::reduce(send, recv, count, datatype, op, root, raw, on)
        }),
        // SAFETY: as for the all-reduce with such a reduction.
        Collective::Reduce(Reduction::PreMulSum(op), root) => ("ncclReduce", unsafe {
            op.reduce(send, recv, count, datatype, root, raw, on)
        }),
        // SAFETY: as above.
        Collective::AllGather => ("ncclAllGather", unsafe {
            result::all_gather(send, recv, count, datatype, raw, on)
        }),
        // SAFETY: as above.
        Collective::ReduceScatter(Reduction::Builtin(op)) => ("ncclReduceScatter", unsafe {
            result::reduce_scatter(send, recv, count, datatype, op, raw, on)
        }),
        // SAFETY: as for the all-reduce with such a reduction.
        Collective::ReduceScatter(Reduction::PreMulSum(op)) => ("ncclReduceScatter", unsafe {
            op.reduce_scatter(send, recv, count, datatype, raw, on)
        }),
        // SAFETY: as above.
        Collective::Send { peer } => ("ncclSend", unsafe {
            result::send(send, count, datatype, peer, raw, on)
        }),
        // SAFETY: as above.
        Collective::Recv { peer } => ("ncclRecv", unsafe {
            result::recv(recv, count, datatype, peer, raw, on)
        }),
    };
    let checked = check(name, status, Some(raw));
    call.returned();
    checked
}
