//! [`CaptureState`]: what a capture and its forks remember for the graph they record
//! (kernel launches, allocations, the forks' streams and events, the collectives'
//! communicators), and [`Recorded`], what of it the graph keeps.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::device::Stream;
use crate::driver::context::PrimaryContext;
use crate::driver::event::RawEvent;
use crate::driver::nccl::Call;
use crate::driver::nccl_comm::CommControl;
use crate::driver::stream::RawStream;
use crate::error::{Error, Result};
use crate::graph::collectives::GraphCommunicators;
use crate::graph::kernel_node::KernelRecord;
use crate::scope::Outstanding;

/// What a capture and its forks remember for the graph they record.
pub(crate) struct CaptureState {
    /// The graph's identity, which handles to its kernel arguments carry.
    id: u64,
    /// Every kernel launch recorded, in order.
    kernels: Mutex<Vec<KernelRecord>>,
    /// How many allocations of the graph's own were recorded.
    pub(super) allocations: AtomicUsize,
    /// The forks' streams, which belong to the capture until it has ended.
    streams: Mutex<Vec<Arc<Stream>>>,
    /// The events the forks recorded, the capture's own (never the thread's cached
    /// spares, which other code of the thread may record and wait on meanwhile), kept
    /// until the capture has ended.
    events: Mutex<Vec<RawEvent>>,
    /// What the capture's inner scope would list staged downloads in: always empty, since
    /// a capture offers none of the scope's host copies (a scope needs the list).
    pub(super) no_downloads: Outstanding,
    /// The communicators of the collectives recorded (`nccl/captured.rs`).
    communicators: Mutex<GraphCommunicators>,
    /// Set when the end of an `nccl::group` whose collectives the capture recorded
    /// failed: NCCL may have left some out of the graph, so the capture fails.
    group_failure: Arc<OnceLock<Error>>,
    /// Set by a fork onto a stream of a chosen priority
    /// ([`Capture::fork_with_priority`](crate::Capture::fork_with_priority)): the graph then runs each kernel node at the
    /// priority of the stream it was recorded on.
    node_priorities: AtomicBool,
}

impl CaptureState {
    /// The state of a capture for the graph `id` (a new graph's id comes from
    /// [`fresh_id`](Self::fresh_id); an update keeps its graph's).
    pub(super) fn new(id: u64) -> Self {
        CaptureState {
            id,
            kernels: Mutex::new(Vec::new()),
            allocations: AtomicUsize::new(0),
            streams: Mutex::new(Vec::new()),
            events: Mutex::new(Vec::new()),
            no_downloads: Outstanding::default(),
            communicators: Mutex::new(GraphCommunicators::default()),
            group_failure: Arc::default(),
            node_priorities: AtomicBool::new(false),
        }
    }

    /// Makes the graph run each kernel node at its own stream's priority.
    pub(super) fn use_node_priorities(&self) {
        self.node_priorities.store(true, Ordering::Relaxed);
    }

    /// Where the end of an `nccl::group` that recorded collectives into this capture
    /// puts its error when it fails (the group keeps it until its end).
    pub(crate) fn group_failure(&self) -> &Arc<OnceLock<Error>> {
        &self.group_failure
    }

    /// An id no graph of this process had before.
    pub(super) fn fresh_id() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// The graph's id.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Keeps a fork's stream until the capture ends.
    pub(super) fn keep_stream(&self, stream: Arc<Stream>) {
        self.streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(stream);
    }

    /// Makes `waiter` wait, in the graph, for the work recorded on `source` so far (both
    /// streams of the capture, of `context`), with an event of the capture's own.
    pub(super) fn order(
        &self,
        context: &Arc<PrimaryContext>,
        source: &RawStream,
        waiter: &RawStream,
    ) -> Result<()> {
        let event = RawEvent::new(context)?;
        let ordered = event.record(source).and_then(|()| waiter.wait(&event));
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event);
        ordered
    }

    /// Remembers a kernel launch; returns its index.
    pub(super) fn push_kernel(&self, record: KernelRecord) -> usize {
        let mut kernels = self.kernels.lock().unwrap_or_else(PoisonError::into_inner);
        kernels.push(record);
        kernels.len() - 1
    }

    /// `f` of the kernel launch at `index`, if there is one.
    pub(super) fn with_kernel<R>(
        &self,
        index: usize,
        f: impl FnOnce(&KernelRecord) -> R,
    ) -> Option<R> {
        self.kernels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(index)
            .map(f)
    }

    /// Records `call`, a collective on the communicator `control`, which the graph then
    /// keeps.
    pub(crate) fn record_collective(&self, control: &Arc<CommControl>, call: Call) {
        self.communicators
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(control, call);
    }

    /// What was recorded: the kernel launches, the number of allocations, the
    /// communicators of the collectives. Call once the capture has ended (the forks'
    /// streams go with the state).
    pub(super) fn into_parts(self) -> Recorded {
        Recorded {
            kernels: self
                .kernels
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner),
            allocations: self.allocations.into_inner(),
            communicators: self
                .communicators
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner),
            node_priorities: self.node_priorities.into_inner(),
        }
    }
}

/// What a capture recorded, besides the graph itself (see [`CaptureState::into_parts`]).
pub(super) struct Recorded {
    pub(super) kernels: Vec<KernelRecord>,
    pub(super) allocations: usize,
    pub(super) communicators: GraphCommunicators,
    /// Whether a fork chose its stream's priority (the instance keeps each node's).
    pub(super) node_priorities: bool,
}
