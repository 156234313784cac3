//! The device's default memory pool, configured as this crate uses it (see the
//! [memory module's docs](crate::memory) for why).

use crate::driver::device::DeviceId;
use crate::driver::pool::{MemPool, U64Attribute};
use crate::error::Result;

/// The release threshold [`Device::new`](crate::Device::new) sets: never hand cached memory back on a
/// synchronisation (see the [memory module's docs](crate::memory) for why).
pub(crate) const KEEP_ALL_CACHED: u64 = u64::MAX;

/// Configures `device`'s default pool as this crate uses it: freed memory stays cached
/// ([`KEEP_ALL_CACHED`]), and one stream never waits for another to reuse memory (see
/// [`forbid_hidden_stream_dependencies`]).
pub(crate) fn configure_pool(device: DeviceId) -> Result<MemPool> {
    let pool = MemPool::default_of(device)?;
    forbid_hidden_stream_dependencies(pool)?;
    pool.set(U64Attribute::ReleaseThreshold, KEEP_ALL_CACHED)?;
    Ok(pool)
}

/// Stops `cuMemAllocAsync` from making one stream wait for another.
///
/// By default the driver may hand an allocation on stream B memory whose free was
/// queued on stream A, after inserting a wait of B on A: a hidden cross-stream
/// synchronisation (measured: a scope on B waited a whole second for a kernel on A).
/// Every free in this library is stream-ordered on the stream that used the memory
/// last, so the pool may still reuse memory on that stream, or once its free has completed,
/// but never by making an unrelated stream wait. (Out of memory, the one recovery in
/// [`DeviceInner::alloc_async`](crate::device::DeviceInner::alloc_async) waits for this
/// thread's streams on the host instead, so that such frees complete.)
fn forbid_hidden_stream_dependencies(pool: MemPool) -> Result<()> {
    pool.allow_internal_dependencies(false)
}
