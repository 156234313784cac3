//! CUDA graphs: recording a stream's work into a graph ([`new_capturing_stream`],
//! [`end_capture`]), the graph and its executable instance as RAII handles ([`RawGraph`],
//! [`RawGraphExec`]), and the raw operations that launch an executable graph or change
//! what it runs.
//!
//! Captures run in `CU_STREAM_CAPTURE_MODE_RELAXED`: only work issued on the capturing
//! stream (and on streams joined into it by events) is recorded; every other call of the
//! capturing thread, and of any other thread, runs as usual. The stricter modes make
//! "potentially unsafe" calls (`cuMemAlloc`, a module load, a library's lazy setup)
//! fail while any capture of the thread (`THREAD_LOCAL`) or of the process (`GLOBAL`)
//! is open; none of them is unsafe for a capture whose stream nobody else can reach.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{result, sys};

use super::context::PrimaryContext;
use super::module::Function;
use super::stream::RawStream;
use crate::error::{DriverResultExt, Error, Result};

/// A node of a [`RawGraph`], as the driver names it: valid while that graph lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeHandle(sys::CUgraphNode);

// SAFETY: a `CUgraphNode` is an opaque handle; it is only passed to driver calls on its
// graph's instance, which take that instance by `&mut`.
unsafe impl Send for NodeHandle {}
// SAFETY: see `Send`; the handle is only copied.
unsafe impl Sync for NodeHandle {}

/// A new stream of `context` that records its work into a new graph instead of running
/// it, from the start: no one can have relied on its work running (a synchronisation, an
/// event), since it never had any, and whoever it is handed to knows it captures (a
/// scope refuses a capturing stream). [`end_capture`] ends the capture.
pub(crate) fn new_capturing_stream(context: &Arc<PrimaryContext>) -> Result<RawStream> {
    let _bound = context.bind()?;
    let stream = RawStream::new(context)?;
    // SAFETY: `stream` is a live stream (owned here) whose context is bound; the mode is
    // one of the driver's.
    unsafe {
        result::stream::begin_capture(
            stream.raw(),
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        )
    }
    .call("cuStreamBeginCapture")?;
    Ok(stream)
}

/// Ends the capture on `stream` (its origin stream): the recorded graph, `Ok(None)` when
/// the driver invalidated the capture (it then hands back no graph), or the driver's
/// error. Every stream that joined the capture leaves capture mode either way.
pub(crate) fn end_capture(stream: &RawStream) -> Result<Option<RawGraph>> {
    let _bound = stream.bind()?;
    // SAFETY: `stream` is a live stream whose context is bound; ending a capture only
    // changes the stream's mode and hands over the graph it recorded.
    let graph = unsafe { result::stream::end_capture(stream.raw()) }.call("cuStreamEndCapture")?;
    Ok((!graph.is_null()).then(|| RawGraph {
        raw: graph,
        context: Arc::clone(stream.context()),
    }))
}

/// The node the next work on the capturing `stream` would depend on, when there is
/// exactly one: right after a kernel launch, that kernel's node. `Ok(None)` when the
/// stream depends on several nodes or none.
pub(crate) fn last_captured_node(stream: &RawStream) -> Result<Option<NodeHandle>> {
    // SAFETY: `stream` is a live stream (borrowed).
    let (status, dependencies, count) = unsafe { super::versions::capture_info(stream.raw()) }?;
    if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
        || count != 1
        || dependencies.is_null()
    {
        return Ok(None);
    }
    // SAFETY: the driver reported one dependency in the array it points to, valid until
    // the next call on the stream; the node is copied out at once.
    Ok(Some(NodeHandle(unsafe { *dependencies })))
}

/// A graph recorded by a capture, destroyed (with its context bound) when dropped. Its
/// methods take `&mut self`: the driver does not synchronise calls on one graph, "even
/// read-only" ones, so shared access calls nothing.
pub(crate) struct RawGraph {
    raw: sys::CUgraph,
    context: Arc<PrimaryContext>,
}

// SAFETY: a `CUgraph` is an opaque handle; the driver accepts it from any thread as long
// as calls on one graph are not concurrent, which `&mut self` on every call ensures.
unsafe impl Send for RawGraph {}
// SAFETY: shared access makes no driver call (see the type's docs).
unsafe impl Sync for RawGraph {}

impl RawGraph {
    /// An executable instance of the graph, which frees, at each launch, the graph
    /// allocations a previous launch left unfreed (`AUTO_FREE_ON_LAUNCH`: a buffer
    /// forgotten in the capture then only leaks until the next launch). With
    /// `node_priorities`, each kernel node runs at the priority of the stream it was
    /// captured on rather than at the launch stream's (`USE_NODE_PRIORITY`).
    pub(crate) fn instantiate(&mut self, node_priorities: bool) -> Result<RawGraphExec> {
        let _bound = self.context.bind()?;
        use sys::CUgraphInstantiate_flags as Flags;
        let flags = match node_priorities {
            false => Flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
            true => Flags(
                Flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0
                    | Flags::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY.0,
            ),
        };
        // SAFETY: `self.raw` is a live graph of the bound context; instantiating reads
        // it (exclusively borrowed) and runs nothing.
        let exec = unsafe { result::graph::instantiate(self.raw, flags) }
            .call("cuGraphInstantiateWithFlags")?;
        Ok(RawGraphExec {
            raw: exec,
            context: Arc::clone(&self.context),
        })
    }
}

impl Drop for RawGraph {
    fn drop(&mut self) {
        let _bound = self.context.bind();
        // SAFETY: made by `end_capture`, destroyed once, here, with its context alive
        // (held) and bound. Executable instances do not depend on it once instantiated.
        // A failure only leaks it.
        let _ = unsafe { result::graph::destroy(self.raw) };
    }
}

/// Why an executable graph could not be updated (see [`RawGraphExec::update`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UpdateRefused {
    /// The driver's `CUgraphExecUpdateResult`, in words.
    Driver(&'static str),
    /// The call itself failed.
    Call(Error),
}

/// An executable graph, destroyed (with its context bound) when dropped. "If the
/// executable graph is in-flight, it will not be terminated, but rather freed
/// asynchronously on completion" (CUDA driver API, `cuGraphExecDestroy`): dropping it
/// never waits.
pub(crate) struct RawGraphExec {
    raw: sys::CUgraphExec,
    context: Arc<PrimaryContext>,
}

// SAFETY: a `CUgraphExec` is an opaque handle; every call on it takes `&mut self`, so
// calls on one instance are never concurrent.
unsafe impl Send for RawGraphExec {}
// SAFETY: shared access makes no driver call.
unsafe impl Sync for RawGraphExec {}

/// A kernel node's launch: function, shape and argument pointers (the `kernelParams` of
/// `cuLaunchKernel`).
pub(crate) struct KernelNodeLaunch<'a> {
    pub(crate) function: &'a Function,
    pub(crate) grid: (u32, u32, u32),
    pub(crate) block: (u32, u32, u32),
    pub(crate) shared_bytes: u32,
    pub(crate) args: &'a mut [*mut c_void],
}

impl RawGraphExec {
    /// Enqueues one run of the graph on `stream`. The driver orders it after the
    /// stream's earlier work and after every earlier launch of this instance ("Only one
    /// instance of hGraphExec may be executing at a time", `cuGraphLaunch`).
    ///
    /// # Safety
    ///
    /// Every memory the graph's nodes use stays valid until this run has completed, and
    /// nothing outside the graph touches it meanwhile in a way that conflicts with the
    /// graph's reads and writes; `stream` belongs to the graph's context.
    pub(crate) unsafe fn launch(&mut self, stream: &RawStream) -> Result<()> {
        // SAFETY: the caller's contract; both handles are live (owned, borrowed).
        unsafe { sys::cuGraphLaunch(self.raw, stream.raw()) }
            .result()
            .call("cuGraphLaunch")
    }

    /// Sets what the kernel node `node` launches in future runs of this instance (runs
    /// already enqueued are not affected: `cuGraphExecKernelNodeSetParams`).
    ///
    /// # Safety
    ///
    /// `node` is a kernel node of the live graph this instance was instantiated from, and
    /// `launch` satisfies the contract of [`launch`](super::launch::launch) for every
    /// future run of this instance: its function is loaded in this context, `args`
    /// match its parameters, and the memory they name stays valid for every run.
    pub(crate) unsafe fn set_kernel_node(
        &mut self,
        node: NodeHandle,
        launch: KernelNodeLaunch<'_>,
    ) -> Result<()> {
        let params = sys::CUDA_KERNEL_NODE_PARAMS {
            func: launch.function.raw,
            gridDimX: launch.grid.0,
            gridDimY: launch.grid.1,
            gridDimZ: launch.grid.2,
            blockDimX: launch.block.0,
            blockDimY: launch.block.1,
            blockDimZ: launch.block.2,
            sharedMemBytes: launch.shared_bytes,
            kernelParams: launch.args.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        let _bound = self.context.bind()?;
        // SAFETY: the caller's contract; `params` and the argument pointers it holds are
        // alive for the call, which copies the argument values.
        unsafe { sys::cuGraphExecKernelNodeSetParams_v2(self.raw, node.0, &raw const params) }
            .result()
            .call("cuGraphExecKernelNodeSetParams")
    }

    /// Makes future runs of this instance run `graph`'s work instead, when the driver can
    /// apply it in place (same topology, see `cuGraphExecUpdate`); otherwise nothing
    /// changes and the reason is returned.
    ///
    /// # Safety
    ///
    /// What [`launch`](Self::launch) requires of this instance's work holds of `graph`'s
    /// work, for every future run.
    pub(crate) unsafe fn update(
        &mut self,
        graph: &mut RawGraph,
    ) -> std::result::Result<(), UpdateRefused> {
        let _bound = self.context.bind().map_err(UpdateRefused::Call)?;
        let mut info = sys::CUgraphExecUpdateResultInfo {
            result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
            errorNode: std::ptr::null_mut(),
            errorFromNode: std::ptr::null_mut(),
        };
        // SAFETY: both handles are live and exclusively borrowed; the driver writes the
        // outcome into `info`, a live local. The caller's contract covers the new work.
        let status = unsafe { sys::cuGraphExecUpdate_v2(self.raw, graph.raw, &raw mut info) };
        use sys::CUgraphExecUpdateResult::*;
        let reason = match info.result {
            CU_GRAPH_EXEC_UPDATE_SUCCESS => {
                return status
                    .result()
                    .call("cuGraphExecUpdate")
                    .map_err(UpdateRefused::Call)
            }
            CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED => {
                "the topology changed (other nodes or other dependencies between them)"
            }
            CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED => "a node changed its type",
            CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED => {
                "a kernel node changed its function in a way the driver cannot apply"
            }
            CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE => {
                "a kernel node changed its function in a way the driver cannot apply"
            }
            CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED => {
                "a node changed parameters the driver cannot update (a copy's memory type \
                 or device, a memset's dimensions)"
            }
            CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED => {
                "the graph contains work the driver cannot update"
            }
            CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED => "a node changed its attributes",
            CU_GRAPH_EXEC_UPDATE_ERROR => "the driver refused the update",
        };
        Err(UpdateRefused::Driver(reason))
    }
}

impl Drop for RawGraphExec {
    fn drop(&mut self) {
        let _bound = self.context.bind();
        // SAFETY: made by `instantiate`, destroyed once, here, with its context alive
        // (held) and bound; a run still in flight completes first (see the type's docs).
        // A failure only leaks it.
        let _ = unsafe { result::graph::exec_destroy(self.raw) };
    }
}
