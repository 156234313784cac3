//! [`group`] and [`Group`]: several collectives issued together (NCCL's group calls), as
//! a closure, so the group's end cannot be forgotten, and with borrows that last until
//! that end, when NCCL enqueues them.

use std::cell::Cell;
use std::marker::PhantomData;

use super::request::{issue, read, write, Operands, Request};
use super::{Communicator, NcclElement, ReduceOp};
use crate::driver::nccl::{group_end, group_start};
use crate::error::{Error, Result};
use crate::memory::{DeviceMemory, DeviceMemoryMut};
use crate::scope::Scope;

thread_local! {
    /// `true` while [`group`] runs its closure on this thread (NCCL's groups are per
    /// thread).
    static OPEN: Cell<bool> = const { Cell::new(false) };
}

/// `true` while a [`group`] is open on this thread.
#[inline]
pub(crate) fn is_open() -> bool {
    OPEN.with(Cell::get)
}

/// Runs `f` inside an NCCL group (`ncclGroupStart` before, `ncclGroupEnd` after, also
/// when `f` fails or panics) and returns what it returned, or the group end's error.
///
/// The collectives issued on the [`Group`] inside are enqueued together at the end:
/// this is how one thread drives communicators of several devices
/// ([`Communicator::for_devices`]), and how sends and receives pair up. Their buffers
/// stay borrowed until the end, so none can be read, written or dropped before NCCL has
/// enqueued the operations that use them.
///
/// Refused with [`Error::NcclGroup`] inside another group on this thread (an inner
/// group's end would not enqueue anything, yet would release its borrows), and a
/// scope's own collective methods are refused inside a group for the same reason.
///
/// ```no_run
/// use stream_core::{nccl::{self, Communicator, Sum}, scope, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let devices = [Device::new(0)?, Device::new(1)?];
/// let comms = Communicator::for_devices(&devices)?;
/// let (s0, s1) = (devices[0].new_stream()?, devices[1].new_stream()?);
/// scope(&s0, |a| {
///     scope(&s1, |b| {
///         let mut x = a.upload(&[1.0f32; 256])?;
///         let mut y = b.upload(&[2.0f32; 256])?;
///         nccl::group(|g| {
///             g.all_reduce_in_place(a, &comms[0], &mut x, Sum)?;
///             g.all_reduce_in_place(b, &comms[1], &mut y, Sum)
///         })?; // both hold 3.0 once the scopes' streams get there
///         Ok::<_, Error>(())
///     })
/// })?;
/// # Ok(()) }
/// ```
pub fn group<'env, F, R, E>(f: F) -> std::result::Result<R, E>
where
    F: for<'g> FnOnce(&'g Group<'g, 'env>) -> std::result::Result<R, E>,
    E: From<Error>,
{
    if is_open() {
        return Err(E::from(Error::NcclGroup {
            reason: "nccl::group was called inside another nccl::group on this thread: issue \
                     every collective of the group on the outer one",
        }));
    }
    group_start().map_err(E::from)?;
    let end = GroupEnd::open();
    let group = Group {
        _group: PhantomData,
        _env: PhantomData,
        _one_thread: PhantomData,
    };
    let out = f(&group);
    let ended = end.finish();
    match (out, ended) {
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(E::from(e)),
        (Ok(v), Ok(())) => Ok(v),
    }
}

/// Ends the group: [`finish`](Self::finish) on return, `Drop` on unwind. It lives in
/// [`group`]'s frame, so the group's borrows outlive it.
struct GroupEnd;

impl GroupEnd {
    fn open() -> Self {
        super::self_pairs::clear();
        OPEN.with(|open| open.set(true));
        GroupEnd
    }

    fn finish(self) -> Result<()> {
        std::mem::forget(self);
        OPEN.with(|open| open.set(false));
        super::self_pairs::clear();
        let ended = group_end();
        super::ledger::group_ended(&ended);
        ended
    }
}

impl Drop for GroupEnd {
    fn drop(&mut self) {
        // Unwinding: NCCL enqueues the collectives issued so far (their buffers are still
        // borrowed here); the panic goes on, and the scopes' ends wait for them.
        OPEN.with(|open| open.set(false));
        super::self_pairs::clear();
        super::ledger::group_ended(&group_end());
    }
}

/// An open NCCL group (see [`group`]): its methods are the collectives of
/// [`Scope`](crate::Scope), each with the scope whose stream it runs on, and with
/// borrows for `'g`, the rest of the group. Neither `Send` nor `Sync`: NCCL's groups
/// belong to one thread.
pub struct Group<'g, 'env: 'g> {
    _group: PhantomData<&'g mut &'g ()>,
    _env: PhantomData<&'env mut &'env ()>,
    _one_thread: PhantomData<*const ()>,
}

impl<'g> Group<'g, '_> {
    /// [`Scope::all_reduce`], issued at the group's end.
    pub fn all_reduce<'s, T: NcclElement>(
        &'g self,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        op: impl ReduceOp<T>,
    ) -> Result<()> {
        issue(
            s,
            comm,
            Request::all_reduce(Operands::Apart(read(send), write(recv)), op),
            Some(self),
        )
    }

    /// [`Scope::all_reduce_in_place`], issued at the group's end.
    pub fn all_reduce_in_place<'s, T: NcclElement>(
        &'g self,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
        op: impl ReduceOp<T>,
    ) -> Result<()> {
        issue(
            s,
            comm,
            Request::all_reduce(Operands::InPlace(write(buf)), op),
            Some(self),
        )
    }

    /// [`Scope::broadcast`], issued at the group's end.
    pub fn broadcast<'s, T: NcclElement>(
        &'g self,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        root: usize,
    ) -> Result<()> {
        issue(
            s,
            comm,
            Request::broadcast(Operands::Apart(read(send), write(recv)), root)?,
            Some(self),
        )
    }

    /// [`Scope::broadcast_in_place`], issued at the group's end.
    pub fn broadcast_in_place<'s, T: NcclElement>(
        &'g self,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
        root: usize,
    ) -> Result<()> {
        issue(
            s,
            comm,
            Request::broadcast(Operands::InPlace(write(buf)), root)?,
            Some(self),
        )
    }

    /// [`Scope::reduce`], issued at the group's end.
    pub fn reduce<'s, T: NcclElement>(
        &'g self,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        op: impl ReduceOp<T>,
        root: usize,
    ) -> Result<()> {
        issue(
            s,
            comm,
            Request::reduce(Operands::Apart(read(send), write(recv)), op, root)?,
            Some(self),
        )
    }

    /// [`Scope::reduce_in_place`], issued at the group's end.
    pub fn reduce_in_place<'s, T: NcclElement>(
        &'g self,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
        op: impl ReduceOp<T>,
        root: usize,
    ) -> Result<()> {
        issue(
            s,
            comm,
            Request::reduce(Operands::InPlace(write(buf)), op, root)?,
            Some(self),
        )
    }

    /// [`Scope::all_gather`], issued at the group's end.
    pub fn all_gather<'s, T: NcclElement>(
        &'g self,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        issue(
            s,
            comm,
            Request::all_gather(Operands::Apart(read(send), write(recv))),
            Some(self),
        )
    }

    /// [`Scope::all_gather_in_place`], issued at the group's end.
    pub fn all_gather_in_place<'s, T: NcclElement>(
        &'g self,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        issue(
            s,
            comm,
            Request::all_gather(Operands::InPlace(write(buf))),
            Some(self),
        )
    }

    /// [`Scope::reduce_scatter`], issued at the group's end.
    pub fn reduce_scatter<'s, T: NcclElement>(
        &'g self,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        op: impl ReduceOp<T>,
    ) -> Result<()> {
        issue(
            s,
            comm,
            Request::reduce_scatter(Operands::Apart(read(send), write(recv)), op),
            Some(self),
        )
    }

    /// [`Scope::reduce_scatter_in_place`], issued at the group's end.
    pub fn reduce_scatter_in_place<'s, T: NcclElement>(
        &'g self,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
        op: impl ReduceOp<T>,
    ) -> Result<()> {
        issue(
            s,
            comm,
            Request::reduce_scatter(Operands::InPlace(write(buf)), op),
            Some(self),
        )
    }

    /// [`Scope::send`], issued at the group's end (a send to this rank itself pairs with
    /// a [`recv`](Self::recv) of the same group).
    pub fn send<'s, T: NcclElement>(
        &'g self,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        buf: &'g impl DeviceMemory<'s, T>,
        peer: usize,
    ) -> Result<()> {
        issue(s, comm, Request::send(read(buf), peer)?, Some(self))
    }

    /// [`Scope::recv`], issued at the group's end.
    pub fn recv<'s, T: NcclElement>(
        &'g self,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
        peer: usize,
    ) -> Result<()> {
        issue(s, comm, Request::recv(write(buf), peer)?, Some(self))
    }
}
