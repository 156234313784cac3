//! What the tests of the device's memory pool share (`test_memory_pool.rs`,
//! `test_out_of_memory.rs`): sizes, and the start of every test from the state
//! `Device::new` leaves.

use std::sync::MutexGuard;

use stream_core::Device;

use crate::gpu::device;
use crate::TestResult;

/// One mebibyte.
pub const MIB: usize = 1 << 20;

/// Tolerance for the pool's block granularity when comparing reserved or free bytes.
pub const SLACK: usize = 64 * MIB;

/// Elements of the host buffers the tests round-trip (4 MiB of `u32`).
pub const PROBE: usize = MIB;

/// Takes this binary's lock (the tests of a binary share one pool), and starts from the
/// state `Device::new` leaves: release threshold `u64::MAX`, nothing cached.
pub fn begin() -> TestResult<(MutexGuard<'static, ()>, Device)> {
    let lock = crate::serial();
    let dev = device()?;
    dev.set_memory_release_threshold(u64::MAX)?;
    dev.trim_memory(0)?;
    Ok((lock, dev))
}

/// `bytes` in MiB, for messages.
pub fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}
