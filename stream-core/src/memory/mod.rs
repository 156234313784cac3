//! Device memory: what may live in it ([`DeviceRepr`]), the brand that keeps a scope's
//! memory in that scope, memory made in a scope ([`DeviceBuffer`]) or outside scopes
//! ([`DeviceVec`]), views of either, and the device's memory pool (statistics, and the
//! one out-of-memory recovery every allocation shares).
//!
//! Owns: `DeviceRepr`, the brand, `RawSlice`, `DeviceSlice(Mut)`, the sealed
//! `DeviceMemory(Mut)` traits, `StreamRange` (bytes lent to one stream's work), `DeviceBuffer`, `DeviceVec`, `DeviceMemoryStats`, the
//! registry of scopes open on each thread (for the out-of-memory retry), the process's list
//! of watched streams (for other threads' calls that wait for the whole device). Uses:
//! `driver/`, `device/`, `error`.

pub(crate) mod brand;
mod buffer;
mod device_vec;
mod pool;
mod repr;
mod stream_range;
pub(crate) mod view;
mod watched_streams;
#[cfg(test)]
pub(crate) use watched_streams::{test_hooks as watched_stream_hooks, WATCHDOG_GRACE};

pub use buffer::DeviceBuffer;
pub use device_vec::DeviceVec;
pub use pool::DeviceMemoryStats;
pub(crate) use pool::{bound_wait_before_device_release, LazyOpenScope};
pub use repr::DeviceRepr;
pub(crate) use repr::{as_bytes, as_bytes_mut, value_bytes};
pub(crate) use stream_range::StreamRange;
pub use view::{DeviceMemory, DeviceMemoryMut, DeviceSlice, DeviceSliceMut};
