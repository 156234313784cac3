//! [`Request`]: one collective with its typed, borrowed operands, and [`issue`], the one
//! place that checks it (device, ranks, lengths, group state) and enqueues it.

use super::group::{self, Group};
use super::ledger::{Agreement, Call};
use super::self_pairs::{self, Half};
use super::stand_in::stand_in;
use super::{Communicator, NcclElement};
use crate::driver::nccl::{Collective, Reduction};
use crate::driver::nccl_comm::enqueue;
use crate::driver::nccl_reduction::RawPreMulSum;
use crate::error::{Error, Result, ShapeMismatch};
use crate::graph::CaptureState;
use crate::memory::view::RawSlice;
use crate::memory::{DeviceSlice, DeviceSliceMut};
use crate::scope::Scope;
use crate::sealed::{Sealed, TOKEN};
use crate::trace::Category;
use crate::DeviceMemory;

/// The device memory a collective reads and writes, borrowed for `'a`, branded `'s`.
pub(crate) enum Operands<'a, 's, T: NcclElement> {
    /// A send buffer and a distinct receive buffer (they cannot overlap: one is borrowed
    /// shared and the other exclusively).
    Apart(DeviceSlice<'a, 's, T>, DeviceSliceMut<'a, 's, T>),
    /// One buffer both read and written (NCCL's in-place forms).
    InPlace(DeviceSliceMut<'a, 's, T>),
    /// Only read (`send`).
    Read(DeviceSlice<'a, 's, T>),
    /// Only written (`recv`).
    Write(DeviceSliceMut<'a, 's, T>),
}

/// One collective, ready to be checked and issued.
pub(crate) struct Request<'a, 's, T: NcclElement> {
    /// The operation's name, for errors (`"all_reduce"`).
    pub(crate) what: &'static str,
    pub(crate) collective: Collective,
    pub(crate) operands: Operands<'a, 's, T>,
    /// The reduction made on a factor in device memory for this request alone
    /// ([`Request::scaled`]), whose handle `collective` holds; dropped with the request,
    /// after [`issue_as`] has given it to NCCL. Private to this file: no other request
    /// can hold it.
    factor: Option<DeviceFactor<'a>>,
}

impl<'a, 's, T: NcclElement> Request<'a, 's, T> {
    /// `what` of `operands` (its reduction, if any, one that is no memory's: a built-in
    /// or a [`PreMulSum`](super::PreMulSum) with its factor on the host).
    #[inline(always)]
    pub(crate) fn new(
        what: &'static str,
        collective: Collective,
        operands: Operands<'a, 's, T>,
    ) -> Self {
        Request {
            what,
            collective,
            operands,
            factor: None,
        }
    }

    /// `what` of `operands`, reduced by each rank's elements times its own `factor`, one
    /// element of device memory of the operands' brand, borrowed as they are, that NCCL
    /// reads when the collective runs: `collective` makes the operation from that
    /// reduction, made here for this request alone.
    /// [`Error::ShapeMismatch`] unless `factor` is one element.
    #[inline]
    pub(crate) fn scaled(
        what: &'static str,
        operands: Operands<'a, 's, T>,
        factor: DeviceSlice<'a, 's, T>,
        comm: &'a Communicator,
        collective: impl FnOnce(Reduction) -> Collective,
    ) -> Result<Self> {
        let factor = DeviceFactor::new(comm, factor)?;
        Ok(Request {
            what,
            collective: collective(factor.raw.reduction()),
            operands,
            factor: Some(factor),
        })
    }
}

/// A pre-multiplied sum whose factor is one element of device memory (`ncclScalarDevice`),
/// made by [`Request::scaled`] for its request alone.
struct DeviceFactor<'c> {
    raw: RawPreMulSum<'c>,
}

impl<'c> DeviceFactor<'c> {
    /// Made only by [`Request::scaled`], which keeps it in the request whose operands
    /// carry `factor`'s brand and borrow.
    fn new<T: NcclElement>(comm: &'c Communicator, factor: DeviceSlice<'c, '_, T>) -> Result<Self> {
        let factor = factor.raw(TOKEN);
        if factor.len != 1 {
            return Err(one_factor(factor.len));
        }
        // SAFETY: `factor` is one initialised `T` (checked above; device memory is
        // initialised when allocated, and every bit pattern of a `T: NcclElement` is one).
        // The reduction made here lives in one `Request`, whose operands carry the same
        // brand and borrow as `factor` (`Request::scaled`'s signature), and reaches NCCL
        // only through `issue_as`, which takes that request and enqueues its collective on
        // the stream of the scope (or capture) of that brand: so the factor is device
        // memory that stream's device can read (its own, or lent to the scope by a fork,
        // which granted access), borrowed shared until the collective is on the stream
        // (inside a group, until the group's end, when NCCL enqueues it: the group's
        // methods borrow for the group), after which every write or free of it is ordered
        // after the collective on that stream (in a capture, recorded after it in the
        // graph, whose memory keeps its address at every replay). The request drops the
        // reduction when it is dropped, after its one issue (a stand-in makes its own).
        let raw = unsafe { RawPreMulSum::on_device(comm.raw(), T::DATA_TYPE, factor.ptr)? };
        Ok(DeviceFactor { raw })
    }
}

/// [`Error::ShapeMismatch`] for a device factor of `len` elements.
#[cold]
fn one_factor(len: usize) -> Error {
    Error::from(ShapeMismatch {
        what: "the device factor (one element)",
        expected: 1,
        actual: len,
    })
}

/// `Ok(rank as i32)` when `rank` is in a communicator of `size` ranks.
#[inline]
pub(crate) fn rank_in(rank: usize, size: usize) -> Result<i32> {
    match i32::try_from(rank) {
        Ok(r) if rank < size => Ok(r),
        _ => Err(invalid_rank(rank, size)),
    }
}

#[cold]
fn invalid_rank(rank: usize, size: usize) -> Error {
    Error::InvalidRank { rank, size }
}

/// Checks `request` and enqueues it on `s`'s stream through `comm`: now, or at the end
/// of `group` when one is given. Nothing is enqueued when a check fails or there are no
/// elements.
#[inline(always)] // so that each method's `Request` folds to its one path
pub(crate) fn issue<'a, 's: 'a, T: NcclElement>(
    s: &'s Scope<'s, '_>,
    comm: &Communicator,
    request: Request<'a, 's, T>,
    group: Option<&'a Group<'a, '_>>,
) -> Result<()> {
    issue_as(s, comm, request, group, Role::Own)
}

/// Whose call [`issue_as`] issues.
#[derive(Clone, Copy)]
pub(crate) enum Role<'a> {
    /// This member's own: compared with the other members' first (`ledger.rs`).
    Own,
    /// A stand-in for a refused call (`stand_in.rs`), the call another member made,
    /// which the ledger has already counted.
    StandIn,
    /// Recorded into the graph of this capture (`captured.rs`): not compared now, since
    /// it does not run now; the graph keeps it, and it is compared at each replay
    /// (`Scope::replay_with`).
    Captured(&'a CaptureState),
}

/// [`issue`], for `role`.
#[inline(always)]
pub(crate) fn issue_as<'a, 's: 'a, T: NcclElement>(
    s: &'s Scope<'s, '_>,
    comm: &Communicator,
    request: Request<'a, 's, T>,
    group: Option<&'a Group<'a, '_>>,
    role: Role<'_>,
) -> Result<()> {
    if group.is_none() {
        refuse_own_collective(comm)?;
    }
    if !comm.raw().is_of(&s.stream.raw) {
        return Err(of_another_device(s, comm));
    }
    comm.check_before_issue()?;
    let size = comm.size();
    let (send, recv, count) = operands(&request, comm.rank(), size)?;
    if let Collective::Send { peer } | Collective::Recv { peer } = request.collective {
        if group.is_none() && peer as usize == comm.rank() {
            return Err(to_itself_outside_a_group());
        }
    }
    if group.is_some() {
        let target = match role {
            Role::Captured(state) => Some(state.id()),
            Role::Own | Role::StandIn => None,
        };
        super::group_target::claim(comm.key(), comm.clique_key(), target)?;
    }
    // After every check that refuses a call NCCL would not see, and before the empty
    // call returns (NCCL sees neither rank's empty call, so the ledger's numbering stays
    // NCCL's only if both count it).
    let call = || Call {
        what: request.what,
        collective: request.collective,
        data_type: T::DATA_TYPE,
        type_name: std::any::type_name::<T>(),
        count,
        element_bytes: size_of::<T>(),
    };
    match role {
        Role::Captured(state) => state.record_collective(comm.raw().control(), call()),
        Role::StandIn => {}
        Role::Own => match comm.agree(call) {
            Agreement::Issue => {}
            Agreement::Refuse(error) => return Err(error),
            Agreement::StandIn(call, error) => {
                // Inside a group, the group keeps the stand-in's scratch memory until
                // after its end (`stand_in.rs`).
                if stand_in(s, comm, call, group).is_err() {
                    comm.strand();
                }
                return Err(error);
            }
        },
    }
    if count == 0 {
        return Ok(());
    }
    if let Collective::Send { peer } | Collective::Recv { peer } = request.collective {
        if peer as usize == comm.rank() {
            // Inside a group (checked above): NCCL copies a send to this rank itself into
            // its paired receive with the send's length, so the two must agree.
            let half = match request.collective {
                Collective::Send { .. } => Half::Send,
                _ => Half::Recv,
            };
            self_pairs::pair(comm.key(), half, count * size_of::<T>())?;
        }
    }
    s.watch_collective(comm.watch());
    // Inside a group NCCL enqueues only at the group's end: nothing to time here. The
    // enqueue sits between the trace's halves, not in a closure, so that it is inlined
    // and folds to this collective's one NCCL call.
    let started = group.is_none().then(|| s.trace_begin()).flatten();
    // SAFETY: `comm` was made in the context of the scope's stream (checked above).
    // `send` and `recv` are the operands' memory, branded `'s` (so device memory of this
    // scope's device, valid on its stream, which `comm` shares: checked above) and
    // borrowed for `'a` (shared where only read, exclusively where written, so no other
    // argument aliases a written one except NCCL's own in-place forms, which `operands`
    // builds as NCCL defines them). `operands` checked each holds exactly the elements
    // `Collective::elements` names. The operation is enqueued on the stream before `'a`
    // ends: outside a group when this call returns (no group is open on this thread:
    // checked above, and only `nccl::group` opens one); inside one at its end, which
    // `group::group` reaches before `'a` (the group's own lifetime) ends, on return and
    // on unwind. After that, every other use of the memory (kernels, copies, the
    // stream-ordered free of a `DeviceBuffer`, a fork's lend) is ordered after it on the
    // stream, and the scope's end waits for it (bounded by the watch registered above).
    // Every bit pattern of `T: NcclElement` (plain numbers) is a valid `T`.
    let issued = unsafe {
        enqueue(
            request.collective,
            send.ptr,
            recv.ptr,
            count,
            T::DATA_TYPE,
            comm.raw(),
            &s.stream.raw,
        )
    };
    let bytes = Some((count * size_of::<T>()) as u64);
    s.trace_end(
        started,
        request.what,
        Category::Collective,
        bytes,
        issued.is_ok(),
    );
    // NCCL copied a reduction made for this request into the call: it may go now.
    drop(request.factor);
    issued.inspect_err(|e| comm.issue_failed(e))
}

/// A scope's own collective (not a group's) is refused while a group is open on this
/// thread (NCCL would enqueue it only at the group's end, after its borrows) and on a
/// communicator this thread drives beside others (`for_devices`: it would wait for its
/// siblings forever). Also the check of `all_to_all`, which opens a group of its own.
#[inline(always)]
pub(crate) fn refuse_own_collective(comm: &Communicator) -> Result<()> {
    if group::is_open() || comm.grouped_only() {
        return Err(refuse_outside_a_group());
    }
    Ok(())
}

/// Why [`refuse_own_collective`] refused: a group is open on this thread, or the
/// communicator is one of several driven by this thread.
#[cold]
fn refuse_outside_a_group() -> Error {
    Error::NcclGroup {
        reason: if group::is_open() {
            "a scope's collective was called inside nccl::group, where it would be issued \
             only at the group's end, after its borrows have ended: call it on the group \
             (g.all_reduce(s, ...)), whose borrows last until then"
        } else {
            "communicators made together by Communicator::for_devices are driven by one \
             thread, and an ungrouped collective on one would wait forever for its siblings: \
             issue one per device inside nccl::group, or make one communicator per thread \
             with UniqueId and Communicator::join"
        },
    }
}

/// [`Error::DeviceMismatch`] for a communicator of another device than the scope's.
#[cold]
fn of_another_device(s: &Scope<'_, '_>, comm: &Communicator) -> Error {
    Error::DeviceMismatch {
        memory: comm.device().ordinal(),
        stream: s.stream.device.ordinal(),
    }
}

#[cold]
fn to_itself_outside_a_group() -> Error {
    Error::NcclGroup {
        reason: "a send or receive to this rank itself waits for its matching call: issue \
                 both inside one nccl::group",
    }
}

/// [`Error::ShapeMismatch`] for `what`.
#[cold]
fn shape_mismatch(expected: usize, actual: usize, what: &'static str) -> Error {
    Error::from(ShapeMismatch {
        what,
        expected,
        actual,
    })
}

/// The send and receive memory and the per-rank count of `request` on a communicator of
/// `size` ranks where this one is `rank`, after checking every length and rank.
#[inline(always)]
fn operands<T: NcclElement>(
    request: &Request<'_, '_, T>,
    rank: usize,
    size: usize,
) -> Result<(RawSlice, RawSlice, usize)> {
    use Collective::*;
    match request.collective {
        Broadcast { root } | Reduce(_, root) => drop(rank_in(root as usize, size)?),
        Send { peer } | Recv { peer } => drop(rank_in(peer as usize, size)?),
        AllReduce(_) | AllGather | ReduceScatter(_) => {}
    }
    let shape = |expected, actual, what| Err(shape_mismatch(expected, actual, what));
    let (send, recv, count) = match (&request.operands, request.collective) {
        (Operands::Apart(s, r), AllGather) => {
            let (s, r) = (s.raw(TOKEN), r.raw(TOKEN));
            let want = s.len.saturating_mul(size);
            if r.len != want {
                return shape(
                    want,
                    r.len,
                    "all_gather: the receive buffer (communicator size × send length)",
                );
            }
            (s, r, s.len)
        }
        (Operands::Apart(s, r), ReduceScatter(_)) => {
            let (s, r) = (s.raw(TOKEN), r.raw(TOKEN));
            let want = r.len.saturating_mul(size);
            if s.len != want {
                return shape(
                    want,
                    s.len,
                    "reduce_scatter: the send buffer (communicator size × receive length)",
                );
            }
            (s, r, r.len)
        }
        (Operands::Apart(s, r), _) => {
            let (s, r) = (s.raw(TOKEN), r.raw(TOKEN));
            Error::check_lengths(request.what, s.len, r.len)?;
            (s, r, s.len)
        }
        (Operands::InPlace(b), AllGather | ReduceScatter(_)) => {
            let b = b.raw(TOKEN);
            if b.len % size != 0 {
                return shape(b.len - b.len % size, b.len, "an in-place all_gather or reduce_scatter: the buffer (a multiple of the communicator size)");
            }
            let count = b.len / size;
            // NCCL's in-place forms: this rank's block is the input of an all_gather and
            // the output of a reduce_scatter.
            let block = b.range::<T>(rank * count..(rank + 1) * count)?;
            match request.collective {
                AllGather => (block, b, count),
                _ => (b, block, count),
            }
        }
        (Operands::InPlace(b), _) => {
            let b = b.raw(TOKEN);
            (b, b, b.len)
        }
        (Operands::Read(s), _) => (s.raw(TOKEN), RawSlice::EMPTY, s.raw(TOKEN).len),
        (Operands::Write(r), _) => (RawSlice::EMPTY, r.raw(TOKEN), r.raw(TOKEN).len),
    };
    // The per-rank count NCCL is given must fit what the buffers hold (checked above;
    // asserted against the driver's own table so the two cannot drift apart).
    match request.collective.elements(count, size) {
        Some((need_send, need_recv)) if send.len >= need_send && recv.len >= need_recv => {
            Ok((send, recv, count))
        }
        _ => shape(
            count.saturating_mul(size),
            send.len.min(recv.len),
            request.what,
        ),
    }
}

/// A read-only view of all of `memory` for `'a`.
pub(crate) fn read<'a, 's, T: NcclElement>(
    memory: &'a impl DeviceMemory<'s, T>,
) -> DeviceSlice<'a, 's, T> {
    DeviceSlice::of(memory)
}

/// A writable view of all of `memory` for `'a`.
pub(crate) fn write<'a, 's, T: NcclElement>(
    memory: &'a mut impl crate::DeviceMemoryMut<'s, T>,
) -> DeviceSliceMut<'a, 's, T> {
    DeviceSliceMut::of(memory)
}
