//! [`GraphCommunicators`]: the communicators a graph's collectives run on (recorded
//! through the collectives of [`Capture`](crate::Capture), in `nccl/captured.rs`), kept
//! for the graph's life and checked at each replay.
//!
//! A captured collective's nodes name its communicator, so the graph keeps it
//! (`GraphKeep`: it is destroyed after the graph, and its abort, while the graph exists,
//! runs on a thread of its own, since NCCL's abort waits for such graphs to be
//! destroyed). Such a graph is replayed only with its communicators borrowed by the
//! replaying scope (`Scope::replay_with`), as a scope's own collectives borrow them: so
//! the scope's watch, which may abort them, runs on the one thread that can issue calls
//! on them, and a replay is refused once one was aborted.

use std::sync::Arc;

use crate::driver::nccl::{CommControl, GraphKeep};
use crate::error::{Error, Result};

/// The communicators of a graph's (or a capture's) collectives, each once.
#[derive(Default)]
pub(crate) struct GraphCommunicators(Vec<GraphKeep>);

impl GraphCommunicators {
    /// Keeps `control`, unless it is kept already.
    pub(crate) fn keep(&mut self, control: &Arc<CommControl>) {
        if !self.contains(control) {
            self.0.push(GraphKeep::new(control));
        }
    }

    /// `true` when no collective was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `true` when `control` is one of them.
    pub(crate) fn contains(&self, control: &Arc<CommControl>) -> bool {
        self.0
            .iter()
            .any(|kept| Arc::ptr_eq(kept.control(), control))
    }

    /// Before a replay with the communicators `given`: each of the graph's must be among
    /// them, and none aborted.
    pub(crate) fn check_given<'c>(
        &self,
        given: impl Iterator<Item = &'c Arc<CommControl>> + Clone,
    ) -> Result<()> {
        for kept in &self.0 {
            if !given.clone().any(|c| Arc::ptr_eq(c, kept.control())) {
                return Err(not_given());
            }
            if kept.control().is_aborted() {
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
