//! The layering of `stream-core`, checked by reading the source files: only `driver/`
//! calls cudarc, each folder uses only the folders below it, and each file of `driver/`
//! only the files below it.
//!
//! (This file lives in `ui-tests`, whose test binaries run only where the sources and
//! cargo are, never on the GPU machine; its name starts with `ui` so that the packing
//! script leaves it out.)

use std::fs;

mod source;
use source::{read_sources, source_files, workspace_root, Source};

/// The layering of `stream-core`: only `src/driver/` calls cudarc's `result` and `sys`
/// functions (and NVRTC); every other file uses the driver layer. Types of `sys`
/// (`CUstream`, `CUdeviceptr`, result codes) and `result::DriverError` may appear
/// anywhere.
#[test]
fn only_the_driver_layer_calls_cudarc() {
    let mut found = Vec::new();
    for Source { relative, text } in &read_sources(&workspace_root(), "stream-core/src") {
        if relative.starts_with("stream-core/src/driver/") {
            continue;
        }
        for (number, line) in driver_calls(text) {
            found.push(format!("{relative}:{number}: {line}"));
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
    names_used(source, &["crate::"], folders, &['(', '`', '['])
}

/// The `names` that `source` uses in code, with their line numbers: `<prefix><name>`
/// for one of `prefixes`, a whole path segment, outside `//` comments and not right
/// after one of `not_after` (a doc link's target).
fn names_used<'a>(
    source: &str,
    prefixes: &[&str],
    names: &[&'a str],
    not_after: &[char],
) -> Vec<(usize, &'a str)> {
    let mut used = Vec::new();
    for (index, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for &name in names {
            let mentions = prefixes.iter().any(|prefix| {
                let needle = format!("{prefix}{name}");
                code.match_indices(&needle).any(|(at, _)| {
                    let after = code[at + needle.len()..].chars().next();
                    let before = code[..at].chars().last();
                    !matches!(after, Some(c) if c.is_ascii_alphanumeric() || c == '_')
                        && !before.is_some_and(|c| not_after.contains(&c))
                })
            });
            if mentions {
                used.push((index + 1, name));
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
        for Source { relative, text } in &read_sources(&root, folder) {
            for (number, used) in folders_used(text, &folders) {
                if used != *folder && !allowed.contains(&used) {
                    found.push(format!("{relative}:{number}: {folder}/ uses {used}/"));
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
    ("abort_handshake", &[]),
    ("nvtx", &[]),
    ("device", &[]),
    ("context", &["device"]),
    ("stream", &["context"]),
    ("event", &["stream", "context"]),
    ("memory", &["stream"]),
    ("stream_scratch", &["memory", "stream"]),
    ("host_func", &["stream"]),
    ("host_flag", &["stream", "context"]),
    ("pinned", &["context"]),
    ("pool", &["memory", "stream", "device", "versions"]),
    ("cudarc_bridge", &["pool", "event", "stream", "context"]),
    ("managed", &["stream", "context", "device", "versions"]),
    ("module", &["context", "device", "versions"]),
    ("function_slot", &["module"]),
    ("nvrtc", &["module"]),
    ("launch", &["module", "stream"]),
    (
        "graph",
        &["launch", "module", "stream", "context", "versions"],
    ),
    ("nccl_abort", &["context"]),
    ("nccl_group", &["abort_handshake"]),
    ("nccl_user_op", &[]),
    ("nccl", &["nccl_group", "nccl_user_op"]),
    (
        "nccl_comm",
        &[
            "nccl",
            "nccl_group",
            "nccl_abort",
            "abort_handshake",
            "stream",
            "context",
        ],
    ),
    ("nccl_join", &["nccl_comm", "nccl", "nccl_abort", "context"]),
    ("nccl_reduction", &["nccl_comm", "nccl", "nccl_user_op"]),
];

/// The driver files `source` uses in code: `super::<file>` or `crate::driver::<file>`
/// outside comments and doc links.
fn driver_files_used<'a>(source: &str, files: &[&'a str]) -> Vec<(usize, &'a str)> {
    names_used(
        source,
        &["super::", "crate::driver::"],
        files,
        &['(', '`', '[', ':'],
    )
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
