//! [`GraphCommunicators`]: the communicators a graph's collectives run on, with the
//! calls recorded on each (through the collectives of [`Capture`](crate::Capture), in
//! `nccl/captured.rs`), kept for the graph's life and checked at each replay.
//!
//! A captured collective's nodes name its communicator, so the graph keeps it
//! (`GraphKeep`: it is destroyed after the graph, and its abort, while the graph exists,
//! runs on a thread of its own, since NCCL's abort waits for such graphs to be
//! destroyed). Such a graph is replayed only with its communicators borrowed by the
//! replaying scope (`Scope::replay_with`), as a scope's own collectives borrow them: so
//! the scope's watch, which may abort them, runs on the one thread that can issue calls
//! on them, and a replay is refused once one was aborted. The calls are what the
//! ledger of ranks of one process compares at each replay (`nccl/ledger.rs`), as it
//! compares a scope's collectives before they are issued; they go with the graph.

use std::sync::Arc;

use crate::driver::nccl::Call;
use crate::driver::nccl_comm::{CommControl, GraphKeep};
use crate::error::{Error, Result};

/// The communicators of a graph's (or a capture's) collectives, each once, with the
/// calls recorded on it, in order.
#[derive(Default)]
pub(crate) struct GraphCommunicators(Vec<Kept>);

/// One communicator a graph keeps, and the calls recorded on it.
struct Kept {
    keep: GraphKeep,
    calls: Vec<Call>,
}

impl GraphCommunicators {
    /// Appends `call`, recorded on the communicator `control`, keeping the communicator
    /// unless it is kept already.
    pub(crate) fn record(&mut self, control: &Arc<CommControl>, call: Call) {
        match self.kept(control) {
            Some(at) => self.0[at].calls.push(call),
            None => self.0.push(Kept {
                keep: GraphKeep::new(control),
                calls: vec![call],
            }),
        }
    }

    /// `true` when no collective was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The calls recorded on `control`, in order; `None` when it is not one of them.
    pub(crate) fn calls_on(&self, control: &Arc<CommControl>) -> Option<&[Call]> {
        self.kept(control).map(|at| &self.0[at].calls[..])
    }

    /// Where `control` is kept.
    fn kept(&self, control: &Arc<CommControl>) -> Option<usize> {
        self.0
            .iter()
            .position(|kept| Arc::ptr_eq(kept.keep.control(), control))
    }

    /// Before a replay with the communicators `given`: each of the graph's must be among
    /// them, and none aborted.
    pub(crate) fn check_given<'c>(
        &self,
        given: impl Iterator<Item = &'c Arc<CommControl>> + Clone,
    ) -> Result<()> {
        for Kept { keep, .. } in &self.0 {
            if !given.clone().any(|c| Arc::ptr_eq(c, keep.control())) {
                return Err(not_given());
            }
            if keep.control().is_aborted() {
                return Err(Error::CommunicatorAborted {
                    reason: "a communicator the graph's collectives run on was aborted, and \
                             its captured operations cannot run again: capture a new graph on \
                             a new communicator",
                });
            }
        }
        Ok(())
    }
}

/// A replay of a graph with collectives that was not given one of their communicators.
#[cold]
pub(crate) fn not_given() -> Error {
    Error::GraphCommunicators {
        reason: "a graph with NCCL collectives is replayed with Scope::replay_with(graph, \
                 &[&comm, ...]), given every communicator its collectives run on, which the \
                 replaying scope borrows as its own collectives do",
    }
}
