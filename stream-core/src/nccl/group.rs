//! [`group`] and [`Group`]: several collectives issued together (NCCL's group calls), as
//! a closure, so the group's end cannot be forgotten, and with borrows that last until
//! that end, when NCCL enqueues them.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::ptr::NonNull;

use super::group_target::GroupTarget;
use super::request::{read, write, Operands, Request};
use super::{Communicator, NcclElement, ReduceOp};
use crate::driver::nccl::{group_end, group_start};
use crate::error::{Error, Result};
use crate::memory::{DeviceMemory, DeviceMemoryMut};
use crate::sealed::TOKEN;

/// `true` while a [`group`] is open on this thread (NCCL's groups are per thread): the
/// driver's record, set by `ncclGroupStart` and cleared by `ncclGroupEnd`.
pub(crate) use crate::driver::nccl_group::is_open;

/// [`Error::NcclGroup`] saying `reason` while a group is open on this thread: for what
/// must happen before or after a group, never inside one.
pub(crate) fn refuse_inside(reason: &'static str) -> Result<()> {
    if is_open() {
        return Err(Error::NcclGroup { reason });
    }
    Ok(())
}

thread_local! {
    /// What the group open on this thread keeps until its end ([`Group::keep`]).
    static KEPT: RefCell<Vec<Kept>> = const { RefCell::new(Vec::new()) };
}

/// One value [`Group::keep`] moved to the heap, with the function that drops it and
/// frees its box (the value's type, lifetimes included, erased into a function pointer).
/// Only [`end`] drops these, after NCCL's group end, from [`KEPT`] (both private).
struct Kept {
    at: NonNull<()>,
    free: unsafe fn(NonNull<()>),
}

impl Drop for Kept {
    fn drop(&mut self) {
        // SAFETY: `at` and `free` were made together by `Group::keep`, for a box of the
        // value's type; each `Kept` is dropped once. The `&'g mut` that `keep` lent is
        // over: `'g` is the group's lifetime, higher-ranked in `group`'s closure (whose
        // result cannot name it), and `end` drops the `Kept`s after that closure returned
        // or unwound. The value's own borrows (`V: 'g`) are still alive: they outlived the
        // closure's call, and between its end and this drop only `group`'s frame runs.
        unsafe { (self.free)(self.at) }
    }
}

/// Drops the `V` boxed at `at` and frees its box.
///
/// # Safety
///
/// `at` is a `Box<V>`'s (`Box::leak`), not yet freed, and no reference to the value is
/// alive.
unsafe fn free_boxed<V>(at: NonNull<()>) {
    // SAFETY: the caller's contract: the box's own pointer, freed once, unborrowed.
    drop(unsafe { Box::from_raw(at.cast::<V>().as_ptr()) });
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
    refuse_inside(
        "nccl::group was called inside another nccl::group on this thread: issue every \
         collective of the group on the outer one",
    )
    .map_err(E::from)?;
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
        forget_records(&Ok(()));
        GroupEnd
    }

    fn finish(self) -> Result<()> {
        std::mem::forget(self);
        end()
    }
}

impl Drop for GroupEnd {
    fn drop(&mut self) {
        // Unwinding: NCCL enqueues the collectives issued so far (their buffers are still
        // borrowed here); the panic goes on, and the scopes' ends wait for them.
        let _ = end();
    }
}

/// NCCL's group end, then what the group kept (its stand-ins' scratch memory, whose
/// stream-ordered frees now come after the collectives that use it).
fn end() -> Result<()> {
    let ended = group_end();
    super::ledger::group_ended(&ended);
    forget_records(&ended);
    release_kept();
    ended
}

/// Forgets what this thread's group recorded, its unpaired sends to itself and its
/// targets, as NCCL forgets a group's calls: at the group's start (so that nothing of
/// an earlier group can pair with this one's) and at its end (`ended`: on a failed end
/// each capture it recorded into is told).
fn forget_records(ended: &Result<()>) {
    super::self_pairs::clear();
    super::group_target::forget_targets(ended);
}

/// Drops what the group kept (see [`end`], its one caller outside the tests).
fn release_kept() {
    drop(KEPT.with(|kept| std::mem::take(&mut *kept.borrow_mut())));
}

/// An open NCCL group (see [`group`]): its methods are the collectives of
/// [`Scope`](crate::Scope), each with the scope whose stream it runs on, or with the
/// graph [`Capture`](crate::Capture) that records it (see [`GroupTarget`]), and with
/// borrows for `'g`, the rest of the group. Neither `Send` nor `Sync`: NCCL's groups
/// belong to one thread.
///
/// Each method asks that its scope or capture outlive the group (`'s: 'g`), which every
/// buffer borrowed for `'g` already implies; a helper generic over the buffer types says
/// so itself: `fn issue<'g, 's: 'g>(g: &'g Group<'g, '_>, s: &'s Scope<'s, '_>, x: &'g
/// impl DeviceMemory<'s, f32>, ...)`.
///
/// One thread records the collectives of [`Communicator::for_devices`] into CUDA graphs
/// by opening a capture on each device, one inside the other, and the group inside them
/// all (a communicator's calls of one group go all to one capture, or all to scopes, and
/// the communicators made together all to captures or all to scopes, as NCCL asks:
/// [`Error::NcclGroup`] otherwise); each device's graph is then replayed on a scope of
/// that device, from the same thread, every one of them before any is waited for:
///
/// ```no_run
/// use stream_core::nccl::{self, Communicator, Sum};
/// use stream_core::{scope_all, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let devices = [Device::new(0)?, Device::new(1)?];
/// let comms = Communicator::for_devices(&devices)?; // with NCCL_GRAPH_REGISTER=0 set
/// let mut grads0 = devices[0].alloc_vec::<f32>(1 << 20)?;
/// let mut grads1 = devices[1].alloc_vec::<f32>(1 << 20)?;
/// let (mut graph0, (mut graph1, ())) = devices[0].capture(&mut grads0, |g0, mut x0| {
///     devices[1].capture(&mut grads1, |g1, mut x1| {
///         nccl::group(|grp| {
///             grp.all_reduce_in_place(g0, &comms[0], &mut x0, Sum)?;
///             grp.all_reduce_in_place(g1, &comms[1], &mut x1, Sum)
///         })
///     })
/// })?;
/// let streams = [devices[0].new_stream()?, devices[1].new_stream()?];
/// scope_all!([&streams[0], &streams[1]], |a, b| {
///     let run0 = a.replay_with(&mut graph0, &[&comms[0]])?;
///     let run1 = b.replay_with(&mut graph1, &[&comms[1]])?;
///     run1.wait()?;
///     run0.wait().map(drop)
/// })?;
/// # Ok::<_, Error>(()) }
/// ```
pub struct Group<'g, 'env: 'g> {
    _group: PhantomData<&'g mut &'g ()>,
    _env: PhantomData<&'env mut &'env ()>,
    _one_thread: PhantomData<*const ()>,
}

impl<'g> Group<'g, '_> {
    /// Moves `value` to the heap, where it stays until the group's end, and lends it for
    /// the rest of the group: what a stand-in inside the group issues on
    /// (`stand_in.rs`), which NCCL uses only from the group's end on.
    #[allow(
        clippy::mut_from_ref,
        reason = "each call lends a value of its own, which nothing else reaches"
    )]
    pub(crate) fn keep<V: 'g>(&'g self, value: V) -> &'g mut V {
        let mut at = NonNull::from(Box::leak(Box::new(value)));
        let kept = Kept {
            at: at.cast(),
            free: free_boxed::<V>,
        };
        KEPT.with(|list| list.borrow_mut().push(kept));
        // SAFETY: `at` points at the leaked box's value: valid, aligned, initialised. It
        // is freed only by `end`, after `'g` (see `Kept`'s drop), and no other reference
        // to it exists (the `Kept` holds the pointer only to free it). `Group` is neither
        // `Send` nor `Sync`, so the `Kept` is in the list of the thread whose group this is.
        unsafe { at.as_mut() }
    }

    /// [`Scope::all_reduce`](crate::Scope::all_reduce),
    /// issued at the group's end (given a capture, recorded then into its graph).
    pub fn all_reduce<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        op: impl ReduceOp<T>,
    ) -> Result<()> {
        s.issue_in_group(
            TOKEN,
            comm,
            Request::all_reduce(Operands::Apart(read(send), write(recv)), op, comm)?,
            self,
        )
    }

    /// [`Scope::all_reduce_in_place`](crate::Scope::all_reduce_in_place),
    /// issued at the group's end (given a capture, recorded then into its graph).
    pub fn all_reduce_in_place<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
        op: impl ReduceOp<T>,
    ) -> Result<()> {
        s.issue_in_group(
            TOKEN,
            comm,
            Request::all_reduce(Operands::InPlace(write(buf)), op, comm)?,
            self,
        )
    }

    /// [`Scope::broadcast`](crate::Scope::broadcast),
    /// issued at the group's end (given a capture, recorded then into its graph).
    pub fn broadcast<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        root: usize,
    ) -> Result<()> {
        s.issue_in_group(
            TOKEN,
            comm,
            Request::broadcast(Operands::Apart(read(send), write(recv)), root)?,
            self,
        )
    }

    /// [`Scope::broadcast_in_place`](crate::Scope::broadcast_in_place),
    /// issued at the group's end (given a capture, recorded then into its graph).
    pub fn broadcast_in_place<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
        root: usize,
    ) -> Result<()> {
        s.issue_in_group(
            TOKEN,
            comm,
            Request::broadcast(Operands::InPlace(write(buf)), root)?,
            self,
        )
    }

    /// [`Scope::reduce`](crate::Scope::reduce),
    /// issued at the group's end (given a capture, recorded then into its graph).
    pub fn reduce<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        op: impl ReduceOp<T>,
        root: usize,
    ) -> Result<()> {
        s.issue_in_group(
            TOKEN,
            comm,
            Request::reduce(Operands::Apart(read(send), write(recv)), op, root, comm)?,
            self,
        )
    }

    /// [`Scope::reduce_in_place`](crate::Scope::reduce_in_place),
    /// issued at the group's end (given a capture, recorded then into its graph).
    pub fn reduce_in_place<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
        op: impl ReduceOp<T>,
        root: usize,
    ) -> Result<()> {
        s.issue_in_group(
            TOKEN,
            comm,
            Request::reduce(Operands::InPlace(write(buf)), op, root, comm)?,
            self,
        )
    }

    /// [`Scope::all_gather`](crate::Scope::all_gather),
    /// issued at the group's end (given a capture, recorded then into its graph).
    pub fn all_gather<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        s.issue_in_group(
            TOKEN,
            comm,
            Request::all_gather(Operands::Apart(read(send), write(recv))),
            self,
        )
    }

    /// [`Scope::all_gather_in_place`](crate::Scope::all_gather_in_place),
    /// issued at the group's end (given a capture, recorded then into its graph).
    pub fn all_gather_in_place<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        s.issue_in_group(
            TOKEN,
            comm,
            Request::all_gather(Operands::InPlace(write(buf))),
            self,
        )
    }

    /// [`Scope::reduce_scatter`](crate::Scope::reduce_scatter),
    /// issued at the group's end (given a capture, recorded then into its graph).
    pub fn reduce_scatter<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        op: impl ReduceOp<T>,
    ) -> Result<()> {
        s.issue_in_group(
            TOKEN,
            comm,
            Request::reduce_scatter(Operands::Apart(read(send), write(recv)), op, comm)?,
            self,
        )
    }

    /// [`Scope::reduce_scatter_in_place`](crate::Scope::reduce_scatter_in_place),
    /// issued at the group's end (given a capture, recorded then into its graph).
    pub fn reduce_scatter_in_place<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
        op: impl ReduceOp<T>,
    ) -> Result<()> {
        s.issue_in_group(
            TOKEN,
            comm,
            Request::reduce_scatter(Operands::InPlace(write(buf)), op, comm)?,
            self,
        )
    }

    /// [`Scope::all_reduce_scaled`](crate::Scope::all_reduce_scaled), issued at the
    /// group's end (given a capture, recorded then into its graph); `factor` is borrowed
    /// until then, as `send` is.
    pub fn all_reduce_scaled<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        factor: &'g impl DeviceMemory<'s, T>,
    ) -> Result<()> {
        let operands = Operands::Apart(read(send), write(recv));
        let request = Request::all_reduce_scaled(operands, read(factor), comm)?;
        s.issue_in_group(TOKEN, comm, request, self)
    }

    /// [`Scope::all_reduce_scaled_in_place`](crate::Scope::all_reduce_scaled_in_place),
    /// issued at the group's end (given a capture, recorded then into its graph).
    pub fn all_reduce_scaled_in_place<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
        factor: &'g impl DeviceMemory<'s, T>,
    ) -> Result<()> {
        let request =
            Request::all_reduce_scaled(Operands::InPlace(write(buf)), read(factor), comm)?;
        s.issue_in_group(TOKEN, comm, request, self)
    }

    /// [`Scope::reduce_scaled`](crate::Scope::reduce_scaled), issued at the group's end
    /// (given a capture, recorded then into its graph).
    pub fn reduce_scaled<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        factor: &'g impl DeviceMemory<'s, T>,
        root: usize,
    ) -> Result<()> {
        let operands = Operands::Apart(read(send), write(recv));
        let request = Request::reduce_scaled(operands, read(factor), root, comm)?;
        s.issue_in_group(TOKEN, comm, request, self)
    }

    /// [`Scope::reduce_scaled_in_place`](crate::Scope::reduce_scaled_in_place), issued at
    /// the group's end (given a capture, recorded then into its graph).
    pub fn reduce_scaled_in_place<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
        factor: &'g impl DeviceMemory<'s, T>,
        root: usize,
    ) -> Result<()> {
        let request =
            Request::reduce_scaled(Operands::InPlace(write(buf)), read(factor), root, comm)?;
        s.issue_in_group(TOKEN, comm, request, self)
    }

    /// [`Scope::reduce_scatter_scaled`](crate::Scope::reduce_scatter_scaled), issued at
    /// the group's end (given a capture, recorded then into its graph).
    pub fn reduce_scatter_scaled<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        send: &'g impl DeviceMemory<'s, T>,
        recv: &'g mut impl DeviceMemoryMut<'s, T>,
        factor: &'g impl DeviceMemory<'s, T>,
    ) -> Result<()> {
        let operands = Operands::Apart(read(send), write(recv));
        let request = Request::reduce_scatter_scaled(operands, read(factor), comm)?;
        s.issue_in_group(TOKEN, comm, request, self)
    }

    /// [`Scope::reduce_scatter_scaled_in_place`](crate::Scope::reduce_scatter_scaled_in_place),
    /// issued at the group's end (given a capture, recorded then into its graph).
    pub fn reduce_scatter_scaled_in_place<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
        factor: &'g impl DeviceMemory<'s, T>,
    ) -> Result<()> {
        let operands = Operands::InPlace(write(buf));
        let request = Request::reduce_scatter_scaled(operands, read(factor), comm)?;
        s.issue_in_group(TOKEN, comm, request, self)
    }

    /// [`Scope::send`](crate::Scope::send), issued at the group's end (given a capture,
    /// recorded then into its graph); a send to this rank itself pairs with a
    /// [`recv`](Self::recv) of the same group.
    pub fn send<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        buf: &'g impl DeviceMemory<'s, T>,
        peer: usize,
    ) -> Result<()> {
        s.issue_in_group(TOKEN, comm, Request::send(read(buf), peer)?, self)
    }

    /// [`Scope::recv`](crate::Scope::recv),
    /// issued at the group's end (given a capture, recorded then into its graph).
    pub fn recv<'s: 'g, 'c: 'g, T: NcclElement>(
        &'g self,
        s: &'s impl GroupTarget<'s, 'c>,
        comm: &'c Communicator,
        buf: &'g mut impl DeviceMemoryMut<'s, T>,
        peer: usize,
    ) -> Result<()> {
        s.issue_in_group(TOKEN, comm, Request::recv(write(buf), peer)?, self)
    }
}

#[cfg(test)]
mod tests {
    use super::{release_kept, Group};
    use std::cell::Cell;
    use std::marker::PhantomData;

    /// Counts its drops.
    struct Counted<'c>(&'c Cell<u32>, u64);
    impl Drop for Counted<'_> {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    /// What a group keeps stays at one address while more is kept, and is dropped when
    /// the group ends, not before (no NCCL here: the group's end without NCCL's call).
    #[test]
    fn kept_values_stay_put_until_the_group_ends() {
        let drops = Cell::new(0);
        let group = Group {
            _group: PhantomData,
            _env: PhantomData,
            _one_thread: PhantomData,
        };
        let first = group.keep(Counted(&drops, 1));
        let at = std::ptr::from_ref(&*first);
        for i in 0..100 {
            group.keep(Counted(&drops, i)).1 += 1;
        }
        first.1 = 7;
        assert_eq!((std::ptr::from_ref(&*first), first.1), (at, 7));
        assert_eq!(drops.get(), 0);
        release_kept();
        assert_eq!(drops.get(), 101);
        release_kept();
        assert_eq!(drops.get(), 101);
    }
}
