//! The driver layer: the only code of this crate that calls cudarc's `result` and `sys`
//! layers (the CUDA driver API, and NVRTC).
//!
//! It follows cudarc's own layering (`sys` -> `result` -> safe) without cudarc's
//! per-slice event tracking, and offers two kinds of items:
//!
//! * **RAII handles**, safe to use: a retained primary context and the guard that binds
//!   it ([`context`]), a stream ([`stream`]) and the scratch memory it keeps for
//!   libraries' workspaces ([`stream_scratch`]), an event ([`event`]), a device's memory
//!   pool ([`pool`]), a loaded module and its functions ([`module`]), an NVRTC program
//!   ([`nvrtc`]), device queries ([`device`]), a page-locked host allocation
//!   ([`pinned`]), a managed (unified) allocation ([`managed`]), a captured graph and
//!   its executable instance ([`graph`]), a host function the driver calls after a
//!   stream's work ([`host_func`], behind an `unsafe trait` whose contract is the
//!   driver's rule for such callbacks), and cudarc's
//!   streams checked against a device's context ([`cudarc_bridge`]). Each owns or names
//!   a driver object that stays valid as long as the handle; what their methods do
//!   cannot break memory safety (the driver reports a mismatch as an error).
//! * **Raw operations** as `unsafe fn`, each with a `# Safety` section: copies and
//!   memsets ([`memory`]), frees, kernel launches ([`launch`]), graph launches and
//!   changes to an instantiated graph ([`graph`]), prefetches and stream attachment of
//!   managed memory ([`managed`]), and freeing pinned or managed memory or unloading a
//!   module, which wait for the whole device. Their callers, above this
//!   layer, prove what only they can know: that the memory is valid and no DMA or kernel
//!   still uses it.
//!
//! Any CUDA binding from 12.2 on builds it (the program picks cudarc's version feature),
//! and it runs on any driver from 12.2 on: the few entry points or types whose bindings
//! differ between versions go through [`versions`], which calls them by the names and C
//! signatures such drivers export.
//!
//! Nothing above this folder names `cudarc::driver::result`, `cudarc::driver::sys`
//! functions or `cudarc::nvrtc`; the handle *types* of `sys` (`CUstream`, `CUdeviceptr`,
//! ...) appear above it as plain values.

pub(crate) mod abort_handshake;
pub(crate) mod context;
pub(crate) mod cudarc_bridge;
pub(crate) mod device;
pub(crate) mod event;
pub(crate) mod function_slot;
pub(crate) mod graph;
#[cfg(test)]
pub(crate) mod host_flag;
pub(crate) mod host_func;
pub(crate) mod launch;
pub(crate) mod managed;
pub(crate) mod memory;
pub(crate) mod module;
pub(crate) mod nccl;
pub(crate) mod nccl_abort;
pub(crate) mod nccl_comm;
pub(crate) mod nccl_group;
pub(crate) mod nccl_join;
pub(crate) mod nccl_reduction;
pub(crate) mod nccl_user_op;
pub(crate) mod nvrtc;
pub(crate) mod nvtx;
pub(crate) mod pinned;
pub(crate) mod pool;
pub(crate) mod stream;
pub(crate) mod stream_scratch;
pub(crate) mod versions;
