//! Invariants of the library's source that the type system cannot express, checked by
//! reading the source files.
//!
//! (This file lives in `ui-tests`, whose test binaries run only where the sources and
//! cargo are, never on the GPU machine; its name starts with `ui` so that the packing
//! script leaves it out.)

use std::fs;
use std::path::{Path, PathBuf};

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

/// The library's source folders, relative to the workspace root.
const LIBRARY_SOURCES: &[&str] = &[
    "stream-core/src",
    "stream-macros/src",
    "kernels/src",
    "kernels/cuda",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("ui-tests sits inside the workspace")
        .to_path_buf()
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("rs" | "cu" | "cuh")
        ) {
            out.push(path);
        }
    }
}

#[test]
fn library_never_synchronises_the_whole_device() {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in LIBRARY_SOURCES {
        source_files(&root.join(dir), &mut files);
    }
    assert!(
        files.len() >= 20,
        "found only {} source files under {LIBRARY_SOURCES:?}",
        files.len()
    );
    let mut found = Vec::new();
    for file in &files {
        let relative = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .to_string_lossy()
            .replace('\\', "/");
        let text = fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let (allowed, also_banned): (&[&str], &[&str]) =
            if CUDARC_CONTEXT_ALLOWED.contains(&relative.as_str()) {
                (&["CudaContext"], CUDARC_DEVICE_WIDE)
            } else {
                (&[], &[])
            };
        for (number, line) in device_wide_calls(&text, allowed, also_banned) {
            found.push(format!("{}:{number}: {line}", file.display()));
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
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in LIBRARY_SOURCES {
        source_files(&root.join(dir), &mut files);
    }
    let mut found = Vec::new();
    for file in &files {
        let relative = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .to_string_lossy()
            .replace('\\', "/");
        let text = fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        found.extend(misplaced_implicit_waits(&relative, &text));
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

/// The layering of `stream-core`: only `src/driver/` calls cudarc's `result` and `sys`
/// functions (and NVRTC); every other file uses the driver layer. Types of `sys`
/// (`CUstream`, `CUdeviceptr`, result codes) and `result::DriverError` may appear
/// anywhere.
#[test]
fn only_the_driver_layer_calls_cudarc() {
    let root = workspace_root().join("stream-core/src");
    let mut files = Vec::new();
    source_files(&root, &mut files);
    let mut found = Vec::new();
    for file in &files {
        let relative = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .to_string_lossy()
            .replace('\\', "/");
        if relative.starts_with("driver/") {
            continue;
        }
        let text = fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        for (number, line) in driver_calls(&text) {
            found.push(format!("stream-core/src/{relative}:{number}: {line}"));
        }
    }
    assert!(
        found.is_empty(),
        "only stream-core/src/driver/ may call cudarc's result/sys functions or NVRTC; \
         found:\n{}",
        found.join("\n")
    );
}

/// Lines of `source` whose code calls a cudarc `result` or `sys` function (a lowercase
/// name after `result::` or `sys::`: types and constants are capitalised) or names
/// cudarc's NVRTC bindings.
fn driver_calls(source: &str) -> Vec<(usize, &str)> {
    source
        .lines()
        .enumerate()
        .filter(|(_, line)| {
            let code = line.split("//").next().unwrap_or("");
            let lowercase_after = |marker: &str| {
                code.match_indices(marker).any(|(at, m)| {
                    code[at + m.len()..]
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_lowercase())
                })
            };
            lowercase_after("result::")
                || lowercase_after("sys::")
                || code.contains("cudarc::nvrtc")
        })
        .map(|(index, line)| (index + 1, line.trim()))
        .collect()
}

/// The layering check finds calls, and lets types and comments through.
#[test]
fn the_layering_check_tells_calls_from_types() {
    let source = "use cudarc::driver::{result::DriverError, sys};\n\
                  // result::stream::synchronize in a comment\n\
                  let s: sys::CUstream = x;\n\
                  unsafe { result::stream::synchronize(s) };\n\
                  unsafe { sys::cuStreamQuery(s) };\n";
    let found: Vec<usize> = driver_calls(source).into_iter().map(|(n, _)| n).collect();
    assert_eq!(found, [4, 5]);
}

/// What each folder of `stream-core/src` may use of the others (issue 12's layering;
/// the picture is in `stream-core/src/lib.rs`, "Layers"). `error/`, the one error type,
/// is below them all and uses none of them. Doc links (`[..](crate::x)`)
/// do not count; code does (`use crate::x`, `crate::x::...` in an expression).
const FOLDER_USES: &[(&str, &[&str])] = &[
    ("driver", &[]),
    ("device", &["driver"]),
    ("memory", &["device", "driver"]),
    ("trace", &["device", "driver"]),
    ("host", &["memory", "trace", "device", "driver"]),
    ("kernel", &["memory", "device", "driver"]),
    (
        "scope",
        &["host", "kernel", "trace", "memory", "device", "driver"],
    ),
    ("managed", &["scope", "memory", "device", "driver"]),
    (
        "graph",
        &[
            "scope", "host", "kernel", "memory", "trace", "device", "driver",
        ],
    ),
    ("timing", &["scope", "device", "driver"]),
    (
        "nccl",
        &["graph", "scope", "trace", "memory", "device", "driver"],
    ),
    ("future", &["scope", "host", "memory", "device", "driver"]),
    ("interop", &["graph", "scope", "memory", "device", "driver"]),
];

/// The folders `source` uses in code: `crate::<folder>` outside comments and doc links.
fn folders_used<'a>(source: &str, folders: &[&'a str]) -> Vec<(usize, &'a str)> {
    let mut used = Vec::new();
    for (index, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for &folder in folders {
            let needle = format!("crate::{folder}");
            let mentions = code.match_indices(&needle).any(|(at, _)| {
                let after = code[at + needle.len()..].chars().next();
                let before = code[..at].chars().last();
                // A whole path segment, not a doc link's target.
                !matches!(after, Some(c) if c.is_ascii_alphanumeric() || c == '_')
                    && !matches!(before, Some('(' | '`' | '['))
            });
            if mentions {
                used.push((index + 1, folder));
            }
        }
    }
    used
}

/// No folder of `stream-core/src` uses one that is not below it in the layering, so the
/// folders have no import cycles.
#[test]
fn folders_use_only_the_layers_below_them() {
    let root = workspace_root().join("stream-core/src");
    let folders: Vec<&str> = FOLDER_USES.iter().map(|(folder, _)| *folder).collect();
    let mut found = Vec::new();
    for (folder, allowed) in FOLDER_USES {
        let mut files = Vec::new();
        source_files(&root.join(folder), &mut files);
        assert!(
            !files.is_empty(),
            "stream-core/src/{folder}/ has no sources"
        );
        for file in &files {
            let text = fs::read_to_string(file)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
            for (number, used) in folders_used(&text, &folders) {
                if used != *folder && !allowed.contains(&used) {
                    found.push(format!(
                        "{}:{number}: {folder}/ uses {used}/",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "a folder uses one that is not below it (see FOLDER_USES):\n{}",
        found.join("\n")
    );
}

/// The folder check finds code paths, and lets comments and doc links through.
#[test]
fn the_folder_check_tells_code_from_doc_links() {
    let source = "use crate::scope::Scope;\n\
                  /// see [`scope`](crate::scope) and [crate::scope]\n\
                  let x = crate::interop::raw_stream(s); // crate::graph\n\
                  use crate::scoped_thing;\n";
    let found = folders_used(source, &["scope", "interop", "graph"]);
    assert_eq!(found, [(1, "scope"), (3, "interop")]);
}

/// What each file of `stream-core/src/driver/` may use of the others: each file only
/// the files below it (see "Layers" in `stream-core/src/lib.rs`), so the driver layer
/// has no import circle. `mod.rs` declares them all and uses none.
const DRIVER_FILE_USES: &[(&str, &[&str])] = &[
    ("versions", &[]),
    ("nvtx", &[]),
    ("device", &[]),
    ("context", &["device"]),
    ("stream", &["context"]),
    ("event", &["stream", "context"]),
    ("memory", &["stream"]),
    ("stream_scratch", &["memory", "stream"]),
    ("host_func", &["stream"]),
    ("pinned", &["context"]),
    ("pool", &["memory", "stream", "device", "versions"]),
    ("cudarc_bridge", &["pool", "event", "stream", "context"]),
    ("managed", &["stream", "context", "device", "versions"]),
    ("module", &["context", "device", "versions"]),
    ("nvrtc", &["module"]),
    ("launch", &["module", "stream"]),
    (
        "graph",
        &["launch", "module", "stream", "context", "versions"],
    ),
    ("nccl_abort", &["context"]),
    ("nccl_group", &[]),
    ("nccl", &["nccl_group"]),
    (
        "nccl_comm",
        &["nccl", "nccl_group", "nccl_abort", "stream", "context"],
    ),
    ("nccl_join", &["nccl_comm", "nccl", "nccl_abort", "context"]),
];

/// The driver files `source` uses in code: `super::<file>` or `crate::driver::<file>`
/// outside comments and doc links.
fn driver_files_used<'a>(source: &str, files: &[&'a str]) -> Vec<(usize, &'a str)> {
    let mut used = Vec::new();
    for (index, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for &file in files {
            let mentions = ["super::", "crate::driver::"].iter().any(|prefix| {
                let needle = format!("{prefix}{file}");
                code.match_indices(&needle).any(|(at, _)| {
                    let after = code[at + needle.len()..].chars().next();
                    let before = code[..at].chars().last();
                    !matches!(after, Some(c) if c.is_ascii_alphanumeric() || c == '_')
                        && !matches!(before, Some('(' | '`' | '[' | ':'))
                })
            });
            if mentions {
                used.push((index + 1, file));
            }
        }
    }
    used
}

/// Each file of `driver/` uses only the files listed below it in [`DRIVER_FILE_USES`],
/// and every file of the folder is listed.
#[test]
fn driver_files_use_only_the_files_below_them() {
    let root = workspace_root().join("stream-core/src/driver");
    let files: Vec<&str> = DRIVER_FILE_USES.iter().map(|(file, _)| *file).collect();
    let mut found = Vec::new();
    let mut listed = Vec::new();
    source_files(&root, &mut listed);
    for path in &listed {
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if stem != "mod" && !files.contains(&stem) {
            found.push(format!("{}: not in DRIVER_FILE_USES", path.display()));
        }
    }
    for (file, allowed) in DRIVER_FILE_USES {
        let path = root.join(format!("{file}.rs"));
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        for (number, used) in driver_files_used(&text, &files) {
            if used != *file && !allowed.contains(&used) {
                found.push(format!("{}:{number}: {file} uses {used}", path.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "a driver file uses one that is not below it (see DRIVER_FILE_USES):\n{}",
        found.join("\n")
    );
}

/// The driver-file check finds `super::` and `crate::driver::` paths in code, and lets
/// comments, doc links and longer names through.
#[test]
fn the_driver_file_check_tells_code_from_doc_links() {
    let source = "use super::stream::RawStream;\n\
                  /// see [`launch`](super::launch::launch)\n\
                  let x = crate::driver::event::RawEvent::new(c); // super::graph\n\
                  use super::stream_scratch::StreamScratch;\n";
    let found = driver_files_used(source, &["stream", "launch", "event", "graph"]);
    assert_eq!(found, [(1, "stream"), (3, "event")]);
}

/// `unsafe {` blocks in code (outside `//` comments) of `source`.
fn unsafe_blocks(source: &str) -> usize {
    source
        .lines()
        .map(|line| {
            line.split("//")
                .next()
                .unwrap_or("")
                .matches("unsafe {")
                .count()
        })
        .sum()
}

/// The per-folder counts of the table in `stream-core/src/lib.rs` ("Layers"): rows
/// ``//! | `folder/` | N | ... |``.
fn documented_unsafe_counts(lib_rs: &str) -> Vec<(String, usize)> {
    lib_rs
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.strip_prefix("//! |")?.split('|').collect();
            let folder = cells
                .first()?
                .trim()
                .strip_prefix('`')?
                .strip_suffix("/`")?;
            if !folder.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                return None;
            }
            let count = cells.get(1)?.trim().parse().ok()?;
            Some((folder.to_owned(), count))
        })
        .collect()
}

/// Every folder of `stream-core/src` has exactly the number of `unsafe` blocks that the
/// table in `lib.rs` says (a change that adds or removes one updates the table), and
/// the folders outside `driver/` hold no more than [`UNSAFE_OUTSIDE_DRIVER_LIMIT`].
#[test]
fn unsafe_blocks_per_folder_are_the_ones_lib_rs_counts() {
    let root = workspace_root().join("stream-core/src");
    let lib_rs = fs::read_to_string(root.join("lib.rs")).expect("cannot read lib.rs");
    let documented = documented_unsafe_counts(&lib_rs);
    assert!(
        documented.len() >= 9,
        "lib.rs's table of unsafe blocks per folder was not found: {documented:?}"
    );
    let mut wrong = Vec::new();
    let mut outside_driver = 0;
    let mut folders: Vec<String> = fs::read_dir(&root)
        .expect("cannot list stream-core/src")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect();
    folders.sort();
    for folder in &folders {
        let mut files = Vec::new();
        source_files(&root.join(folder), &mut files);
        let counted: usize = files
            .iter()
            .map(|f| unsafe_blocks(&fs::read_to_string(f).expect("cannot read a source")))
            .sum();
        if folder != "driver" {
            outside_driver += counted;
        }
        match documented.iter().find(|(name, _)| name == folder) {
            Some((_, written)) if *written == counted => {}
            Some((_, written)) => wrong.push(format!(
                "{folder}/: {counted} unsafe blocks, lib.rs says {written}"
            )),
            None if counted == 0 => {}
            None => wrong.push(format!(
                "{folder}/: {counted} unsafe blocks, and no row in lib.rs's table"
            )),
        }
    }
    let top_level: usize = fs::read_dir(&root)
        .expect("cannot list stream-core/src")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "rs"))
        .map(|e| unsafe_blocks(&fs::read_to_string(e.path()).expect("cannot read a source")))
        .sum();
    if top_level != 0 {
        wrong.push(format!(
            "the files directly in stream-core/src have {top_level} unsafe blocks: they belong in a folder"
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        outside_driver <= UNSAFE_OUTSIDE_DRIVER_LIMIT,
        "{outside_driver} unsafe blocks outside driver/, more than the {UNSAFE_OUTSIDE_DRIVER_LIMIT} allowed"
    );
}

/// The most `unsafe` blocks the folders outside `driver/` may hold together: today's
/// count, so that it can only go down (issue 29 aims at 40). 83 after the layout pass,
/// plus the one proof of `nccl/` (a collective's buffers), which a new capability
/// brought; 80 once a kernel's argument pointers carried their promise (`KernelArgs`)
/// through the `Enqueue` launch and a capture's record of it; 79 with a safe
/// `Pending` for an empty download; 81 with the staging calibration's real staged
/// copies (`host/staging/trials.rs`: their device memory as a ring's target, and its
/// free), which `host/` cannot write through scopes (a layer above it); 84 with what an
/// NCCL group keeps until its end (`nccl/group.rs`: a boxed value lent for the group,
/// its type erased to free it, and the free), so that a stand-in inside a group runs on
/// scratch memory instead of leaving the other rank's call without a partner; 79 once
/// the staged copies took a `StreamRange` (`memory/stream_range.rs`: device bytes lent
/// to one stream's work, made safely from a scope's brand and borrow) instead of a raw
/// pointer under an `unsafe fn` contract, which removed that contract's chain through
/// `scope/transfer.rs` and `host/staging/mod.rs`; 73 once stream-ordered allocations
/// were owned values (`driver::pool::StreamOrdered`, whose free is safe as a `Box`'s
/// drop is: the proofs are at the uses), which removed the frees of `DeviceBuffer`,
/// `DeviceVec`, the download snapshot (two) and the calibration's scratch, and a
/// download that completed on the host became a safe `Pending::complete` (an exclusive
/// borrow has no work in flight); 68 once the other owners' releases were safe for the
/// same reason (pinned blocks, managed memory, modules: `driver/`'s consuming methods,
/// which take the context's binding as an argument), a pinned block's bytes came from
/// its allocation's safe `bytes_mut`, and the owned scope was made by the one scope
/// constructor, `Scope::branded`, under the second alternative of its contract; 66 once
/// two `unsafe fn`s that only forwarded their contract to another one with no other
/// caller were merged with it (`OpenScope::register` into `LazyOpenScope::note_frees`,
/// `download::start_download` into `start_staged_download`); 65 with a safe
/// `Pending::staged` for an exclusively borrowed host slice, which registers the job with
/// the scope's copy-outs itself; 63 once a capture's origin stream was made capturing
/// by the driver layer at its creation (a fresh stream no one relied on) and the kernel
/// launch entry moved beside `KernelArgs` (`scope/launch.rs`, whose `unsafe fn launch`
/// makes them without a second `unsafe` constructor); 62 once a hand-off was one safe
/// method of the moved buffer (`DeviceBuffer::handed_off`: the wait and the new owner
/// made together, so no permit is needed); 63 with `Scope::replay_again` (a replay's
/// graph taken back from its `Pending` unwaited, as an `InFlight` that reaches none of
/// its memory, to be launched again behind the run still in flight: a new proof, about
/// the host not touching memory that run uses, which no type carried before).
const UNSAFE_OUTSIDE_DRIVER_LIMIT: usize = 63;

/// The count skips comments and reads the table's rows.
#[test]
fn the_unsafe_count_skips_comments_and_reads_the_table() {
    let source = "unsafe { a() };\n// unsafe { b() }\nlet x = unsafe { c() }; // unsafe {\n";
    assert_eq!(unsafe_blocks(source), 2);
    let lib = "//! | folder | unsafe blocks |\n//! |---|---|\n//! | `scope/`   | 18 | why |\n//! | `timing/`, `device/` | 0 | |\n";
    assert_eq!(documented_unsafe_counts(lib), [("scope".to_owned(), 18)]);
}

/// Lines of `source` whose string literals hold a run of six or more spaces between two
/// words: a message whose line continuation (`\` at a line's end) was lost, so the
/// next line's indentation is part of the text the user reads.
fn spaced_out_literals(source: &str) -> Vec<(usize, &str)> {
    source
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .filter(|(_, line)| {
            // The parts between quotes on the line (odd parts of a split on `"`).
            line.split('"').skip(1).step_by(2).any(|part| {
                let trimmed = part.trim();
                trimmed.contains("      ")
            })
        })
        .map(|(number, line)| (number + 1, line))
        .collect()
}

#[test]
fn messages_keep_their_line_continuations() {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in [
        "stream-core/src",
        "stream-macros/src",
        "kernels/src",
        "tests",
        "examples",
        "benchmarks/src",
    ] {
        source_files(&root.join(dir), &mut files);
    }
    let mut found = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        for (number, line) in spaced_out_literals(&text) {
            found.push(format!("{}:{number}: {}", file.display(), line.trim()));
        }
    }
    assert!(
        found.is_empty(),
        "string literals with a run of spaces inside (a lost `\\` line continuation?):\n{}",
        found.join("\n")
    );
}

/// The check finds a literal with a lost continuation and passes a continued one,
/// alignment outside literals, and comments.
#[test]
fn the_spacing_check_tells_lost_continuations_from_layout() {
    let lost =
        "    reason: \"a capture's collective was called,                      issue it\",\n";
    assert_eq!(spaced_out_literals(lost).len(), 1);
    let kept = "    reason: \"a capture's collective was called, \\\n              issue it\",\n";
    assert!(spaced_out_literals(kept).is_empty());
    let layout = "let x = \"a\";        let y = \"b\";\n// \"a        b\"\n";
    assert!(spaced_out_literals(layout).is_empty());
}
