//! [`GroupTarget`]: what a [`Group`]'s collective is issued through, a scope (run on its
//! stream at the group's end) or a graph capture (recorded into its graph at the group's
//! end). Captures inside a group are how one thread records the collectives of
//! [`Communicator::for_devices`] (one capture per device, the group inside them all),
//! and how a capture records sends and receives that must be paired.

use super::captured::record_in_group;
use super::group::Group;
use super::request::{issue, Request};
use super::{Communicator, NcclElement};
use crate::error::Result;
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
