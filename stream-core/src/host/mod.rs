//! Host memory for transfers: page-locked buffers ([`PinnedBuffer`]) from a per-device
//! pool, and staged copies of pageable memory through pooled pinned blocks.
//!
//! Owns: `PinnedBuffer`, the pinned pool (`PinnedMemoryStats`, trimming), staging
//! (configuration, pinned-memory detection, the copy pipeline, its ring of blocks, the
//! multi-threaded memcpy). Uses: `driver/`, `device/`, `memory/` (element types),
//! `error`.

mod pinned_buffer;
pub(crate) mod pinned_pool;
pub(crate) mod staging;

pub use pinned_buffer::PinnedBuffer;
pub use pinned_pool::PinnedMemoryStats;
