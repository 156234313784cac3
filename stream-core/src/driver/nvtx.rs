//! NVTX ranges (feature `nvtx`, off by default): what the library does shows on Nsight
//! Systems' timeline as named ranges of the calling thread (a scope, a fork, a capture,
//! a staged copy, ...).
//!
//! NVTX 3 is a protocol, not a library: a profiler that traces NVTX (`nsys profile
//! --trace=nvtx`) names its injection library in `NVTX_INJECTION64_PATH`; the program
//! loads it at its first range, calls its `InitializeInjectionNvtx2` with a function
//! that hands out the program's tables of function-pointer slots, and the tool writes its
//! handlers into the slots it implements. This file speaks that protocol itself (the
//! layout of NVIDIA's `nvtxDetail/nvtxImpl.h` and `nvtxTypes.h`), so no NVTX library is
//! needed: `libnvToolsExt`, which cudarc's `nvtx` module loads, is not shipped with CUDA
//! 13 at all. Without a tool attached, a range is one atomic load and no call. Without
//! the feature, [`range`] is nothing at all.

use std::ffi::CStr;
use std::marker::PhantomData;

/// An open NVTX range: pushed on this thread's NVTX stack by [`range`], popped when
/// dropped. Not `Send`: NVTX's push/pop stack is per thread.
pub(crate) struct Range {
    _per_thread: PhantomData<*const ()>,
}

/// Opens the range `name` until the returned guard drops; `None` (and nothing to close)
/// without the `nvtx` feature or without a tool that traces NVTX.
#[inline(always)]
#[must_use = "the range closes when the guard drops"]
pub(crate) fn range(name: &'static CStr) -> Option<Range> {
    #[cfg(feature = "nvtx")]
    if injection::attached() && injection::push(name) {
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
        injection::pop();
    }
}

#[cfg(feature = "nvtx")]
mod injection {
    use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
    use std::ptr;
    use std::sync::atomic::{AtomicPtr, Ordering};
    use std::sync::OnceLock;

    /// `nvtxRangePushA` and `nvtxRangePop` as a tool implements them.
    type PushA = unsafe extern "C" fn(*const c_char) -> c_int;
    type Pop = unsafe extern "C" fn() -> c_int;
    /// `nvtxGetExportTable`, which the program hands to the tool.
    type GetExportTable = unsafe extern "C" fn(u32) -> *const c_void;
    /// `InitializeInjectionNvtx2`, the tool's entry point: non-zero when it attached.
    type InitializeInjection = unsafe extern "C" fn(GetExportTable) -> c_int;

    /// One function-pointer slot a tool may write (`NvtxFunctionPointer`): null until it
    /// does, and null means "not implemented: do nothing".
    type Slot = AtomicPtr<c_void>;
    #[allow(clippy::declare_interior_mutable_const)] // a fresh slot per array element
    const EMPTY: Slot = AtomicPtr::new(ptr::null_mut());

    /// The slots of each callback module, indexed by NVTX's callback ids (`NVTX_CBID_*`,
    /// id 0 invalid). Only CORE's push and pop are ever called; the other modules exist
    /// because a tool asks for every table and may write into any of them.
    struct Slots {
        core: [Slot; CORE_SIZE],
        cuda: [Slot; 9],
        opencl: [Slot; 15],
        cudart: [Slot; 7],
        core2: [Slot; 16],
        sync: [Slot; 7],
    }
    const CORE_SIZE: usize = 16;
    const CBID_CORE_RANGE_PUSH_A: usize = 9;
    const CBID_CORE_RANGE_POP: usize = 11;

    static SLOTS: Slots = Slots {
        core: [EMPTY; CORE_SIZE],
        cuda: [EMPTY; 9],
        opencl: [EMPTY; 15],
        cudart: [EMPTY; 7],
        core2: [EMPTY; 16],
        sync: [EMPTY; 7],
    };

    /// A module's table as the tool sees it (`NvtxFunctionTable`): a pointer to each slot,
    /// index 0 null (the invalid id) and one null past the end, as in NVIDIA's headers
    /// ("a crash instead of silent corruption if a tool reads off the end").
    /// `Option<&Slot>` is a nullable pointer to the slot.
    #[repr(transparent)]
    struct Table<const N: usize>([Option<&'static Slot>; N]);

    /// The table of `slots`: `[None, Some(&slots[1]), .., Some(&slots[M-1]), None]`.
    const fn table<const M: usize, const N: usize>(slots: &'static [Slot; M]) -> Table<N> {
        assert!(N == M + 1);
        let mut entries = [None; N];
        let mut id = 1;
        while id < M {
            entries[id] = Some(&slots[id]);
            id += 1;
        }
        Table(entries)
    }

    static CORE: Table<17> = table(&SLOTS.core);
    static CUDA: Table<10> = table(&SLOTS.cuda);
    static OPENCL: Table<16> = table(&SLOTS.opencl);
    static CUDART: Table<8> = table(&SLOTS.cudart);
    static CORE2: Table<17> = table(&SLOTS.core2);
    static SYNC: Table<8> = table(&SLOTS.sync);

    /// `NvtxExportTableCallbacks` (export table id 1).
    #[repr(C)]
    struct Callbacks {
        struct_size: usize,
        get_module_function_table:
            unsafe extern "C" fn(c_int, *mut *const c_void, *mut c_uint) -> c_int,
    }
    static CALLBACKS: Callbacks = Callbacks {
        struct_size: size_of::<Callbacks>(),
        get_module_function_table,
    };

    /// `NvtxExportTableVersionInfo` (export table id 3): NVTX API version 3.
    #[repr(C)]
    struct VersionInfo {
        struct_size: usize,
        version: u32,
        reserved0: u32,
        set_injection_nvtx_version: unsafe extern "C" fn(u32),
    }
    static VERSION_INFO: VersionInfo = VersionInfo {
        struct_size: size_of::<VersionInfo>(),
        version: 3,
        reserved0: 0,
        set_injection_nvtx_version,
    };

    /// `nvtxGetExportTable`: the callbacks (1) and the version (3); null for any other id.
    extern "C" fn get_export_table(id: u32) -> *const c_void {
        match id {
            1 => (&raw const CALLBACKS).cast(),
            3 => (&raw const VERSION_INFO).cast(),
            _ => ptr::null(),
        }
    }

    /// `GetModuleFunctionTable`: the table of `module` (1 CORE, 2 CUDA, 3 OPENCL, 4
    /// CUDART, 5 CORE2, 6 SYNC) and its number of ids; 0 for an unknown module.
    unsafe extern "C" fn get_module_function_table(
        module: c_int,
        out_table: *mut *const c_void,
        out_size: *mut c_uint,
    ) -> c_int {
        let (table, entries): (*const c_void, usize) = match module {
            1 => ((&raw const CORE).cast(), CORE.0.len()),
            2 => ((&raw const CUDA).cast(), CUDA.0.len()),
            3 => ((&raw const OPENCL).cast(), OPENCL.0.len()),
            4 => ((&raw const CUDART).cast(), CUDART.0.len()),
            5 => ((&raw const CORE2).cast(), CORE2.0.len()),
            6 => ((&raw const SYNC).cast(), SYNC.0.len()),
            _ => return 0,
        };
        if !out_size.is_null() {
            // SAFETY: the tool passes null or a pointer it owns for us to write, as the
            // protocol defines (NVIDIA's implementation checks for null the same way).
            unsafe { *out_size = (entries - 1) as c_uint };
        }
        if !out_table.is_null() {
            // SAFETY: as for `out_size`.
            unsafe { *out_table = table };
        }
        1
    }

    /// `SetInjectionNvtxVersion`: reserved by NVIDIA; ignored, as in their implementation.
    extern "C" fn set_injection_nvtx_version(_version: u32) {}

    /// Whether a tool attached; asked once, at the first range of the process.
    static ATTACHED: OnceLock<bool> = OnceLock::new();

    #[inline(always)]
    pub(super) fn attached() -> bool {
        *ATTACHED.get_or_init(attach_named_tool)
    }

    /// Loads the injection library `NVTX_INJECTION64_PATH` names, if any, and lets it
    /// attach. A missing variable, a library that does not load or lacks the entry point,
    /// or an entry point that declines: no tool, no ranges, no error.
    fn attach_named_tool() -> bool {
        let Some(path) = std::env::var_os("NVTX_INJECTION64_PATH") else {
            return false;
        };
        // SAFETY: loading runs the library's initialisers; the library is the one the
        // profiler that started this process named for exactly this purpose.
        let Ok(library) = (unsafe { libloading::Library::new(path) }) else {
            return false;
        };
        // SAFETY: `InitializeInjectionNvtx2` has this signature in every NVTX injection.
        let init = match unsafe { library.get::<InitializeInjection>(c"InitializeInjectionNvtx2") }
        {
            Ok(symbol) => *symbol,
            Err(_) => return false,
        };
        // SAFETY: `init` came from the library just loaded (kept loaded below, for the
        // rest of the process, when it attaches).
        let attached = unsafe { hand_tables_to(init) };
        if attached {
            // The tool's handlers now sit in the slots: it must never be unloaded.
            std::mem::forget(library);
        }
        attached
    }

    /// Calls a tool's entry point with this program's export tables; `true` if it
    /// attached (wrote whatever slots it implements).
    ///
    /// # Safety
    /// `init` must be a live `InitializeInjectionNvtx2`, or a function that behaves as
    /// one: it may only write function pointers of the callback's type into the slots.
    unsafe fn hand_tables_to(init: InitializeInjection) -> bool {
        // SAFETY: the caller's contract; `get_export_table` and everything it hands out
        // are statics, alive for the whole process.
        unsafe { init(get_export_table) != 0 }
    }

    /// The handler the tool wrote into CORE slot `id`, if any.
    #[inline(always)]
    fn handler(id: usize) -> *mut c_void {
        SLOTS.core[id].load(Ordering::Relaxed)
    }

    /// Pushes `name` through the tool's `nvtxRangePushA`; `false` where it has none.
    pub(super) fn push(name: &'static CStr) -> bool {
        let f = handler(CBID_CORE_RANGE_PUSH_A);
        if f.is_null() {
            return false;
        }
        // SAFETY: a tool writes into slot RangePushA only its `nvtxRangePushA` (the
        // protocol's contract, see `hand_tables_to`), before `ATTACHED` was published,
        // which every caller has read; the pointer is not null (checked above).
        let push_a = unsafe { std::mem::transmute::<*mut c_void, PushA>(f) };
        // SAFETY: `name` is NUL-terminated and lives for the whole program.
        unsafe { push_a(name.as_ptr()) };
        true
    }

    /// Pops the range a [`push`] of this thread opened.
    pub(super) fn pop() {
        let f = handler(CBID_CORE_RANGE_POP);
        if !f.is_null() {
            // SAFETY: as in `push`, slot RangePop holds the tool's `nvtxRangePop`.
            let pop = unsafe { std::mem::transmute::<*mut c_void, Pop>(f) };
            // SAFETY: `nvtxRangePop` takes nothing.
            unsafe { pop() };
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use std::sync::atomic::AtomicUsize;

        static PUSHED: AtomicUsize = AtomicUsize::new(0);
        static POPPED: AtomicUsize = AtomicUsize::new(0);

        unsafe extern "C" fn counting_push(name: *const c_char) -> c_int {
            // SAFETY: `push` passes a NUL-terminated string.
            assert_eq!(unsafe { CStr::from_ptr(name) }, c"stream_core::test");
            PUSHED.fetch_add(1, Ordering::SeqCst);
            0
        }
        unsafe extern "C" fn counting_pop() -> c_int {
            POPPED.fetch_add(1, Ordering::SeqCst);
            0
        }

        /// The table of `module` as a tool reads it through the callbacks: the answer, the
        /// number of ids, and the table's entries (ids and the null past the end).
        fn module_table(module: c_int) -> (c_int, &'static [*mut *const c_void]) {
            let callbacks = get_export_table(1).cast::<Callbacks>();
            // SAFETY: export table 1 is `CALLBACKS`, a static `Callbacks`.
            let callbacks = unsafe { &*callbacks };
            let (mut table, mut size) = (ptr::null(), 0);
            // SAFETY: both out-pointers are locals of this function.
            let found =
                unsafe { (callbacks.get_module_function_table)(module, &mut table, &mut size) };
            if found == 0 {
                return (0, &[]);
            }
            // SAFETY: a table has `size + 1` entries, each a pointer (or null); it is static.
            let entries = unsafe { std::slice::from_raw_parts(table.cast(), size as usize + 1) };
            (found, entries)
        }

        /// What a tool does in `InitializeInjectionNvtx2`: finds the CORE table through
        /// the callbacks and writes its push and pop handlers into their slots.
        unsafe extern "C" fn tool(get: GetExportTable) -> c_int {
            assert!(std::ptr::fn_addr_eq(
                get,
                get_export_table as GetExportTable
            ));
            let (_, core) = module_table(1);
            // SAFETY: entries 9 and 11 of the CORE table point to its RangePushA and
            // RangePop slots, which a tool may write.
            unsafe { *core[9] = counting_push as *const c_void };
            // SAFETY: as above.
            unsafe { *core[11] = counting_pop as *const c_void };
            1
        }

        /// The tables are where NVIDIA's layout says, each with its ids and a slot for
        /// each, null at id 0 and past the end; unknown tables and modules are refused.
        #[test]
        fn the_export_tables_have_nvidia_s_layout() {
            let (none, version) = (get_export_table(2), get_export_table(3));
            assert!(none.is_null());
            // SAFETY: export table 3 is `VERSION_INFO`, a static `VersionInfo`.
            let version = unsafe { &*version.cast::<VersionInfo>() };
            assert_eq!((version.struct_size, version.version), (24, 3));
            assert_eq!(CALLBACKS.struct_size, 16);
            assert_eq!(module_table(0).0, 0);
            assert_eq!(module_table(7).0, 0);
            for (module, ids) in [(2, 9), (3, 15), (4, 7), (5, 16), (6, 7)] {
                let (found, entries) = module_table(module);
                assert_eq!((found, entries.len()), (1, ids + 1), "module {module}");
                assert!(entries[0].is_null() && entries[ids].is_null());
                assert!(entries[1..ids].iter().all(|slot| !slot.is_null()));
            }
            assert_eq!(module_table(1).1.len(), 17);
        }

        /// The whole handshake with a tool, as `nsys` makes it, without loading one: the
        /// tool finds each table where NVIDIA's layout says, and the ranges reach it.
        #[test]
        fn a_tool_attaches_through_the_export_tables_and_receives_the_ranges() {
            assert!(handler(CBID_CORE_RANGE_PUSH_A).is_null());
            // SAFETY: `tool` only writes handlers of the right types into their slots.
            assert!(unsafe { hand_tables_to(tool) });
            assert!(push(c"stream_core::test"));
            pop();
            assert_eq!(PUSHED.load(Ordering::SeqCst), 1);
            assert_eq!(POPPED.load(Ordering::SeqCst), 1);
        }
    }
}

#[cfg(test)]
mod tests {
    /// Without the feature a range is nothing; with it, nothing where no tool traces NVTX
    /// (as when the tests run) and a real range under one: either way nested ranges open
    /// and close without an error or a panic.
    #[test]
    fn ranges_open_and_close_with_or_without_a_tool() {
        let outer = super::range(c"outer");
        let inner = super::range(c"inner");
        assert_eq!(outer.is_some(), inner.is_some());
        #[cfg(not(feature = "nvtx"))]
        assert!(outer.is_none());
        drop(inner);
        drop(outer);
    }
}
