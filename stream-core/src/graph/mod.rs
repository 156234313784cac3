//! CUDA graphs: capture a sequence of stream work once ([`Device::capture`](crate::Device::capture)), replay it
//! for the cost of one launch ([`Scope::replay`](crate::Scope::replay)).
//!
//! Owns: [`Enqueue`] (what both a scope and a capture issue work through, used by
//! `#[kernel]` wrappers and the launch entry), [`Capture`] and its operations (graph
//! allocations, pinned copies, fills, kernel launches, forks), [`Graph`] and what it
//! [holds](Hold), the pinned views a capture copies through, replays, kernel nodes and
//! their scalar arguments, whole-graph updates, the communicators a graph's collectives
//! keep (`collectives.rs`; the collectives themselves are `nccl/`'s, which uses this
//! folder). Uses: `driver/` (the graph calls, in
//! `driver::graph`), `device/`, `memory/` (the brands, and the `HoldToken` that makes
//! views of held memory safe), `host/` (pinned buffers), `kernel/`, `scope/` (a capture
//! records through a private scope on its own stream; a replay is a scope's
//! operation), `error`.
//!
//! The soundness argument in short (the details are on [`Graph`] and [`Hold`]):
//!
//! 1. A capture records on a stream of its own; its [`Capture`] offers no operation that
//!    waits on the host, and only work issued through it is recorded.
//! 2. Device memory a graph uses is its own (allocated and freed inside each replay,
//!    branded by the capture so it cannot escape it) or held by the graph; host memory
//!    it uses is pinned memory the graph holds. Nothing of a scope can enter a capture.
//! 3. The graph owns or borrows what it holds for as long as it exists, and the host
//!    reaches held memory only through the graph; a replay borrows the graph exclusively
//!    until it is known complete (its `Pending`, or the scope's end). Runs chained without
//!    a host wait ([`Scope::replay_again`](crate::Scope::replay_again)) keep it inside
//!    their last `Pending` (`InFlight` in between, which reaches none of its memory).

mod capture;
mod capture_state;
mod collectives;
mod enqueue;
mod executable;
pub(crate) mod fork;
mod hold;
mod kernel_node;
mod pinned_view;
mod replay;
mod transfer;
mod update;

pub use capture::Capture;
pub(crate) use capture_state::CaptureState;
pub(crate) use collectives::GraphCommunicators;
pub use enqueue::Enqueue;
pub use executable::Graph;
pub use hold::Hold;
pub use kernel_node::{KernelNode, ScalarParam};
pub use pinned_view::{PinnedMemory, PinnedMemoryMut, PinnedSlice, PinnedSliceMut};
pub(crate) use replay::in_flight;
pub use transfer::Recorded;

#[cfg(test)]
mod auto_traits;
