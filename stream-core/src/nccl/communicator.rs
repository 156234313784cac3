//! [`Communicator`]: this process's member of an NCCL clique on one device, made for
//! several devices of this process at once ([`Communicator::for_devices`]) or as one
//! rank of many processes ([`Communicator::join`]), and the watch that bounds the wait
//! for its collectives. Splitting one into new communicators: `communicator/split.rs`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::captured::agree_each;
use super::ledger::{Agreement, Call, Ledger, Seat};
use super::UniqueId;
use crate::device::{Device, Stream};
use crate::driver::nccl_comm::{aborted, CommControl, RawComm};
use crate::error::{Error, Result};
use crate::memory::DeviceVec;
use crate::scope::{StreamWatch, Watch};

mod split;
#[cfg(test)]
mod tests;

/// How long a scope waits for a collective before it aborts the communicator, unless
/// [`Communicator::set_timeout`] or `STREAM_CORE_NCCL_TIMEOUT_S` says otherwise: ten
/// minutes, PyTorch's default for NCCL process groups.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// One rank of an NCCL communicator, on one device.
///
/// Collectives are methods of the [`Scope`](crate::Scope) whose stream they run on
/// (`s.all_reduce(&comm, &grad, &mut sum, Sum)`), or of a [`Group`](super::Group) for
/// several at once. A communicator is `Send` but not `Sync`: NCCL's calls on one
/// communicator must not run concurrently, so it is used from one thread at a time.
///
/// **Failure.** When a peer dies, hangs or never makes the matching call, a collective
/// never completes. The scope that issued it does not wait forever: at its end it
/// polls NCCL's error state and, once a failure is reported or the communicator's
/// [timeout](Self::set_timeout) has passed, aborts the communicator (which stops its
/// work on the stream) and returns [`Error::Nccl`] or [`Error::CollectiveTimedOut`].
/// From then on every use of the communicator is [`Error::CommunicatorAborted`],
/// before anything is enqueued; every rank must make a new one.
pub struct Communicator {
    raw: RawComm,
    device: Device,
    rank: usize,
    size: usize,
    watch: Arc<CommWatch>,
    /// The same watch, as the scopes keep it (made once, not per collective).
    scope_watch: Watch,
    /// Made with its siblings by [`for_devices`](Self::for_devices) (or split from them by
    /// [`split_all`](Self::split_all)): one thread drives them all, so their collectives
    /// must be grouped (see `collective.rs`).
    grouped_only: bool,
    /// Shared by the members this process made together (`for_devices`, `split_all`):
    /// what [`split_all`](Self::split_all) checks to know they are one communicator.
    clique: Arc<()>,
    /// This member's place in the ledger of the communicator's members in this process,
    /// when there are others (see `ledger.rs`): their calls are compared before issue.
    seat: Option<Seat>,
    /// Collectives issued since NCCL's error state was last asked (see
    /// [`check_before_issue`](Self::check_before_issue)). Atomic only so that the
    /// compiler's error for a communicator shared between threads keeps naming the
    /// raw handle's marker; plain loads and stores, no read-modify-write.
    unasked: AtomicU32,
    /// What [`barrier`](Self::barrier) uses, made at its first call: a stream and the
    /// byte it all-reduces (a mutex, not a cell, for the same reason as `unasked`).
    pub(super) barrier: Mutex<Option<BarrierParts>>,
}

/// A barrier's stream and its one-byte token, kept by its communicator.
pub(super) struct BarrierParts {
    pub(super) stream: Stream,
    pub(super) token: DeviceVec<u8>,
}

/// A collective asks NCCL's error state once in this many calls: asking on every call
/// cost about 12 ns of a 4-byte all_reduce's 105 ns enqueue (1.23x of the raw call
/// against 1.11x, measured on an H200).
const ASK_NCCL_EVERY: u32 = 64;

impl Communicator {
    /// One communicator per device of `devices`, ranks `0..devices.len()` in that order,
    /// for one process (one thread) that drives them all (`ncclCommInitAll`). Their
    /// collectives are issued together inside [`nccl::group`](fn@super::group), one per
    /// device; outside a group they are refused with [`Error::NcclGroup`], since an
    /// ungrouped collective on one of them would block waiting for its siblings.
    ///
    /// The devices must be distinct (NCCL refuses two ranks on one GPU). For one thread per
    /// GPU, make one [`UniqueId`] and [`join`](Self::join) from each thread instead.
    /// Communicators are made outside [`nccl::group`](fn@super::group)
    /// ([`Error::NcclGroup`] inside one, here and in [`join`](Self::join) and
    /// [`join_within`](Self::join_within)).
    pub fn for_devices(devices: &[Device]) -> Result<Vec<Communicator>> {
        refuse_inside_a_group()?;
        if devices.is_empty() {
            return Err(Error::InvalidRank { rank: 0, size: 0 });
        }
        let ordinals = devices
            .iter()
            .map(|d| {
                i32::try_from(d.ordinal()).map_err(|_| Error::InvalidRank {
                    rank: d.ordinal(),
                    size: 0,
                })
            })
            .collect::<Result<Vec<i32>>>()?;
        let contexts: Vec<_> = devices
            .iter()
            .map(|d| Arc::clone(&d.inner.context))
            .collect();
        let raws = RawComm::init_all(&contexts, &ordinals)?;
        let size = devices.len();
        let clique = Arc::new(());
        Ok(raws
            .into_iter()
            .zip(devices)
            .zip(Ledger::clique(size))
            .enumerate()
            .map(|(rank, ((raw, device), seat))| {
                Communicator::made(raw, device, rank, size, size > 1, Arc::clone(&clique), seat)
            })
            .collect())
    }

    /// This process's member, as rank `rank` of `size`, of the communicator that `id`
    /// names, on `device` (`ncclCommInitRank`). Blocks until every rank has joined,
    /// for good if one never does: [`join_within`](Self::join_within) gives up.
    /// [`Error::InvalidRank`] unless `rank < size`; [`Error::NcclNotFound`] without NCCL.
    ///
    /// Ranks that are threads of one process launch every kernel they use once on their
    /// device before their first collective (or the process runs with
    /// `CUDA_MODULE_LOADING=EAGER`): a kernel's first launch may wait for its GPU to be
    /// idle, and can then wait for good (see [One process driving several
    /// GPUs](super#one-process-driving-several-gpus-load-every-kernel-first)).
    pub fn join(device: &Device, id: &UniqueId, rank: usize, size: usize) -> Result<Communicator> {
        Self::join_as(device, id, rank, size, None)
    }

    /// [`join`](Self::join) that gives up when the ranks have not all joined within
    /// `limit`: [`Error::JoinTimedOut`], with nothing made, instead of waiting inside
    /// NCCL for a rank that died, hangs or was never started (what `ncclCommInitRank`
    /// would do, where no timeout reaches). Every rank of the communicator calls it, not
    /// `join` (the member is made by a split, which every rank takes part in: a rank that
    /// called `join` instead leaves the others at their limit).
    ///
    /// The member is made in NCCL's non-blocking mode, which lets the wait be bounded,
    /// then split into an ordinary blocking communicator, whose collectives cost what
    /// [`join`](Self::join)'s do (the non-blocking one is aborted on a thread of its
    /// own). On two H200s it took ~100 ms where `join` took ~40 ms (a process's second
    /// communicator; the first pays for NCCL's own start either way). Needs NCCL 2.18 or
    /// newer ([`Error::Library`] before).
    ///
    /// That abort took up to a second on rank 0 (0.1 ms on rank 1), and must not run
    /// beside NCCL's or the driver's teardown (a process that exited during it was
    /// killed by SIGSEGV): dropping the member, and the process's exit, wait for it,
    /// for at most five seconds (an abort whose peer died may never finish; it is left
    /// running then). A member dropped after it finished waits for nothing.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use stream_core::{nccl::{Communicator, UniqueId}, Device, Error};
    /// # fn main() -> stream_core::Result<()> {
    /// let device = Device::new(0)?;
    /// let id = UniqueId::new()?; // handed to rank 1 by the program's own means
    /// match Communicator::join_within(&device, &id, 0, 2, Duration::from_secs(30)) {
    ///     Ok(comm) => println!("rank {} of {}", comm.rank(), comm.size()),
    ///     Err(Error::JoinTimedOut { timeout }) => eprintln!("rank 1 never came ({timeout:?})"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn join_within(
        device: &Device,
        id: &UniqueId,
        rank: usize,
        size: usize,
        limit: Duration,
    ) -> Result<Communicator> {
        Self::join_as(device, id, rank, size, Some(limit))
    }

    /// [`join`](Self::join), bounded by `limit` when there is one.
    fn join_as(
        device: &Device,
        id: &UniqueId,
        rank: usize,
        size: usize,
        limit: Option<Duration>,
    ) -> Result<Communicator> {
        refuse_inside_a_group()?;
        if rank >= size {
            return Err(Error::InvalidRank { rank, size });
        }
        let too_many = || Error::InvalidRank { rank, size };
        let (rank_i32, size_i32) = (
            i32::try_from(rank).map_err(|_| too_many())?,
            i32::try_from(size).map_err(|_| too_many())?,
        );
        // Taken before NCCL's call, so that every member this process makes with `id`
        // holds it once any of them is made (NCCL returns only when every rank joined).
        let seat = Ledger::joined(id.to_bytes(), size, rank);
        let context = &device.inner.context;
        let raw = match limit {
            None => RawComm::init_rank(context, size_i32, &id.0, rank_i32)?,
            Some(limit) => RawComm::init_rank_within(context, size_i32, &id.0, rank_i32, limit)?,
        };
        let seat = seat.with_siblings(std::time::Duration::ZERO)?;
        Ok(Communicator::made(
            raw,
            device,
            rank,
            size,
            false,
            Arc::new(()),
            seat,
        ))
    }

    fn made(
        raw: RawComm,
        device: &Device,
        rank: usize,
        size: usize,
        grouped_only: bool,
        clique: Arc<()>,
        seat: Option<Seat>,
    ) -> Self {
        let watch = Arc::new(CommWatch {
            control: Arc::clone(raw.control()),
            timeout_ms: AtomicU64::new(timeout_from_env().as_millis() as u64),
            ledger: seat.as_ref().map(|s| Arc::clone(s.ledger())),
        });
        Communicator {
            raw,
            device: device.clone(),
            rank,
            size,
            scope_watch: Watch::new(Arc::clone(&watch) as Arc<dyn StreamWatch>),
            watch,
            grouped_only,
            clique,
            seat,
            unasked: AtomicU32::new(ASK_NCCL_EVERY),
            barrier: Mutex::new(None),
        }
    }

    /// This member's rank, `0..size()`.
    #[inline]
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    #[inline]
    pub fn size(&self) -> usize {
        self.size
    }

    /// The device this member runs on.
    #[inline]
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// How long a scope waits for this communicator's collectives before aborting it.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.watch.timeout_ms.load(Ordering::Relaxed))
    }

    /// Sets [`timeout`](Self::timeout) (counted from when the scope's end starts
    /// waiting), for the collectives of scopes that end from now on.
    pub fn set_timeout(&self, timeout: Duration) {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.watch.timeout_ms.store(ms, Ordering::Relaxed);
    }

    /// `Ok(())` while NCCL reports no failure on this communicator
    /// (`ncclCommGetAsyncError`); the failure, or [`Error::CommunicatorAborted`] after an
    /// abort of this member or of another rank of this process, or
    /// [`Error::RanksDisagree`] after ranks of this process disagreed, otherwise. Never
    /// blocks.
    pub fn check(&self) -> Result<()> {
        self.raw.control().async_error()?;
        match self.seat.as_ref().and_then(|s| s.ledger().broken()) {
            Some(disagreement) => Err(disagreement),
            None => Ok(()),
        }
    }

    /// Compares `call`, this member's next, with the calls of the same number by the
    /// other members of this process (see `ledger.rs`): what to do with it. A member
    /// alone in this process has nothing to compare: [`Agreement::Issue`].
    #[inline]
    pub(crate) fn agree(&self, call: impl FnOnce() -> Call) -> Agreement {
        match &self.seat {
            None => Agreement::Issue,
            Some(seat) => agree_in(seat, self.raw.control(), call()),
        }
    }

    /// Before a replay of a graph whose calls on this communicator are `calls`:
    /// compares each, in order, with the other members' calls of the same numbers, as
    /// [`agree`](Self::agree) does for a scope's; on a disagreement the member is
    /// stranded (the other members' calls that agreed so far would wait for this replay)
    /// and the error returned. A member alone in this process compares nothing.
    pub(crate) fn agree_replay(&self, calls: &[Call]) -> Result<()> {
        match &self.seat {
            None => Ok(()),
            Some(seat) => agree_each(calls, |call| agree_in(seat, self.raw.control(), call))
                .inspect_err(|_| seat.strand()),
        }
    }

    /// Called when the stand-in [`agree`](Self::agree) asked for was not issued.
    #[cold]
    pub(crate) fn strand(&self) {
        if let Some(seat) = &self.seat {
            seat.strand();
        }
    }

    /// Called when an issue that [`agree`](Self::agree) recorded failed in NCCL: the
    /// ledger's numbering may no longer be NCCL's, so every later call is refused.
    #[cold]
    pub(crate) fn issue_failed(&self, error: &Error) {
        if let Some(seat) = &self.seat {
            seat.break_with(error);
        }
    }

    /// The check a collective makes before it is issued: the abort flag on every call
    /// (in `driver/nccl.rs`, the use-after-abort guard), and NCCL's error state on the
    /// first call and every [`ASK_NCCL_EVERY`]-th after it. A failure NCCL reports in
    /// between is caught at the latest by the scope's end, which asks every millisecond
    /// while it waits and aborts the communicator, after which every call is refused.
    #[inline]
    pub(crate) fn check_before_issue(&self) -> Result<()> {
        let unasked = self.unasked.load(Ordering::Relaxed);
        if unasked < ASK_NCCL_EVERY {
            self.unasked.store(unasked + 1, Ordering::Relaxed);
            return Ok(());
        }
        self.unasked.store(0, Ordering::Relaxed);
        // NCCL's state only: a disagreement between this process's ranks is the
        // ledger's to report, after it has numbered the call (and asked for a stand-in
        // where another rank's call waits for this one).
        self.raw.control().async_error()
    }

    /// Aborts the communicator (`ncclCommAbort`): its collectives still queued or running
    /// stop, their receive buffers hold unspecified values, and every later use is
    /// [`Error::CommunicatorAborted`]. What a program does when it learns, by its own
    /// means, that a peer is gone.
    ///
    /// Inside an [`nccl::group`](fn@super::group), it counts as aborted at once (the
    /// group's later calls on it are refused), and NCCL's abort is made right after the
    /// group's end, once NCCL has enqueued what the group held, which it then stops:
    /// aborted inside the group, NCCL would free the communicator at the group's end before
    /// launching the group's calls on it.
    pub fn abort(&self) {
        self.watch.abort();
    }

    /// `true` once aborted (by [`abort`](Self::abort) or by a scope's timeout).
    pub fn is_aborted(&self) -> bool {
        self.raw.control().is_aborted()
    }

    /// The raw communicator, for the collectives.
    #[inline]
    pub(crate) fn raw(&self) -> &RawComm {
        &self.raw
    }

    /// An address that is this member's alone while it lives (its control's), for the
    /// per-thread records of a group (`group_target.rs`, `self_pairs.rs`).
    #[inline]
    pub(crate) fn key(&self) -> usize {
        Arc::as_ptr(self.raw.control()) as usize
    }

    /// An address this process's members of one NCCL communicator share (NCCL's
    /// "clique", the ranks it launches together at a group's end): their ledger's when
    /// there are several, else this member's [`key`](Self::key). Wider than the `clique`
    /// field, which only the members made together share: members joined with one id on
    /// threads of their own share this too. Only compared while every member it is
    /// compared with is alive.
    #[inline]
    pub(crate) fn clique_key(&self) -> usize {
        match &self.seat {
            Some(seat) => Arc::as_ptr(seat.ledger()) as usize,
            None => self.key(),
        }
    }

    /// The watch a scope registers when it issues a collective through this.
    #[inline]
    pub(crate) fn watch(&self) -> &Watch {
        &self.scope_watch
    }

    /// `true` for a communicator of [`for_devices`](Self::for_devices) with siblings.
    #[inline]
    pub(crate) fn grouped_only(&self) -> bool {
        self.grouped_only
    }
}

/// [`Communicator::agree`] with a seat: out of line, so that a member alone in its
/// process does not carry it, but not `#[cold]`, since members of one process (threads,
/// `for_devices`) take it on every call.
#[inline(never)]
fn agree_in(seat: &Seat, control: &CommControl, call: Call) -> Agreement {
    // This member's own abort first, which the ledger reports as any member's.
    if control.is_aborted() {
        return Agreement::Refuse(aborted());
    }
    seat.agree(call)
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("device", &self.device.ordinal())
            .field("aborted", &self.is_aborted())
            .finish()
    }
}

/// [`Error::NcclGroup`] while a group is open on this thread: NCCL makes a communicator
/// asked for inside a group only at the group's end (a blocking one is refused every use
/// before; `join_within`'s bounded wait would see it never ready, then abort it on
/// another thread while the group still holds its making).
pub(super) fn refuse_inside_a_group() -> Result<()> {
    super::group::refuse_inside(
        "a communicator cannot be made inside nccl::group: NCCL would make it only at the \
         group's end, so make it before or after the group",
    )
}

/// `STREAM_CORE_NCCL_TIMEOUT_S` (seconds, fractions allowed) when it is a positive
/// number, else [`DEFAULT_TIMEOUT`].
fn timeout_from_env() -> Duration {
    std::env::var("STREAM_CORE_NCCL_TIMEOUT_S")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(DEFAULT_TIMEOUT)
}

/// What a scope's end consults while a collective of this communicator is on its
/// stream: NCCL's error state, and the time waited against the timeout. On either
/// failure it aborts the communicator, which lets the stream drain.
struct CommWatch {
    control: Arc<CommControl>,
    timeout_ms: AtomicU64,
    /// The ledger of the members of this process, when there are several: a
    /// disagreement between them is the scope's verdict once its work completed, and
    /// stops that work early when a call was left without a partner (stranded).
    ledger: Option<Arc<Ledger>>,
}

impl StreamWatch for CommWatch {
    fn may_object(&self) -> bool {
        // Only a member with partners in this process keeps a ledger (`ledger.rs`).
        self.ledger.is_some()
    }

    fn verdict(&self) -> Result<()> {
        // Not aborted: the work completed, and the partner's may still be finishing
        // (an abort frees the buffers its kernel reads and writes: on 2x H200 that hung
        // the partner). The ledger refuses every later call instead.
        match self.ledger.as_ref().and_then(|l| l.broken()) {
            Some(disagreement) => Err(disagreement),
            None => Ok(()),
        }
    }

    fn check(&self, waited: Duration) -> Result<()> {
        // NCCL's error state (an error once aborted), then what `overdue` finds.
        let given_up = self.control.async_error().err();
        match given_up.or_else(|| self.overdue(waited)) {
            Some(e) => {
                self.abort();
                Err(e)
            }
            None => Ok(()),
        }
    }

    fn overdue(&self, waited: Duration) -> Option<Error> {
        // Time and the ledger only: NCCL's error query is `check`'s (the watchdog asks
        // it). An aborted member's stream drains by itself.
        if self.control.is_aborted() {
            return None;
        }
        if let Some(disagreement) = self.ledger.as_ref().and_then(|l| l.stranded()) {
            return Some(disagreement);
        }
        let timeout = Duration::from_millis(self.timeout_ms.load(Ordering::Relaxed));
        (waited >= timeout).then_some(Error::CollectiveTimedOut { timeout })
    }
}

impl CommWatch {
    /// Aborts the member (see [`CommControl::abort`]), after telling the other members
    /// of this process, which cannot complete a collective without it
    /// ([`Ledger::aborted`]).
    fn abort(&self) {
        if let Some(ledger) = &self.ledger {
            ledger.aborted();
        }
        self.control.abort();
    }
}
