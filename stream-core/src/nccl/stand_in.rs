//! [`stand_in`]: what a member of this process does when the ledger refuses its call
//! because it disagrees with one another member already issued (`ledger.rs`): it
//! issues that member's call on scratch memory of its own, so that the other member's
//! call completes instead of waiting forever for its partner, possibly inside NCCL
//! (which sets up a collective's connections inside its first call, where no watch
//! reaches). Both members then report the disagreement: this one at once, the other at
//! its scope's end (the ledger's verdict, `communicator.rs`), so nothing takes the
//! stand-in's data for a result.
//!
//! Inside a group NCCL uses the scratch memory only from the group's end on, so the
//! group keeps it until then (`Group::keep`) instead of freeing it when the call
//! returns.

use super::group::Group;
use super::request::{issue_as, read, write, Operands, Request, Role};
use super::{Communicator, NcclElement};
use crate::driver::nccl::{Collective, DataType, Reduction};
use crate::driver::nccl_reduction::RawPreMulSum;
use crate::error::Result;
use crate::memory::DeviceBuffer;
use crate::scope::Scope;

use super::ledger::Call;

/// Issues `call`, another member's, on scratch memory allocated in `s` (freed on its
/// stream after the operation): zeros where the call sends, unused values where it
/// receives. Inside `group` when one is given, which keeps the scratch memory.
pub(crate) fn stand_in<'a, 's: 'a>(
    s: &'s Scope<'s, '_>,
    comm: &Communicator,
    call: Call,
    group: Option<&'a Group<'a, '_>>,
) -> Result<()> {
    match call.data_type {
        DataType::ncclFloat32 => on_scratch::<f32>(s, comm, call, group),
        DataType::ncclFloat64 => on_scratch::<f64>(s, comm, call, group),
        DataType::ncclInt8 => on_scratch::<i8>(s, comm, call, group),
        DataType::ncclUint8 => on_scratch::<u8>(s, comm, call, group),
        DataType::ncclInt32 => on_scratch::<i32>(s, comm, call, group),
        DataType::ncclUint32 => on_scratch::<u32>(s, comm, call, group),
        DataType::ncclInt64 => on_scratch::<i64>(s, comm, call, group),
        DataType::ncclUint64 => on_scratch::<u64>(s, comm, call, group),
        #[cfg(feature = "half")]
        DataType::ncclFloat16 => on_scratch::<half::f16>(s, comm, call, group),
        #[cfg(feature = "half")]
        DataType::ncclBfloat16 => on_scratch::<half::bf16>(s, comm, call, group),
        // Every call the ledger records is of an `NcclElement`, all of which are above.
        _ => Ok(()),
    }
}

/// [`stand_in`] with the call's element type.
fn on_scratch<'a, 's: 'a, T: NcclElement>(
    s: &'s Scope<'s, '_>,
    comm: &Communicator,
    call: Call,
    group: Option<&'a Group<'a, '_>>,
) -> Result<()> {
    let Some((send_len, recv_len)) = call.collective.elements(call.count, comm.size()) else {
        return Ok(());
    };
    // Another member's pre-multiplied sum is a handle of its communicator, which names
    // nothing (or another reduction) on this one: the stand-in makes its own, whose
    // factor does not matter (its data is scratch). NCCL copies it into the call, so it
    // may go when the call returns, inside a group too.
    let own_op = match call.collective.reduction() {
        Some(Reduction::PreMulSum(_)) => {
            Some(RawPreMulSum::new(comm.raw(), call.data_type, [0; 8])?)
        }
        _ => None,
    };
    let call = match &own_op {
        Some(op) => Call {
            collective: call.collective.with_reduction(op.reduction()),
            ..call
        },
        None => call,
    };
    let (send, recv) = (s.alloc_zeroed::<T>(send_len)?, s.alloc::<T>(recv_len)?);
    let Some(g) = group else {
        let mut recv = recv;
        return issue_on(s, comm, call, &send, &mut recv, None);
        // `send` and `recv` are freed here, on the scope's stream, after the operation.
    };
    let (send, recv) = (g.keep(send), g.keep(recv));
    issue_on(s, comm, call, send, recv, Some(g))
}

/// Issues `call` on `send` and `recv` (borrowed for `'a`, the group's lifetime when
/// there is one).
fn issue_on<'a, 's: 'a, T: NcclElement>(
    s: &'s Scope<'s, '_>,
    comm: &Communicator,
    call: Call,
    send: &'a DeviceBuffer<'s, T>,
    recv: &'a mut DeviceBuffer<'s, T>,
    group: Option<&'a Group<'a, '_>>,
) -> Result<()> {
    let operands = match call.collective {
        Collective::Send { .. } => Operands::Read(read(send)),
        Collective::Recv { .. } => Operands::Write(write(recv)),
        _ => Operands::Apart(read(send), write(recv)),
    };
    let what = "a stand-in for a call the ranks disagreed on";
    let request = Request::new(what, call.collective, operands);
    issue_as(s, comm, request, group, Role::StandIn)
}
