//! Panic safety of scopes (`stream-core/src/scope/exit.rs`): a panic at any point of a
//! scope (after an upload, after a download, inside a nested scope, inside a forked
//! child, in the parent while a child's work runs, after a hand-off, inside a
//! `#[gpu_scope]` function) unwinds only after the scope has synchronised its stream.
//! So once `catch_unwind` returns, every download the scope enqueued is complete in
//! host memory (never half-written), every upload has read all of its source (which
//! may then be overwritten and freed), and the streams keep working.
//!
//! Every transfer is 256 MiB. In the first nine tests it is queued behind [`spin`], a
//! kernel that busy-waits about [`SPIN_CYCLES`] clock cycles (a few hundred
//! milliseconds), so that the DMA has not even started when the panic is raised. For
//! pinned host memory the tests prove that window: the download's `Pending::is_ready()`
//! is `false` just before the panic. (A staged download into pageable memory returns at
//! once too, but its copy-out runs on the staging thread, and the tests check the
//! outcome alone.) The last four (`panic_after_large_*`) panic right after enqueueing
//! the transfer, with no kernel in front: the DMA may be running at the panic.
//!
//! The tests run one at a time (a file-wide lock): the windows they prove are timing
//! windows, and another test's driver calls in the same process (page-locking 256 MiB
//! takes the driver tens of milliseconds) could delay the `is_ready` check past them.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::cell::Cell;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use gpu_tests::{
    check_eq, ensure, panic_message, poison, poisoned, round_trips_on, serial, stream, Element,
    Failed, Rng, TestResult, BIG_BYTES,
};
use stream_core::{gpu_scope, scope, DeviceMemoryMut, PinnedBuffer, Scope, Stream};

gpu_tests::test_main! {
    gpu: [
        panic_after_a_pinned_download_behind_a_spinning_kernel_leaves_it_complete,
        panic_after_a_pageable_download_behind_a_spinning_kernel_leaves_it_complete,
        panic_after_a_pinned_upload_behind_a_spinning_kernel_still_uploads_all_of_it,
        panic_after_a_pageable_upload_behind_a_spinning_kernel_still_uploads_all_of_it,
        panic_in_a_nested_scope_completes_the_downloads_of_both_scopes,
        panic_in_a_forked_child_completes_the_childs_and_the_parents_downloads,
        panic_in_the_parent_while_a_forked_childs_download_runs_completes_it,
        panic_after_a_hand_off_completes_the_new_owners_download,
        panic_in_a_gpu_scope_function_leaves_its_download_complete,
        panic_after_large_pageable_download_leaves_the_host_buffer_completely_written,
        panic_after_large_pinned_download_leaves_the_host_buffer_completely_written,
        panic_after_large_pageable_upload_then_freeing_the_source_is_harmless,
        panic_after_large_pinned_upload_then_freeing_the_source_is_harmless,
    ],
}

/// The message of the panics these tests raise on purpose (they print it: that is
/// expected).
const DELIBERATE: &str = "deliberate panic inside a scope (expected by this test)";

/// Elements of every transfer: 256 MiB of `u32`.
const LEN: usize = BIG_BYTES / 4;

/// How long [`spin`] busy-waits: about 0.2 to 0.4 s at the 1 to 2 GHz clocks of current
/// GPUs, against a few to a few tens of milliseconds for a 256 MiB transfer.
const SPIN_CYCLES: u64 = 400_000_000;

/// Enqueues the long kernel: after [`SPIN_CYCLES`] it writes `marker` to `y[0]`. Work
/// enqueued after it on the same stream (or joined after it) waits for it.
fn spin<'s>(
    s: &'s Scope<'s, '_>,
    y: &mut impl DeviceMemoryMut<'s, u32>,
    marker: u32,
) -> TestResult {
    gpu_tests::spin_then_write(s, SPIN_CYCLES, marker, y)?;
    Ok(())
}

/// Fresh data for one transfer and a marker distinct from its first element.
fn fresh(rng: &mut Rng) -> (Vec<u32>, u32) {
    let input: Vec<u32> = rng.vec(LEN);
    loop {
        // Never the poison (see `Rng::value`), and never what the upload wrote there.
        let marker: u32 = rng.value();
        if marker != input[0] {
            return (input, marker);
        }
    }
}

/// `Ok` when `host` is `input` with its first element replaced by `marker`: the
/// download ran after the spinning kernel and landed completely.
fn check_download(what: &str, input: &[u32], marker: u32, host: &[u32]) -> TestResult {
    ensure!(
        host.len() == input.len(),
        "{what}: {} elements, expected {}",
        host.len(),
        input.len()
    );
    ensure!(
        host[0] == marker,
        "{what}: element 0 is {}, expected the spinning kernel's marker {}{}",
        host[0].describe(),
        marker.describe(),
        if host[0] == u32::POISON {
            " (the poison: the download had not landed when catch_unwind returned)"
        } else {
            ""
        }
    );
    check_eq(what, &input[1..], &host[1..])
}

/// Pinned host memory of [`LEN`] elements, poisoned.
fn pinned(stream: &Stream) -> TestResult<PinnedBuffer<u32>> {
    let mut buf = stream.device().alloc_pinned::<u32>(LEN)?;
    poison(&mut buf);
    Ok(buf)
}

/// `Ok` when `caught` is the panic of [`DELIBERATE`].
fn expect_deliberate_panic<T: fmt::Debug>(caught: std::thread::Result<T>) -> TestResult {
    match caught {
        Err(payload) if panic_message(&*payload) == DELIBERATE => Ok(()),
        Err(payload) => Err(format!("a different panic: {}", panic_message(&*payload)).into()),
        Ok(result) => Err(format!("the scope did not panic; it returned {result:?}").into()),
    }
}

/// `Ok` when the download was still in flight just before the panic (`was_ready`
/// recorded `Some(false)`), which is what makes the test prove anything.
fn expect_in_flight(what: &str, was_ready: Option<bool>) -> TestResult {
    ensure!(
        was_ready == Some(false),
        "{what}: the download was {} just before the panic, so the test did not exercise \
         unwinding with DMA pending (did the spinning kernel spin?)",
        match was_ready {
            Some(true) => "already complete",
            _ => "never enqueued",
        }
    );
    Ok(())
}

/// A small round trip on each stream: they still work after the panic.
fn streams_still_work(streams: &[&Stream]) -> TestResult {
    let mut rng = Rng::new();
    for (i, stream) in streams.iter().enumerate() {
        let input: Vec<u32> = rng.vec(4097);
        let mut out = poisoned::<u32>(input.len());
        scope(stream, |s| -> TestResult {
            let x = s.upload(&input)?;
            s.copy_to_host(&x, &mut out)?.wait()?;
            Ok(())
        })?;
        check_eq(
            &format!("round trip on stream {i} after the panic"),
            &input,
            &out,
        )?;
    }
    Ok(())
}

/// Uploads `input`, spins, downloads into `host` and panics with the download pending;
/// records whether it was ready just before the panic.
fn spin_download_then_panic(
    stream: &Stream,
    input: &[u32],
    marker: u32,
    host: &mut [u32],
) -> TestResult<Option<bool>> {
    let was_ready = Cell::new(None);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        scope(stream, |s| -> TestResult {
            let mut x = s.upload(input)?;
            spin(s, &mut x, marker)?;
            let pending = s.copy_to_host(&x, host)?;
            was_ready.set(Some(pending.is_ready()?));
            panic!("{DELIBERATE}");
        })
    }));
    expect_deliberate_panic(caught)?;
    Ok(was_ready.get())
}

/// A 256 MiB download into pinned memory, queued behind the spinning kernel, pending
/// when the scope panics: complete once `catch_unwind` returns.
fn panic_after_a_pinned_download_behind_a_spinning_kernel_leaves_it_complete() -> TestResult {
    let _serial = serial();
    let stream = stream()?;
    let (input, marker) = fresh(&mut Rng::new());
    let mut host = pinned(&stream)?;
    let was_ready = spin_download_then_panic(&stream, &input, marker, &mut host)?;
    check_download(
        "pinned download pending at the panic",
        &input,
        marker,
        &host,
    )?;
    expect_in_flight("pinned download", was_ready)?;
    streams_still_work(&[&stream])
}

/// The same into pageable memory (the driver call returns once the copy has landed).
fn panic_after_a_pageable_download_behind_a_spinning_kernel_leaves_it_complete() -> TestResult {
    let _serial = serial();
    let stream = stream()?;
    let (input, marker) = fresh(&mut Rng::new());
    let mut host = poisoned::<u32>(LEN);
    spin_download_then_panic(&stream, &input, marker, &mut host)?;
    check_download("pageable download at the panic", &input, marker, &host)?;
    streams_still_work(&[&stream])
}

/// Uploads from host memory made by `make` into an attached `DeviceVec`, queued behind
/// the spinning kernel (which writes the vector's first element), and panics. After
/// `catch_unwind` the source is poisoned and freed, and new memory of the same kind is
/// poisoned (likely the same pages); the vector must hold the original data, all of it:
/// the upload ran after the kernel and before the scope let the panic go on.
fn panic_after_upload_from<H>(make: impl Fn(&Stream) -> TestResult<H>) -> TestResult
where
    H: std::ops::DerefMut<Target = [u32]>,
{
    let stream = stream()?;
    let (expected, marker) = fresh(&mut Rng::new());
    let mut source = make(&stream)?;
    source.copy_from_slice(&expected);
    let mut target = stream.device().alloc_vec::<u32>(LEN)?;
    let caught = catch_unwind(AssertUnwindSafe(|| {
        scope(&stream, |s| -> TestResult {
            let mut t = s.attach(&mut target)?;
            spin(s, &mut t, marker)?;
            s.copy_to_device(&source, &mut t)?;
            panic!("{DELIBERATE}");
        })
    }));
    expect_deliberate_panic(caught)?;
    poison(&mut source);
    drop(source);
    let mut reuse = make(&stream)?;
    poison(&mut reuse);
    drop(reuse);
    check_eq(
        "DeviceVec uploaded into behind a spinning kernel before a panic",
        &expected,
        &target.to_host_vec()?,
    )?;
    streams_still_work(&[&stream])
}

fn panic_after_a_pinned_upload_behind_a_spinning_kernel_still_uploads_all_of_it() -> TestResult {
    let _serial = serial();
    panic_after_upload_from(pinned)
}

fn panic_after_a_pageable_upload_behind_a_spinning_kernel_still_uploads_all_of_it() -> TestResult {
    let _serial = serial();
    panic_after_upload_from(|_| Ok(poisoned::<u32>(LEN)))
}

/// The outer scope (stream `a`) has a pinned download pending behind its spinning
/// kernel when the inner scope (stream `b`) starts its own and panics: after
/// `catch_unwind`, both are complete (each scope synchronised its own stream while
/// unwinding).
fn panic_in_a_nested_scope_completes_the_downloads_of_both_scopes() -> TestResult {
    let _serial = serial();
    let a = stream()?;
    let b = a.device().new_stream()?;
    let mut rng = Rng::new();
    let (outer_in, outer_marker) = fresh(&mut rng);
    let (inner_in, inner_marker) = fresh(&mut rng);
    let mut outer_host = pinned(&a)?;
    let mut inner_host = pinned(&a)?;
    let (outer_ready, inner_ready) = (Cell::new(None), Cell::new(None));
    let caught = catch_unwind(AssertUnwindSafe(|| {
        scope(&a, |s| -> TestResult {
            let mut x = s.upload(&outer_in)?;
            spin(s, &mut x, outer_marker)?;
            let outer = s.copy_to_host(&x, &mut outer_host)?;
            outer_ready.set(Some(outer.is_ready()?));
            scope(&b, |t| -> TestResult {
                let mut y = t.upload(&inner_in)?;
                spin(t, &mut y, inner_marker)?;
                let inner = t.copy_to_host(&y, &mut inner_host)?;
                inner_ready.set(Some(inner.is_ready()?));
                panic!("{DELIBERATE}");
            })
        })
    }));
    expect_deliberate_panic(caught)?;
    check_download(
        "inner scope's download",
        &inner_in,
        inner_marker,
        &inner_host,
    )?;
    check_download(
        "outer scope's download",
        &outer_in,
        outer_marker,
        &outer_host,
    )?;
    expect_in_flight("outer scope's download", outer_ready.get())?;
    expect_in_flight("inner scope's download", inner_ready.get())?;
    streams_still_work(&[&a, &b])
}

/// The parent (stream `a`) has a pinned download pending; a forked child (stream `b`)
/// spins on a lent buffer, downloads it and panics. The fork's join and the outer
/// scope's synchronisation run while unwinding: both downloads are complete.
fn panic_in_a_forked_child_completes_the_childs_and_the_parents_downloads() -> TestResult {
    let _serial = serial();
    let a = stream()?;
    let b = a.device().new_stream()?;
    let mut rng = Rng::new();
    let (parent_in, parent_marker) = fresh(&mut rng);
    let (child_in, child_marker) = fresh(&mut rng);
    let mut parent_host = pinned(&a)?;
    let mut child_host = pinned(&a)?;
    let child_dst: &mut [u32] = &mut child_host;
    let (parent_ready, child_ready) = (Cell::new(None), Cell::new(None));
    let caught = catch_unwind(AssertUnwindSafe(|| {
        scope(&a, |s| -> TestResult {
            let mut x = s.upload(&parent_in)?;
            spin(s, &mut x, parent_marker)?;
            let parent = s.copy_to_host(&x, &mut parent_host)?;
            parent_ready.set(Some(parent.is_ready()?));
            let mut lent = s.upload(&child_in)?;
            s.fork(&b, &mut lent, |c, mut y| -> TestResult {
                spin(c, &mut y, child_marker)?;
                let child = c.copy_to_host(&y, child_dst)?;
                child_ready.set(Some(child.is_ready()?));
                panic!("{DELIBERATE}");
            })
        })
    }));
    expect_deliberate_panic(caught)?;
    check_download(
        "forked child's download",
        &child_in,
        child_marker,
        &child_host,
    )?;
    check_download("parent's download", &parent_in, parent_marker, &parent_host)?;
    expect_in_flight("parent's download", parent_ready.get())?;
    expect_in_flight("forked child's download", child_ready.get())?;
    streams_still_work(&[&a, &b])
}

/// A forked child (stream `b`) enqueues a spinning kernel and a pinned download and
/// returns without waiting; the parent panics right after the fork. The join event
/// orders the child's work before the parent's stream, which the scope synchronises
/// while unwinding: the child's download is complete.
fn panic_in_the_parent_while_a_forked_childs_download_runs_completes_it() -> TestResult {
    let _serial = serial();
    let a = stream()?;
    let b = a.device().new_stream()?;
    let (input, marker) = fresh(&mut Rng::new());
    let mut host = pinned(&a)?;
    let dst: &mut [u32] = &mut host;
    let was_ready = Cell::new(None);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        scope(&a, |s| -> TestResult {
            s.fork(&b, (), |c, ()| -> TestResult {
                let mut y = c.upload(&input)?;
                spin(c, &mut y, marker)?;
                let pending = c.copy_to_host(&y, dst)?;
                was_ready.set(Some(pending.is_ready()?));
                Ok(())
            })?;
            panic!("{DELIBERATE}");
        })
    }));
    expect_deliberate_panic(caught)?;
    check_download(
        "child's download, pending when the parent panicked",
        &input,
        marker,
        &host,
    )?;
    expect_in_flight("child's download", was_ready.get())?;
    streams_still_work(&[&a, &b])
}

/// A buffer uploaded and spun on by the parent (stream `a`) is handed off to a forked
/// child (stream `b`), which downloads it and panics: the download, ordered after the
/// parent's kernel by the hand-off's event, is complete.
fn panic_after_a_hand_off_completes_the_new_owners_download() -> TestResult {
    let _serial = serial();
    let a = stream()?;
    let b = a.device().new_stream()?;
    let (input, marker) = fresh(&mut Rng::new());
    let mut host = pinned(&a)?;
    let dst: &mut [u32] = &mut host;
    let was_ready = Cell::new(None);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        scope(&a, |s| -> TestResult {
            let mut x = s.upload(&input)?;
            spin(s, &mut x, marker)?;
            s.fork(&b, (), |c, ()| -> TestResult {
                let x = s.hand_off(x, c)?;
                let pending = c.copy_to_host(&x, dst)?;
                was_ready.set(Some(pending.is_ready()?));
                panic!("{DELIBERATE}");
            })
        })
    }));
    expect_deliberate_panic(caught)?;
    check_download("handed-off buffer's download", &input, marker, &host)?;
    expect_in_flight("handed-off buffer's download", was_ready.get())?;
    streams_still_work(&[&a, &b])
}

/// Spins, downloads into `out` and panics, inside its own scope.
#[gpu_scope]
fn spin_download_and_panic_in_gpu_scope(
    s: &Scope,
    input: &[u32],
    marker: u32,
    out: &mut [u32],
    was_ready: &Cell<Option<bool>>,
) -> Result<(), Failed> {
    let mut x = s.upload(input)?;
    spin(s, &mut x, marker)?;
    let pending = s.copy_to_host(&x, out)?;
    was_ready.set(Some(pending.is_ready()?));
    panic!("{DELIBERATE}");
}

/// A `#[gpu_scope]` function panics with its pinned download pending: complete once
/// `catch_unwind` returns, like any scope.
fn panic_in_a_gpu_scope_function_leaves_its_download_complete() -> TestResult {
    let _serial = serial();
    let stream = stream()?;
    let (input, marker) = fresh(&mut Rng::new());
    let mut host = pinned(&stream)?;
    let was_ready = Cell::new(None);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        spin_download_and_panic_in_gpu_scope(&stream, &input, marker, &mut host, &was_ready)
    }));
    expect_deliberate_panic(caught)?;
    check_download("#[gpu_scope] function's download", &input, marker, &host)?;
    expect_in_flight("#[gpu_scope] function's download", was_ready.get())?;
    streams_still_work(&[&stream])
}

/// Without a kernel in front: panics inside a scope right after enqueueing a 256 MiB
/// download of a pattern into `host` (poisoned first): once `catch_unwind` returns,
/// every element must hold the pattern, because the scope synchronised its stream
/// while unwinding.
fn panic_right_after_download_into(stream: &Stream, host: &mut [u32]) -> TestResult {
    let pattern: u32 = Rng::new().value();
    let len = host.len();
    poison(host);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        scope(stream, |s| -> stream_core::Result<()> {
            let mut x = s.alloc::<u32>(len)?;
            s.fill(&mut x, pattern)?;
            let _download = s.copy_to_host(&x, host)?;
            panic!("{DELIBERATE}");
        })
    }));
    expect_deliberate_panic(caught)?;
    check_eq(
        "host buffer after a panic in the scope that downloads into it",
        &vec![pattern; len],
        host,
    )
}

fn panic_after_large_pageable_download_leaves_the_host_buffer_completely_written() -> TestResult {
    let _serial = serial();
    let stream = stream()?;
    let mut host = poisoned::<u32>(BIG_BYTES / 4);
    panic_right_after_download_into(&stream, &mut host)
}

fn panic_after_large_pinned_download_leaves_the_host_buffer_completely_written() -> TestResult {
    let _serial = serial();
    let stream = stream()?;
    let mut host = stream.device().alloc_pinned::<u32>(BIG_BYTES / 4)?;
    panic_right_after_download_into(&stream, &mut host)
}

/// Without a kernel in front: panics inside a scope right after enqueueing a 256 MiB
/// upload from host memory made by `make` into a `DeviceVec`; after `catch_unwind`, the
/// source is overwritten and freed, and new host memory of the same kind is written
/// (likely the same pages). The `DeviceVec` must hold the original data, and the stream
/// keep working.
fn panic_right_after_upload_from<H>(
    stream: &Stream,
    make: impl Fn(usize) -> TestResult<H>,
) -> TestResult
where
    H: std::ops::DerefMut<Target = [u32]>,
{
    let len = BIG_BYTES / 4;
    let mut rng = Rng::new();
    let mut source = make(len)?;
    rng.fill(&mut source);
    let expected = source.to_vec();
    let mut target = stream.device().alloc_vec::<u32>(len)?;
    let caught = catch_unwind(AssertUnwindSafe(|| {
        scope(stream, |s| -> stream_core::Result<()> {
            let mut t = s.attach(&mut target)?;
            s.copy_to_device(&source, &mut t)?;
            panic!("{DELIBERATE}");
        })
    }));
    expect_deliberate_panic(caught)?;
    poison(&mut source);
    drop(source);
    let mut reuse = make(len)?;
    poison(&mut reuse);
    drop(reuse);
    check_eq(
        "DeviceVec uploaded into before a panic",
        &expected,
        &target.to_host_vec()?,
    )?;
    round_trips_on(stream, rng, 3)
}

fn panic_after_large_pageable_upload_then_freeing_the_source_is_harmless() -> TestResult {
    let _serial = serial();
    let stream = stream()?;
    panic_right_after_upload_from(&stream, |len| Ok(vec![0u32; len]))
}

fn panic_after_large_pinned_upload_then_freeing_the_source_is_harmless() -> TestResult {
    let _serial = serial();
    let stream = stream()?;
    let dev = stream.device().clone();
    panic_right_after_upload_from(&stream, |len| Ok(dev.alloc_pinned::<u32>(len)?))
}
