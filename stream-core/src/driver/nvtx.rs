//! NVTX ranges (feature `nvtx`, off by default): what the library does shows on Nsight
//! Systems' timeline as named ranges of the calling thread (a scope, a fork, a capture,
//! a staged copy, ...), through cudarc's `nvtx` module, loaded at run time. Without the
//! feature, [`range`] is nothing at all; with it, but without the NVTX library
//! (`libnvToolsExt`) on the machine, it is one cached check and no range, never an
//! error.

use std::ffi::CStr;
use std::marker::PhantomData;

/// An open NVTX range: pushed on this thread's NVTX stack by [`range`], popped when
/// dropped. Not `Send`: NVTX's push/pop stack is per thread.
pub(crate) struct Range {
    _per_thread: PhantomData<*const ()>,
}

/// Opens the range `name` until the returned guard drops; `None` (and nothing to close)
/// without the `nvtx` feature or the NVTX library.
#[inline(always)]
#[must_use = "the range closes when the guard drops"]
pub(crate) fn range(name: &'static CStr) -> Option<Range> {
    #[cfg(feature = "nvtx")]
    if loaded::push(name) {
        return Some(Range {
            _per_thread: PhantomData,
        });
    }
    let _ = name;
    None
}

impl Drop for Range {
    fn drop(&mut self) {
        #[cfg(feature = "nvtx")]
        loaded::pop();
    }
}

#[cfg(feature = "nvtx")]
mod loaded {
    use std::ffi::CStr;
    use std::sync::atomic::{AtomicU8, Ordering};

    use cudarc::nvtx::sys;

    /// 0: not asked yet; 1: the library is there; 2: it is not.
    static PRESENT: AtomicU8 = AtomicU8::new(0);

    /// `true` when the NVTX library can be loaded (asked once).
    fn present() -> bool {
        match PRESENT.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => {
                // SAFETY: only `dlopen`s the library by its well-known names (and closes
                // it), so that a missing NVTX is "no ranges", not the panic of cudarc's
                // lazy loader.
                let found = unsafe { sys::is_culib_present() };
                PRESENT.store(if found { 1 } else { 2 }, Ordering::Relaxed);
                found
            }
        }
    }

    /// Pushes `name` when the library is there; `true` if it did.
    pub(super) fn push(name: &'static CStr) -> bool {
        if !present() {
            return false;
        }
        // SAFETY: `name` is a NUL-terminated string that lives for the whole program;
        // NVTX copies what it keeps. The library is present (checked above).
        unsafe { sys::nvtxRangePushA(name.as_ptr()) };
        true
    }

    /// Pops the range a [`push`] of this thread opened.
    pub(super) fn pop() {
        // SAFETY: called only by the drop of the guard of a successful `push` on this
        // thread (the guard is not `Send`), so the library is loaded and the stack holds
        // that range.
        unsafe { sys::nvtxRangePop() };
    }
}

#[cfg(test)]
mod tests {
    /// Without the feature a range is nothing; with it, nothing where the NVTX library is
    /// missing (as on CI machines) and a real range where it is there: either way nested
    /// ranges open and close without an error or a panic.
    #[test]
    fn ranges_open_and_close_with_or_without_the_library() {
        let outer = super::range(c"outer");
        let inner = super::range(c"inner");
        assert_eq!(outer.is_some(), inner.is_some());
        #[cfg(not(feature = "nvtx"))]
        assert!(outer.is_none());
        drop(inner);
        drop(outer);
    }
}
