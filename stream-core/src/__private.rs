//! Items that macro expansions name (`::stream_core::__private::...`), and nothing
//! else: not public API, anything here may change in any release. Code outside this
//! crate that needs raw handles uses [`interop`](crate::interop).

pub use crate::device::Stream;
pub use crate::graph::Enqueue;
pub use crate::kernel::{
    BlockRule, Kernel, KernelParam, KernelShape, KernelSource, LaunchConfig, SharedRule,
};
pub use crate::memory::{DeviceMemory, DeviceMemoryMut, DeviceRepr};
pub use crate::scope::{arg, launch, scope, Scope};
pub use crate::Result;

/// Device address and length of memory a kernel reads: its two CUDA parameters
/// `const T* p, size_t p_len`.
#[inline(always)]
pub fn read_parts<'s, T: DeviceRepr>(memory: &impl DeviceMemory<'s, T>) -> [u64; 2] {
    let raw = memory.raw(crate::sealed::TOKEN);
    [raw.ptr, raw.len as u64]
}

/// Device address and length of memory a kernel writes: its two CUDA parameters
/// `T* p, size_t p_len`. Taking `&mut` is what proves no other argument aliases it.
#[inline(always)]
pub fn write_parts<'s, T: DeviceRepr>(memory: &mut impl DeviceMemoryMut<'s, T>) -> [u64; 2] {
    let raw = memory.raw(crate::sealed::TOKEN);
    [raw.ptr, raw.len as u64]
}

/// A scalar kernel argument; the bound is the check that only plain-old-data crosses.
#[inline(always)]
pub fn scalar<T: DeviceRepr>(value: T) -> T {
    value
}
