//! [`stand_in`]: what a member of this process does when the ledger refuses its call
//! because it disagrees with one another member already issued (`ledger.rs`): it
//! issues that member's call on scratch memory of its own, so that the other member's
//! call completes instead of waiting forever for its partner, possibly inside NCCL
//! (which sets up a collective's connections inside its first call, where no watch
//! reaches). Both members then report the disagreement: this one at once, the other at
//! its scope's end (the ledger's verdict, `communicator.rs`), so nothing takes the
//! stand-in's data for a result.
//!
//! Inside a group a stand-in's scratch memory would have to outlive the group's end.
//! For the groups this crate opens itself (a scope's `all_to_all` and `all_to_all_v`)
//! the stand-ins are collected ([`collecting`]) and issued right after the group's end,
//! on the same scope (NCCL matches a send with the receive of the same pair by their
//! order, not their group); inside a program's own `nccl::group`, none is.

use super::request::{issue_as, read, write, Operands, Request, Role};
use super::{Communicator, NcclElement};
use crate::driver::nccl::{Collective, DataType};
use crate::error::Result;
use crate::scope::Scope;

use super::ledger::Call;

thread_local! {
    /// The stand-ins asked for inside the group of [`collecting`] on this thread, or
    /// `None` outside one.
    static DEFERRED: std::cell::RefCell<Option<Vec<Call>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` (which opens and ends a group) and returns what it returned with the
/// stand-ins [`defer`] collected meanwhile, to be issued after the group's end.
pub(crate) fn collecting<R>(f: impl FnOnce() -> R) -> (R, Vec<Call>) {
    DEFERRED.with(|d| *d.borrow_mut() = Some(Vec::new()));
    // Taken back also when `f` unwinds, so that no later group collects into it.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            DEFERRED.with(|d| d.borrow_mut().take());
        }
    }
    let reset = Reset;
    let out = f();
    let deferred = DEFERRED.with(|d| d.borrow_mut().take()).unwrap_or_default();
    drop(reset);
    (out, deferred)
}

/// Keeps `call` to stand in for after the group's end: `true` inside [`collecting`],
/// `false` (nothing kept) otherwise.
pub(crate) fn defer(call: Call) -> bool {
    DEFERRED.with(|d| match d.borrow_mut().as_mut() {
        Some(deferred) => {
            deferred.push(call);
            true
        }
        None => false,
    })
}

/// Issues `call`, another member's, on scratch memory allocated in `s` (freed on its
/// stream after the operation): zeros where the call sends, unused values where it
/// receives.
pub(crate) fn stand_in<'s>(s: &'s Scope<'s, '_>, comm: &'s Communicator, call: Call) -> Result<()> {
    match call.data_type {
        DataType::ncclFloat32 => on_scratch::<f32>(s, comm, call),
        DataType::ncclFloat64 => on_scratch::<f64>(s, comm, call),
        DataType::ncclInt8 => on_scratch::<i8>(s, comm, call),
        DataType::ncclUint8 => on_scratch::<u8>(s, comm, call),
        DataType::ncclInt32 => on_scratch::<i32>(s, comm, call),
        DataType::ncclUint32 => on_scratch::<u32>(s, comm, call),
        DataType::ncclInt64 => on_scratch::<i64>(s, comm, call),
        DataType::ncclUint64 => on_scratch::<u64>(s, comm, call),
        #[cfg(feature = "half")]
        DataType::ncclFloat16 => on_scratch::<half::f16>(s, comm, call),
        #[cfg(feature = "half")]
        DataType::ncclBfloat16 => on_scratch::<half::bf16>(s, comm, call),
        // Every call the ledger records is of an `NcclElement`, all of which are above.
        _ => Ok(()),
    }
}

/// [`stand_in`] with the call's element type.
fn on_scratch<'s, T: NcclElement>(
    s: &'s Scope<'s, '_>,
    comm: &'s Communicator,
    call: Call,
) -> Result<()> {
    let Some((send_len, recv_len)) = call.collective.elements(call.count, comm.size()) else {
        return Ok(());
    };
    let send = s.alloc_zeroed::<T>(send_len)?;
    let mut recv = s.alloc::<T>(recv_len)?;
    let operands = match call.collective {
        Collective::Send { .. } => Operands::Read(read(&send)),
        Collective::Recv { .. } => Operands::Write(write(&mut recv)),
        _ => Operands::Apart(read(&send), write(&mut recv)),
    };
    let request = Request {
        what: "a stand-in for a call the ranks disagreed on",
        collective: call.collective,
        operands,
    };
    issue_as(s, comm, request, None, Role::StandIn)
    // `send` and `recv` are freed here, on the scope's stream, after the operation.
}
