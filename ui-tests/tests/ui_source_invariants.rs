//! Invariants of the library's source that the type system cannot express, checked by
//! reading the source files: the `unsafe` blocks per folder that `lib.rs` counts, and
//! error messages that keep their line continuations. (The device-wide waits:
//! `ui_source_device_waits.rs`; the layering: `ui_source_layers.rs`.)
//!
//! (This file lives in `ui-tests`, whose test binaries run only where the sources and
//! cargo are, never on the GPU machine; its name starts with `ui` so that the packing
//! script leaves it out.)

use std::fs;

mod source;
use source::{read_sources, source_files, workspace_root, Source};

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
/// the host not touching memory that run uses, which no type carried before); 64 with a
/// pre-multiplied sum whose factor stays on the GPU (`nccl/request.rs`, `DeviceFactor`:
/// one element of the scope's memory that NCCL keeps the address of and reads when the
/// collective runs, borrowed as a send buffer is, and kept by the one request it is made
/// for: a new proof, since the driver makes the reduction before the collective that
/// reads it is issued); 63 once a new managed allocation was zeroed by the driver's
/// `ManagedAllocation::zeroed` (a raw host write whose proof is the driver's rule alone);
/// 65 with the process's list of watched streams (`memory/watched_streams.rs`: a scope's
/// stream listed while the scope borrows it, queried by another thread's call that waits
/// for the whole device under the list's lock: a new proof, about a stream of another
/// thread's scope, which no type of this thread can carry).
const UNSAFE_OUTSIDE_DRIVER_LIMIT: usize = 65;

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
    let mut found = Vec::new();
    for dir in [
        "stream-core/src",
        "stream-macros/src",
        "kernels/src",
        "tests",
        "examples",
        "benchmarks/src",
    ] {
        for Source { relative, text } in &read_sources(&root, dir) {
            for (number, line) in spaced_out_literals(text) {
                found.push(format!("{relative}:{number}: {}", line.trim()));
            }
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
