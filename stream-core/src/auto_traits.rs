//! Pins which types are `Send`/`Sync` and which are not, with the reason for each.

use static_assertions::{assert_impl_all, assert_not_impl_any};

use crate::*;

// Handles to the device and its streams are shared freely between threads: the driver
// is thread-safe and every entry point binds the context on the calling thread.
assert_impl_all!(Device: Send, Sync, Clone);
assert_impl_all!(Stream: Send, Sync);
// Owned memory outside scopes behaves like `Vec<T>`.
assert_impl_all!(DeviceVec<f32>: Send, Sync);
assert_impl_all!(PinnedBuffer<f32>: Send, Sync);
// Pinned memory is not duplicated implicitly either (a clone would page-lock more).
assert_not_impl_any!(PinnedBuffer<f32>: Clone);
// Statistics are plain numbers, read from any thread.
assert_impl_all!(PinnedMemoryStats: Send, Sync, Copy, Default, PartialEq, std::fmt::Debug);
assert_impl_all!(staging::StagingConfig: Send, Sync, Copy, Default, PartialEq);
assert_impl_all!(Error: Send, Sync, std::error::Error);
// A timer's recorded ends are state of the thread recording with it (like a cuBLAS
// handle's stream): it moves between threads, one thread at a time uses it.
assert_impl_all!(GpuTimer: Send, std::fmt::Debug);
assert_not_impl_any!(GpuTimer: Sync, Clone);
// Memory statistics are plain numbers, copied out of the driver.
assert_impl_all!(DeviceMemoryStats: Send, Sync, Copy, std::fmt::Debug, Default);

// A scope and everything branded by it stay on the thread that opened the scope: that
// thread has the scope's context current, and only it may issue the scope's work.
assert_not_impl_any!(Scope<'static, 'static>: Send, Sync);
assert_not_impl_any!(DeviceBuffer<'static, f32>: Send, Sync);
assert_not_impl_any!(DeviceSlice<'static, 'static, f32>: Send, Sync);
assert_not_impl_any!(DeviceSliceMut<'static, 'static, f32>: Send, Sync);
assert_not_impl_any!(Pending<'static, &'static mut [f32]>: Send, Sync);
// Views lent to a fork are branded views too.
assert_not_impl_any!(<&'static DeviceBuffer<'static, f32> as Lend<'static>>::Views<'static>: Send, Sync);

// Device memory is moved around by ownership, never duplicated.
assert_not_impl_any!(DeviceBuffer<'static, f32>: Clone);
assert_not_impl_any!(DeviceSliceMut<'static, 'static, f32>: Clone);
assert_not_impl_any!(DeviceVec<f32>: Clone);
assert_impl_all!(DeviceSlice<'static, 'static, f32>: Copy);

// Managed memory: the vec behaves like `Vec<T>` (owned, shared by reference for reads);
// its views are branded like every view; its statistics and mode are plain values.
assert_impl_all!(ManagedVec<f32>: Send, Sync);
assert_not_impl_any!(ManagedVec<f32>: Clone);
assert_not_impl_any!(ManagedSlice<'static, 'static, f32>: Send, Sync);
assert_not_impl_any!(ManagedSliceMut<'static, 'static, f32>: Send, Sync, Clone);
assert_impl_all!(ManagedSlice<'static, 'static, f32>: Copy);
assert_impl_all!(ManagedMemoryStats: Send, Sync, Copy, Default, PartialEq, std::fmt::Debug);
assert_impl_all!(ManagedAccess: Send, Sync, Copy, PartialEq, std::fmt::Debug);
// Managed views lent to a fork are branded views too.
assert_not_impl_any!(<&'static ManagedSliceMut<'static, 'static, f32> as Lend<'static>>::Views<'static>: Send, Sync);
// The futures of `stream_core::future` can run on multi-threaded executors when what
// they own and return is `Send`, and are `Unpin` (nothing in them is pinned).
assert_impl_all!(future::RunOwned<(PinnedBuffer<f32>, DeviceVec<f32>), usize, Error>: Send, Unpin);
assert_impl_all!(future::CopyOwned<DeviceVec<f32>, Vec<f32>>: Send, Unpin);
assert_impl_all!(future::CopyOwned<std::sync::Arc<DeviceVec<f32>>, PinnedBuffer<f32>>: Send, Unpin);
assert_not_impl_any!(future::RunOwned<(), std::rc::Rc<u8>, Error>: Send);
assert_impl_all!(future::CompletionStats: Send, Sync, Copy, Default, PartialEq, std::fmt::Debug);
