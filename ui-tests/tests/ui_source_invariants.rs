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
        let text = fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        for (number, line) in device_wide_calls(&text) {
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

/// Lines (1-based number, trimmed text) of `source` whose code, outside `//` comments,
/// names a device-wide call.
fn device_wide_calls(source: &str) -> Vec<(usize, &str)> {
    source
        .lines()
        .enumerate()
        .filter(|(_, line)| {
            // Comments may name the calls (to say they are never made).
            let code = line.split("//").next().unwrap_or("");
            DEVICE_WIDE.iter().any(|call| code.contains(call))
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
        let found = device_wide_calls(&source);
        assert_eq!(
            found.len(),
            1,
            "{call}: expected exactly line 3 in {source:?}, got {found:?}"
        );
        assert_eq!(found[0].0, 3, "{call}: expected line 3, got {found:?}");
    }
}
