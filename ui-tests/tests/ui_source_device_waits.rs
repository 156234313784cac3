//! The library never waits for the whole device unless the user chose it: which calls
//! wait for or reset the whole device, and where the implicit ones may be, checked by
//! reading the source files.
//!
//! (This file lives in `ui-tests`, whose test binaries run only where the sources and
//! cargo are, never on the GPU machine; its name starts with `ui` so that the packing
//! script leaves it out.)

mod source;
use source::{read_sources, workspace_root, Source};

/// The library's source folders, relative to the workspace root.
const LIBRARY_SOURCES: &[&str] = &[
    "stream-core/src",
    "stream-macros/src",
    "kernels/src",
    "kernels/cuda",
];

/// Every source file of [`LIBRARY_SOURCES`], read.
fn library_sources() -> Vec<Source> {
    let root = workspace_root();
    LIBRARY_SOURCES
        .iter()
        .flat_map(|dir| read_sources(&root, dir))
        .collect()
}

/// Calls that wait for, or reset, the whole device. The safety model promises the
/// library never makes one: it synchronises one stream or one event at a time.
const DEVICE_WIDE: &[&str] = &[
    "cuCtxSynchronize",
    "ctx::synchronize",
    "cudaDeviceSynchronize",
    "cuDevicePrimaryCtxReset",
    "cudaDeviceReset",
    "CudaContext",
];

/// The files that convert cudarc's values (`stream_core::interop`'s cudarc conversions)
/// and so name cudarc's `CudaContext` type, which [`DEVICE_WIDE`] bans elsewhere. They
/// may call none of cudarc's methods that can wait for the whole device
/// ([`CUDARC_DEVICE_WIDE`]).
const CUDARC_CONTEXT_ALLOWED: &[&str] = &[
    "stream-core/src/interop/cudarc_handles.rs",
    "stream-core/src/interop/cudarc_slice.rs",
];

/// cudarc's calls that can wait for the whole device: `CudaContext::synchronize` (and a
/// stream's, which the conversions never need), `new_stream`, which synchronises the
/// context when it makes the context's first stream, and the pinned and `cuMemAlloc`
/// memory cudarc frees with device-wide calls.
const CUDARC_DEVICE_WIDE: &[&str] = &[
    ".synchronize(",
    ".new_stream(",
    ".new_stream_with_priority(",
    "alloc_pinned",
    "free_sync",
];

/// Calls that wait for the whole device *implicitly* (the driver's and cuBLAS's
/// documented behaviour, or measured: `cuMemFreeHost` stalled behind a kernel on another
/// thread's stream). The safety model allows them only where the user chose such a
/// point: trimming the pinned pool, dropping a device. Each may appear only in the file
/// named beside it, on a line right after a `// DEVICE-WIDE SYNC:` comment that says
/// where it is reached from. `cuMemFree` "may perform implicit synchronization" for
/// memory not from the stream-ordered allocator: it frees managed memory only, from the
/// drop of a `ManagedVec` (documented there as waiting for the device).
const IMPLICIT_DEVICE_SYNC: &[(&str, &str)] = &[
    ("free_host", "stream-core/src/driver/pinned.rs"),
    ("cuMemFreeHost", "stream-core/src/driver/pinned.rs"),
    ("module::unload", "stream-core/src/driver/module.rs"),
    ("cuModuleUnload", "stream-core/src/driver/module.rs"),
    ("destroy_handle", "kernels/src/cublas.rs"),
    ("cublasDestroy", "kernels/src/cublas.rs"),
    ("free_sync", ""),
    ("memory_free", ""),
    ("cuMemFree_v2", "stream-core/src/driver/managed.rs"),
    ("cuMemFree(", ""),
    ("cuMemHostUnregister", ""),
];

/// The driver-layer functions that make those calls, and the only files that may name
/// them: the pinned pool's release (from `Device::trim_pinned_memory` and the pool's
/// drop, which is the device's), the module cache's drop (the device's) and the drop of
/// a `ManagedVec`.
const REACHED_ONLY_FROM: &[(&str, &[&str])] = &[
    (
        "free_waiting_for_device(",
        &[
            "stream-core/src/driver/pinned.rs",
            "stream-core/src/host/pinned_pool.rs",
        ],
    ),
    ("release_cached(", &["stream-core/src/host/pinned_pool.rs"]),
    (
        "unload_waiting_for_device(",
        &[
            "stream-core/src/driver/module.rs",
            "stream-core/src/kernel/module_cache.rs",
        ],
    ),
    (
        "free_managed_waiting_for_device(",
        &[
            "stream-core/src/driver/managed.rs",
            "stream-core/src/managed/managed_vec.rs",
        ],
    ),
];

#[test]
fn library_never_synchronises_the_whole_device() {
    let sources = library_sources();
    assert!(
        sources.len() >= 20,
        "found only {} source files under {LIBRARY_SOURCES:?}",
        sources.len()
    );
    let mut found = Vec::new();
    for Source { relative, text } in &sources {
        let (allowed, also_banned): (&[&str], &[&str]) =
            if CUDARC_CONTEXT_ALLOWED.contains(&relative.as_str()) {
                (&["CudaContext"], CUDARC_DEVICE_WIDE)
            } else {
                (&[], &[])
            };
        for (number, line) in device_wide_calls(text, allowed, also_banned) {
            found.push(format!("{relative}:{number}: {line}"));
        }
    }
    assert!(
        found.is_empty(),
        "the library must never synchronise or reset the whole device (synchronise one \
         stream or event instead); found:\n{}",
        found.join("\n")
    );
}

#[test]
fn implicit_device_wide_waits_happen_only_where_the_user_chose_them() {
    let mut found = Vec::new();
    for Source { relative, text } in &library_sources() {
        found.extend(misplaced_implicit_waits(relative, text));
    }
    assert!(
        found.is_empty(),
        "calls that wait for the whole device may appear only where the user chose such a \
         point (trim_pinned_memory, dropping the device), each after a `// DEVICE-WIDE SYNC:` \
         comment; found:\n{}",
        found.join("\n")
    );
}

/// The violations in `source` (the file at `relative`): an implicit device-wide call
/// outside its file or without its marker comment, or a wrapper of one called from a
/// file not allowed to.
fn misplaced_implicit_waits(relative: &str, source: &str) -> Vec<String> {
    let lines: Vec<&str> = source.lines().collect();
    let mut found = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for (call, allowed_file) in IMPLICIT_DEVICE_SYNC {
            if !code.contains(call) {
                continue;
            }
            let marked = lines[index.saturating_sub(6)..index]
                .iter()
                .any(|l| l.trim_start().starts_with("// DEVICE-WIDE SYNC:"));
            if relative != *allowed_file || !marked {
                found.push(format!("{relative}:{}: {}", index + 1, line.trim()));
            }
        }
        for (wrapper, allowed_files) in REACHED_ONLY_FROM {
            if code.contains(wrapper) && !allowed_files.contains(&relative) {
                found.push(format!("{relative}:{}: {}", index + 1, line.trim()));
            }
        }
    }
    found
}

/// The check flags an implicit device-wide call without its marker or in another file,
/// and accepts a marked one in its own file.
#[test]
fn the_implicit_wait_check_detects_unmarked_and_misplaced_calls() {
    let marked = "fn f() {\n    // DEVICE-WIDE SYNC: from the device's drop.\n    // SAFETY: ...\n    unsafe { result::free_host(p) };\n}\n";
    let unmarked = "fn f() {\n    unsafe { result::free_host(p) };\n}\n";
    let own = "stream-core/src/driver/pinned.rs";
    assert!(misplaced_implicit_waits(own, marked).is_empty());
    assert_eq!(misplaced_implicit_waits(own, unmarked).len(), 1);
    let elsewhere = "stream-core/src/host/pinned_pool.rs";
    assert_eq!(misplaced_implicit_waits(elsewhere, marked).len(), 1);
    let wrapper = "let x = pool.release_cached(false, 0);";
    assert_eq!(
        misplaced_implicit_waits("stream-core/src/scope/mod.rs", wrapper).len(),
        1
    );
    assert_eq!(
        misplaced_implicit_waits("kernels/src/cublas.rs", "unsafe { cuMemFree_v2(p) };").len(),
        1
    );
}

/// Lines (1-based number, trimmed text) of `source` whose code, outside `//` comments,
/// names a device-wide call: one of [`DEVICE_WIDE`] but those `allowed`, or one of
/// `also_banned`.
fn device_wide_calls<'a>(
    source: &'a str,
    allowed: &[&str],
    also_banned: &[&str],
) -> Vec<(usize, &'a str)> {
    source
        .lines()
        .enumerate()
        .filter(|(_, line)| {
            // Comments may name the calls (to say they are never made).
            let code = line.split("//").next().unwrap_or("");
            DEVICE_WIDE
                .iter()
                .filter(|call| !allowed.contains(call))
                .chain(also_banned)
                .any(|call| code.contains(call))
        })
        .map(|(index, line)| (index + 1, line.trim()))
        .collect()
}

/// The check finds every forbidden call in code, and none in comments.
#[test]
fn the_device_wide_check_detects_each_forbidden_call() {
    for call in DEVICE_WIDE {
        let source =
            format!("fn f() {{\n    // never {call} here\n    unsafe {{ {call}() }};\n}}\n");
        let found = device_wide_calls(&source, &[], &[]);
        assert_eq!(
            found.len(),
            1,
            "{call}: expected exactly line 3 in {source:?}, got {found:?}"
        );
        assert_eq!(found[0].0, 3, "{call}: expected line 3, got {found:?}");
    }
}

/// The cudarc conversions may name `CudaContext`, but not call cudarc's device-wide
/// methods.
#[test]
fn the_cudarc_conversions_name_the_context_type_but_call_nothing_device_wide() {
    let source = "fn f(c: Arc<CudaContext>) {\n    c.synchronize().unwrap();\n}\n";
    let lines = |allowed, banned| -> Vec<usize> {
        device_wide_calls(source, allowed, banned)
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    };
    assert_eq!(lines(&[], &[]), [1]);
    assert_eq!(lines(&["CudaContext"], &[]), Vec::<usize>::new());
    assert_eq!(lines(&["CudaContext"], CUDARC_DEVICE_WIDE), [2]);
}
