//! [`GroupTarget`]: what a [`Group`]'s collective is issued through, a scope (run on its
//! stream at the group's end) or a graph capture (recorded into its graph at the group's
//! end). Captures inside a group are how one thread records the collectives of
//! [`Communicator::for_devices`] (one capture per device, the group inside them all),
//! and how a capture records sends and receives that must be paired.
//!
//! The group open on this thread also remembers here which target each communicator's
//! calls went through (NCCL takes them all into one graph or none, and a clique's
//! communicators all captured or none), and which captures it recorded into, which fail
//! if its end fails.

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

use super::captured::record_in_group;
use super::group::Group;
use super::request::{issue, Request};
use super::{Communicator, NcclElement};
use crate::error::{Error, Result};
use crate::graph::Capture;
use crate::scope::Scope;
use crate::sealed::{self, Token};

/// Where a [`Group`]'s collective goes: a [`Scope`] (`s` in `scope(&stream, |s| ...)`),
/// whose stream runs it from the group's end on, or a graph [`Capture`] (`g` in
/// `device.capture(held, |g, views| ...)`), whose graph records it at the group's end
/// and runs it at each replay. Sealed.
///
/// Either must outlive the group (`'s: 'g` on every method of [`Group`]), so a capture
/// is still recording when NCCL enqueues at the group's end: the group is opened inside
/// the capture's closure (inside every capture's, for several devices), never around it.
/// `'c` is how long the communicator is borrowed: by a scope, as long as the scope (its
/// end may abort it, on the scope's thread), as a scope's own collectives borrow theirs;
/// by a capture, until the group's end (the graph keeps the communicator itself, as for
/// a capture's own collectives).
///
/// A helper that issues a step's grouped calls in a scope or records them in a capture:
///
/// ```no_run
/// use stream_core::nccl::{self, Communicator, Group, GroupTarget, Sum};
/// use stream_core::{DeviceMemory, DeviceMemoryMut, Device, Error};
///
/// /// Sends `out` to the next rank and receives the previous rank's into `into`, and
/// /// all-reduces `grads`, at `grp`'s end.
/// fn ring_step<'g, 's: 'g, 'c: 'g>(
///     grp: &'g Group<'g, '_>,
///     s: &'s impl GroupTarget<'s, 'c>,
///     comm: &'c Communicator,
///     out: &'g impl DeviceMemory<'s, f32>,
///     into: &'g mut impl DeviceMemoryMut<'s, f32>,
///     grads: &'g mut impl DeviceMemoryMut<'s, f32>,
/// ) -> stream_core::Result<()> {
///     let (rank, size) = (comm.rank(), comm.size());
///     grp.send(s, comm, out, (rank + 1) % size)?;
///     grp.recv(s, comm, into, (rank + size - 1) % size)?;
///     grp.all_reduce_in_place(s, comm, grads, Sum)
/// }
///
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let comm = Communicator::for_devices(&[dev.clone()])?.remove(0);
/// let mut grads = dev.alloc_vec::<f32>(1 << 20)?;
/// let (graph, ()) = dev.capture(&mut grads, |g, mut grads| {
///     let out = g.alloc_zeroed::<f32>(1024)?;
///     let mut into = g.alloc::<f32>(1024)?;
///     nccl::group(|grp| ring_step(grp, g, &comm, &out, &mut into, &mut grads))
/// })?;
/// # let _ = graph;
/// # Ok::<_, Error>(()) }
/// ```
///
/// A group opened around a capture does not compile: NCCL would record the collective
/// only at the group's end, after the capture has ended (see
/// `ui-tests/tests/ui/nccl/capture-opened-inside-group.rs`):
///
/// ```compile_fail,E0521
/// # use stream_core::nccl::{self, Communicator, Sum};
/// # use stream_core::{Device, DeviceVec, Error};
/// # fn f(device: &Device, comm: &Communicator, x: &mut DeviceVec<f32>) -> Result<(), Error> {
/// nccl::group(|grp| {
///     device
///         .capture(&mut *x, |g, mut x| grp.all_reduce_in_place(g, comm, &mut x, Sum))
///         .map(drop)
/// })
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a scope or a graph capture",
    label = "expected the scope (`s` in `scope(&stream, |s| ...)`) or a graph capture (`g` in `device.capture(held, |g, views| ...)`)"
)]
pub trait GroupTarget<'s, 'c>: sealed::Enqueuer {
    /// Issues `request` inside `group` (only this crate can call it).
    #[doc(hidden)]
    #[allow(
        private_interfaces,
        reason = "sealed: only this crate implements it, and only it can make the token"
    )]
    fn issue_in_group<'a, T: NcclElement>(
        &'s self,
        _: Token,
        comm: &Communicator,
        request: Request<'a, 's, T>,
        group: &'a Group<'a, '_>,
    ) -> Result<()>
    where
        's: 'a;
}

impl<'s> GroupTarget<'s, 's> for Scope<'s, '_> {
    /// A scope's own collective, issued on its stream at the group's end.
    #[inline(always)]
    #[allow(private_interfaces, reason = "see the trait")]
    fn issue_in_group<'a, T: NcclElement>(
        &'s self,
        _: Token,
        comm: &Communicator,
        request: Request<'a, 's, T>,
        group: &'a Group<'a, '_>,
    ) -> Result<()>
    where
        's: 'a,
    {
        issue(self, comm, request, Some(group))
    }
}

impl<'s, 'c> GroupTarget<'s, 'c> for Capture<'s> {
    /// Recorded into the capture's graph at the group's end.
    #[inline(always)]
    #[allow(private_interfaces, reason = "see the trait")]
    fn issue_in_group<'a, T: NcclElement>(
        &'s self,
        _: Token,
        comm: &Communicator,
        request: Request<'a, 's, T>,
        group: &'a Group<'a, '_>,
    ) -> Result<()>
    where
        's: 'a,
    {
        record_in_group(self, comm, request, group)
    }
}

thread_local! {
    /// Each communicator the group open on this thread issued a collective on (its
    /// [`Communicator::key`]), its clique ([`Communicator::clique_key`]) and what through:
    /// `None` for scopes, the graph's id for a capture. NCCL takes the calls of one group
    /// on a communicator either all on streams that do not capture or all into one graph
    /// ("Streams given to a communicator within a NCCL group must either be all
    /// uncaptured or all captured by the same graph", its `enqueue.cc`), and the
    /// communicators of one clique either all captured or none ("Either none or all
    /// communicators in a ncclGroup() can be CUDA graph captured", its `group.cc`: the
    /// group's end fails with `ncclInvalidUsage`, and the process, measured with two
    /// H200s and NCCL 2.28.9, then never exited).
    static TARGETS: RefCell<Vec<Claim>> = const { RefCell::new(Vec::new()) };

    /// Where the captures that recorded collectives in the group open on this thread
    /// learn that its end failed.
    static CAPTURES: RefCell<Vec<Arc<OnceLock<Error>>>> = const { RefCell::new(Vec::new()) };
}

/// A communicator's first call in the open group: see [`TARGETS`].
struct Claim {
    comm: usize,
    clique: usize,
    target: Option<u64>,
}

/// Before a collective of the open group on the communicator `comm` (its
/// [`Communicator::key`]), of the clique `clique`, through `target` (`None`: a scope;
/// `Some(id)`: the capture of graph `id`): [`Error::NcclGroup`] when the group issued on
/// `comm` through another target, or through a scope where a communicator of its clique
/// went through a capture or the other way round (see [`TARGETS`]), before NCCL or the
/// ledger sees the call.
pub(super) fn claim(comm: usize, clique: usize, target: Option<u64>) -> Result<()> {
    TARGETS.with(|claims| {
        let mut claims = claims.borrow_mut();
        if let Some(first) = claims.iter().find(|c| c.comm == comm) {
            return match first.target == target {
                true => Ok(()),
                false => Err(Error::NcclGroup {
                    reason: "one nccl::group issued collectives on one communicator through a \
                             scope and a capture, or through two captures: NCCL takes a \
                             communicator's calls of one group all into one graph or none, so \
                             use a group for each",
                }),
            };
        }
        let captured = target.is_some();
        if claims
            .iter()
            .any(|c| c.clique == clique && c.target.is_some() != captured)
        {
            return Err(Error::NcclGroup {
                reason: "one nccl::group issued collectives through a scope and through a \
                         capture on communicators of one clique (made together by \
                         Communicator::for_devices or split_all, or this process's members of \
                         one communicator): NCCL refuses a group that captures some of a \
                         clique's communicators and not the others, so issue all of theirs \
                         through captures (one per device) or all through scopes",
            });
        }
        claims.push(Claim {
            comm,
            clique,
            target,
        });
        Ok(())
    })
}

/// After a collective the open group recorded into a capture whose
/// `group_failure` (`graph/capture.rs`) is `failure`: if the group's end
/// fails, the capture fails too (NCCL may have left the call out of its graph).
pub(super) fn recorded_into(failure: &Arc<OnceLock<Error>>) {
    CAPTURES.with(|captures| {
        let mut captures = captures.borrow_mut();
        if !captures.iter().any(|c| Arc::ptr_eq(c, failure)) {
            captures.push(Arc::clone(failure));
        }
    });
}

/// What the group open on this thread remembered of its targets, forgotten at its start
/// and end; on a failed end each capture it recorded into is told.
pub(super) fn forget_targets(ended: &Result<()>) {
    TARGETS.with(|targets| targets.borrow_mut().clear());
    let captures = CAPTURES.with(|captures| std::mem::take(&mut *captures.borrow_mut()));
    if let Err(error) = ended {
        for failure in captures {
            let _ = failure.set(error.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{claim, forget_targets, recorded_into};
    use crate::Error;
    use std::sync::{Arc, OnceLock};

    /// A communicator's calls of one group go through one target: scopes (`None`) or one
    /// capture's graph; each communicator claims its own; the group's end forgets them.
    #[test]
    fn a_communicator_of_one_group_keeps_its_first_target() {
        forget_targets(&Ok(()));
        assert!(claim(1, 1, None).is_ok());
        assert!(claim(1, 1, None).is_ok());
        let capture_after_scopes = claim(1, 1, Some(7)).unwrap_err();
        assert!(
            matches!(&capture_after_scopes, Error::NcclGroup { reason }
                if reason.contains("one graph or none")),
            "{capture_after_scopes:?}"
        );
        assert!(claim(2, 2, Some(7)).is_ok());
        assert!(claim(2, 2, Some(7)).is_ok());
        assert!(matches!(claim(2, 2, Some(8)), Err(Error::NcclGroup { .. })));
        assert!(matches!(claim(2, 2, None), Err(Error::NcclGroup { .. })));
        forget_targets(&Ok(()));
        assert!(claim(1, 1, Some(8)).is_ok() && claim(2, 2, None).is_ok());
        forget_targets(&Ok(()));
    }

    /// The communicators of one clique go through captures all or none: after captures'
    /// calls on two of them (of two graphs, one per device), a scope's on a third is
    /// refused, and in another clique a capture's after a scope's; a refused call is not
    /// remembered, and the group's end forgets the rest.
    #[test]
    fn a_clique_is_captured_whole_or_not_at_all() {
        let (clique, other) = (100, 200);
        forget_targets(&Ok(()));
        assert!(claim(1, clique, Some(7)).is_ok());
        assert!(claim(2, clique, Some(8)).is_ok());
        let scope_after_captures = claim(3, clique, None).unwrap_err();
        assert!(
            matches!(&scope_after_captures, Error::NcclGroup { reason }
                if reason.contains("some of a clique's communicators")),
            "{scope_after_captures:?}"
        );
        assert!(claim(4, other, None).is_ok());
        assert!(matches!(
            claim(5, other, Some(7)),
            Err(Error::NcclGroup { .. })
        ));
        assert!(claim(3, clique, Some(9)).is_ok());
        forget_targets(&Ok(()));
        assert!(claim(3, clique, None).is_ok() && claim(5, other, Some(7)).is_ok());
        forget_targets(&Ok(()));
    }

    /// The captures a group recorded into learn of its failed end (each once), and of
    /// nothing when it ended well; a later group does not tell them again.
    #[test]
    fn a_failed_group_end_reaches_the_captures_it_recorded_into() {
        let (ok, failed) = (Arc::new(OnceLock::new()), Arc::new(OnceLock::new()));
        forget_targets(&Ok(()));
        recorded_into(&ok);
        forget_targets(&Ok(()));
        assert!(ok.get().is_none());
        recorded_into(&failed);
        recorded_into(&failed);
        forget_targets(&Err(Error::NcclGroup { reason: "the end" }));
        assert!(matches!(
            failed.get(),
            Some(Error::NcclGroup { reason: "the end" })
        ));
        assert_eq!(Arc::strong_count(&failed), 1, "the group kept the slot");
        forget_targets(&Err(Error::NcclGroup { reason: "another" }));
        assert!(ok.get().is_none());
    }
}
