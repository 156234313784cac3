//! What the `ui_source_*` tests share: where the library's sources are, and how to list
//! and read them.

use std::fs;
use std::path::{Path, PathBuf};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("ui-tests sits inside the workspace")
        .to_path_buf()
}

pub fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
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

/// A source file, read.
pub struct Source {
    /// Its path relative to the root it was read under, with `/` separators.
    pub relative: String,
    pub text: String,
}

/// Every source file under `root.join(dir)` (see [`source_files`]), read; at least one.
pub fn read_sources(root: &Path, dir: &str) -> Vec<Source> {
    let mut files = Vec::new();
    source_files(&root.join(dir), &mut files);
    assert!(!files.is_empty(), "{dir}/ has no sources");
    files
        .iter()
        .map(|file| Source {
            relative: file
                .strip_prefix(root)
                .unwrap_or(file)
                .to_string_lossy()
                .replace('\\', "/"),
            text: fs::read_to_string(file)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display())),
        })
        .collect()
}
