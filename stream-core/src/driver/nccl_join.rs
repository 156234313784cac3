//! [`RawComm::init_rank_within`]: a member of a communicator made within a time limit.
//!
//! `ncclCommInitRank` blocks until every rank has joined; a rank that died after the
//! launcher started it leaves the others there for good, where nothing can reach them.
//! NCCL's non-blocking mode (a config with `blocking = 0`) returns at once and lets the
//! caller poll `ncclCommGetAsyncError` until the communicator is ready, and abort it
//! (`ncclCommAbort`, which NCCL documents for a communicator still being made) when it
//! is not ready in time. But a non-blocking communicator makes every later call
//! asynchronous too, which cost small collectives most of their bandwidth (measured on
//! two H200s: an 8-byte all-reduce at 0.14x of a blocking communicator's). So the
//! bounded member is made in two steps, each bounded: a non-blocking communicator, then
//! a blocking one split from it with every rank in one color (`ncclCommSplit` with a
//! config of its own; the parent is non-blocking, so the split is too, and is polled the
//! same way), after which the non-blocking one is aborted, on a thread of its own (it
//! took up to a second), which the member's destruction and the process's exit wait for
//! ([`wait_for_aborts`]). The member returned is a plain blocking communicator,
//! as `ncclCommInitRank` would have made.

use std::ffi::{c_int, c_uint};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::nccl::{result, sys};

use super::context::PrimaryContext;
use super::nccl::{check, nccl_error, require_split, RawUniqueId};
use super::nccl_abort::{abort_elsewhere, wait_for_aborts};
use super::nccl_comm::RawComm;
use crate::error::{Error, Library, Result};

/// The first fields of NCCL's `ncclConfig_t`, as NCCL 2.14 defined it (the version that
/// brought `blocking`). NCCL reads a config by its `size` and `version` fields (its
/// `NCCL_CONFIG_INITIALIZER` sets both, so that a program built against one NCCL runs
/// with a later one): it copies `size` bytes over its own defaults and ignores what an
/// older version did not have. Written here because cudarc's `ncclConfig_t` differs with
/// the CUDA version whose bindings the program chose.
#[repr(C)]
struct Config {
    size: usize,
    magic: c_uint,
    version: c_uint,
    blocking: c_int,
}

impl Config {
    /// `NCCL_CONFIG_INITIALIZER` for these fields, with `blocking` set.
    fn new(blocking: bool) -> Self {
        Config {
            size: size_of::<Config>(),
            magic: 0xcafe_beef,
            version: 2_14_00, // NCCL_VERSION(2, 14, 0)
            blocking: c_int::from(blocking),
        }
    }

    /// The pointer NCCL's calls take (they read it only).
    fn as_raw(&mut self) -> *mut sys::ncclConfig_t {
        std::ptr::from_mut(self).cast()
    }
}

/// A communicator being made, aborted unless [`into_raw`](Self::into_raw) takes it.
struct Making {
    comm: sys::ncclComm_t,
}

impl Making {
    /// Polls NCCL until the communicator is made (`ncclCommGetAsyncError` no longer
    /// reports `ncclInProgress`), or `deadline` passes: then `Err(JoinTimedOut)`.
    fn wait(&self, what: &'static str, deadline: Option<Instant>, limit: Duration) -> Result<()> {
        let mut pause = Duration::from_micros(50);
        loop {
            let mut state = sys::ncclResult_t::ncclSuccess;
            // SAFETY: `self.comm` is a communicator NCCL returned and nothing freed (a
            // `Making` aborts it only in its drop); `state` is a live value NCCL writes.
            let asked = unsafe { sys::ncclCommGetAsyncError(self.comm, &raw mut state) }.result();
            check("ncclCommGetAsyncError", asked, Some(self.comm))?;
            match state.result() {
                Ok(result::NcclStatus::InProgress) => {}
                Ok(_) => return Ok(()),
                Err(e) => return Err(nccl_error(what, e.0, Some(self.comm))),
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::JoinTimedOut { timeout: limit });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    /// The communicator, no longer aborted on drop.
    fn into_raw(self) -> sys::ncclComm_t {
        let comm = self.comm;
        std::mem::forget(self);
        comm
    }
}

impl Drop for Making {
    fn drop(&mut self) {
        // SAFETY: `self.comm` is a communicator NCCL returned, not freed before (this
        // drop runs once, and `into_raw` skips it); NCCL documents `ncclCommAbort` for a
        // communicator whose non-blocking creation has not finished, and it frees it.
        let _ = unsafe { result::comm_abort(self.comm) };
    }
}

impl RawComm {
    /// [`init_rank`](RawComm::init_rank) that gives up after `limit`: this rank's member
    /// of the communicator of `size` ranks named by `id`, as rank `rank`, on the device
    /// of `context`, or [`Error::JoinTimedOut`] when the ranks have not all joined
    /// within `limit` (see the module docs). Needs NCCL 2.18 (`ncclCommSplit`).
    pub(crate) fn init_rank_within(
        context: &Arc<PrimaryContext>,
        size: i32,
        id: &RawUniqueId,
        rank: i32,
        limit: Duration,
    ) -> Result<Self> {
        // A limit past what `Instant` can hold is no limit.
        let deadline = Instant::now().checked_add(limit);
        require_split("Communicator::join_within")?;
        let _bound = context.bind()?;
        // On the heap, and leaked unless the member is made: NCCL may write the split's
        // new communicator (and read the configs) from its own thread until the split
        // completes, after an early return here.
        let mut slots = Box::new(Slots {
            parent: std::ptr::null_mut(),
            child: std::ptr::null_mut(),
            non_blocking: Config::new(false),
            blocking: Config::new(true),
        });
        match make(&mut slots, context, size, id, rank, deadline, limit) {
            Ok(child) => Ok(RawComm::owning(child, context, Some(wait_for_aborts))),
            Err(e) => {
                Box::leak(slots);
                Err(e)
            }
        }
    }
}

/// What NCCL writes (the communicators) and reads (their configs) while it makes them.
struct Slots {
    parent: sys::ncclComm_t,
    child: sys::ncclComm_t,
    non_blocking: Config,
    blocking: Config,
}

/// The two steps of [`RawComm::init_rank_within`], with the device's context bound.
fn make(
    slots: &mut Slots,
    context: &Arc<PrimaryContext>,
    size: i32,
    id: &RawUniqueId,
    rank: i32,
    deadline: Option<Instant>,
    limit: Duration,
) -> Result<sys::ncclComm_t> {
    // SAFETY: `slots.parent` is a live slot NCCL writes the new communicator to, and
    // `slots.non_blocking` a live, initialised config it reads by its `size` (see
    // `Config`); both stay allocated until NCCL is done with them (the caller leaks
    // `slots` unless this returns `Ok`). NCCL uses the device of the context bound.
    let status = unsafe {
        sys::ncclCommInitRankConfig(
            &raw mut slots.parent,
            size,
            id.0,
            rank,
            slots.non_blocking.as_raw(),
        )
    }
    .result();
    if slots.parent.is_null() {
        check("ncclCommInitRankConfig", status, None)?;
        return Err(none_made("ncclCommInitRankConfig"));
    }
    let parent = Making { comm: slots.parent };
    check("ncclCommInitRankConfig", status, Some(parent.comm))?;
    parent.wait("ncclCommInitRankConfig", deadline, limit)?;

    // SAFETY: `parent.comm` is a made communicator (waited for above), not shared;
    // `slots.child` is a live slot NCCL writes the new communicator to (once the split
    // completes: the parent is non-blocking), and `slots.blocking` a config read as
    // above, both allocated until NCCL is done. Every rank passes color 0 and its own
    // rank as the key, so the new communicator has the same ranks in the same order.
    let status = unsafe {
        sys::ncclCommSplit(
            parent.comm,
            0,
            rank,
            &raw mut slots.child,
            slots.blocking.as_raw(),
        )
    }
    .result();
    check("ncclCommSplit", status, Some(parent.comm))?;
    parent.wait("ncclCommSplit", deadline, limit)?;
    if slots.child.is_null() {
        return Err(none_made("ncclCommSplit"));
    }
    let child = Making { comm: slots.child };
    child.wait("ncclCommSplit", deadline, limit)?;
    // The split is done, and the child does not share the parent's resources (the config
    // leaves `splitShare` at its default, 0): the parent is aborted, on a thread of its
    // own, since that took up to a second on the rank that made the id (measured on two
    // H200s, NCCL 2.28.3; rank 1's took 0.1 ms, and the whole join ~100 ms).
    abort_elsewhere(parent.into_raw(), context);
    Ok(child.into_raw())
}

#[cold]
fn none_made(call: &'static str) -> Error {
    Error::from(Library {
        call,
        message: "reported success but returned no communicator".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::Config;
    use std::mem::offset_of;

    /// The fields sit where NCCL's `ncclConfig_t` has them (`size_t size; unsigned int
    /// magic; unsigned int version; int blocking;` on a 64-bit host), and the
    /// initialiser's values are NCCL's.
    #[test]
    fn the_config_is_laid_out_as_ncclconfig_t_begins() {
        assert_eq!(offset_of!(Config, size), 0);
        assert_eq!(offset_of!(Config, magic), 8);
        assert_eq!(offset_of!(Config, version), 12);
        assert_eq!(offset_of!(Config, blocking), 16);
        assert_eq!(size_of::<Config>(), 24);
        let config = Config::new(false);
        assert_eq!(
            (config.size, config.magic, config.version, config.blocking),
            (24, 0xcafe_beef, 21400, 0)
        );
        assert_eq!(Config::new(true).blocking, 1);
    }
}
