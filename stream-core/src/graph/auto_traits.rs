//! Pins which graph types are `Send`/`Sync` and which are not, with the reason for each.

use static_assertions::{assert_impl_all, assert_not_impl_any};

use crate::*;

// A capture, like a scope, is driven from the thread that opened it (its context is
// current there); so are the views and recorded copies branded by it.
assert_not_impl_any!(Capture<'static>: Send, Sync);
assert_not_impl_any!(PinnedSlice<'static, 'static, f32>: Send, Sync);
assert_not_impl_any!(PinnedSliceMut<'static, 'static, f32>: Send, Sync);
assert_not_impl_any!(Recorded<'static>: Send, Sync);
// A graph carries no brand: it may be kept, moved to another thread and replayed on any
// scope of its device. Shared access makes no driver call (reads of held memory only).
assert_impl_all!(Graph<(PinnedBuffer<f32>, PinnedBuffer<f32>)>: Send, Sync);
assert_impl_all!(Graph<(&'static DeviceVec<f32>, &'static mut DeviceVec<f32>)>: Send, Sync);
// It is not duplicated implicitly: a copy would replay into the same held memory.
assert_not_impl_any!(Graph<()>: Clone);
// Handles to kernel arguments are plain data, returned from the capture.
assert_impl_all!(KernelNode: Send, Sync, Copy);
assert_impl_all!(ScalarParam<f32>: Send, Sync, Copy);
