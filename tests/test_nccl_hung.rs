//! A collective that never completes (rank 1 of two never makes the matching call): the
//! scope's end gives up at the communicator's timeout, aborts it and returns
//! `CollectiveTimedOut`, also while unwinding; and so does every host wait inside the
//! scope that is queued behind it (a download's `Pending::wait`, pinned or staged, and
//! the copies between device and pageable memory that hold the host until the stream
//! reaches them, and the out-of-memory retry that waits for the streams of the thread's
//! open scopes, and the device's blocking calls once its housekeeping stream waits behind
//! it), and a `run_owned` future over it. Never a hang. A barrier a rank never reaches ends the same way, and a
//! wait that gives up inside an `nccl::group` (its abort deferred to the group's end). (A
//! graph's replay whose peer never replays: `test_nccl_graph_ranks`.)
//! (Ranks of one process that disagree on a length: `test_nccl_ledger`.)
//!
//! Two GPUs (NCCL refuses two ranks on one); each scenario runs in a child process of
//! this binary ([`CHILD_ENV`]), since it aborts communicators on purpose.

use std::time::{Duration, Instant};

use gpu_tests::child::{run_self, two_gpu_main, ChildOutput};
use gpu_tests::nccl_ranks::{
    error_variant, exclusive, print_whether_the_device_still_works, two_ranks, variant_or_ok,
    warm_up,
};
use gpu_tests::tests;
use gpu_tests::{ensure, TestResult};
use stream_core::nccl::{self, Communicator, Sum};
use stream_core::{scope, Device, DeviceVec, Error, Scope, Stream};

/// The environment variable that makes this binary run one child mode.
const CHILD_ENV: &str = "STREAM_CORE_NCCL_HUNG_CHILD";

fn main() {
    two_gpu_main(
        "test_nccl_hung",
        CHILD_ENV,
        &[
            ("barrier", barrier_child),
            ("hung", hung_child),
            ("host_waits", host_waits_child),
            ("in_group", in_group_child),
        ],
        tests![
            a_collective_that_never_completes_times_out_instead_of_hanging,
            host_waits_behind_a_hung_collective_time_out_too,
            a_barrier_a_rank_never_reaches_times_out,
            a_wait_inside_a_group_times_out_and_the_group_still_ends,
        ],
    );
}

/// In a child, with two GPUs: rank 0's all_reduce, which rank 1 never joins, waits
/// forever on the GPU; the scope's end times out after 2 s, aborts the communicator and
/// returns `CollectiveTimedOut`, and the same happens while a scope unwinds from a
/// panic.
fn a_collective_that_never_completes_times_out_instead_of_hanging() -> TestResult {
    let _one_at_a_time = exclusive();
    let out = run_self(
        "a hung collective",
        &[(CHILD_ENV, Some("hung"))],
        Duration::from_secs(90),
    )?;
    ensure!(out.status.success(), "the child failed.\n{out}");
    out.expect("scope", "CollectiveTimedOut")?;
    out.expect("aborted", "true")?;
    out.expect("later", "CommunicatorAborted")?;
    out.expect("unwound", "true")?;
    out.expect("device_still_works", "true")?;
    ended_by_the_timeout(&out, "waited_s", 2, "the scope ended")
}

/// The seconds the child printed under `key`, those of a wait (`what`, "the barrier
/// returned") that the communicator's timeout of `timeout_s` seconds ended: at least
/// the timeout (less 0.1 s for the clocks), and far from a hang.
fn ended_by_the_timeout(out: &ChildOutput, key: &str, timeout_s: u32, what: &str) -> TestResult {
    let waited: f64 = out.value(key)?.parse()?;
    let at_least = f64::from(timeout_s) - 0.1;
    ensure!(
        (at_least..30.0).contains(&waited),
        "{what} after {waited} s; the timeout was {timeout_s} s.\n{out}"
    );
    Ok(())
}

/// In a child, with two GPUs, for each host wait a scope can make behind its
/// collective: rank 0's all_reduce, which rank 1 never joins, then the wait; the wait
/// itself returns `CollectiveTimedOut` after the 1 s timeout, and so does the scope's
/// end after it (among them `trim_pinned_memory`, which waits for the whole device).
/// Then a `run_owned` future over such an all_reduce resolves to it too, a blocking call
/// whose housekeeping stream waits behind it (a converted `CudaSlice`) returns it, and a
/// `ManagedVec`'s drop behind it (`cuMemFree`, which waits for the whole device) ends.
fn host_waits_behind_a_hung_collective_time_out_too() -> TestResult {
    let _one_at_a_time = exclusive();
    let out = run_self(
        "host waits behind a hung collective",
        &[(CHILD_ENV, Some("host_waits"))],
        Duration::from_secs(120),
    )?;
    ensure!(out.status.success(), "the child failed.\n{out}");
    for wait in HOST_WAITS {
        out.expect(wait, "CollectiveTimedOut")?;
        // The scope's end reports it again (the abort drained the stream, but the
        // collective did not complete).
        out.expect(&format!("{wait}_scope"), "CollectiveTimedOut")?;
        ended_by_the_timeout(&out, &format!("{wait}_s"), 1, &format!("{wait} returned"))?;
    }
    out.expect("cudarc_slice_upload", "CollectiveTimedOut")?;
    out.expect("cudarc_slice_scope", "CollectiveTimedOut")?;
    let what = "upload_vec behind the cudarc slice returned";
    ended_by_the_timeout(&out, "cudarc_slice_upload_s", 1, what)?;
    out.expect("managed_drop_scope", "CollectiveTimedOut")?;
    let what = "a ManagedVec's drop behind the collective ended";
    ended_by_the_timeout(&out, "managed_drop_s", 1, what)?;
    out.expect("run_owned", "CollectiveTimedOut")?;
    ended_by_the_timeout(&out, "run_owned_s", 1, "run_owned's future resolved")?;
    out.expect("device_still_works", "true")?;
    Ok(())
}

/// In a child, with two GPUs: rank 0's `Communicator::barrier`, which rank 1 never
/// reaches (on communicators whose connections are set up), returns
/// `CollectiveTimedOut` after the 1 s timeout and leaves the communicator aborted.
fn a_barrier_a_rank_never_reaches_times_out() -> TestResult {
    let _one_at_a_time = exclusive();
    let out = run_self(
        "a barrier a rank never reaches",
        &[(CHILD_ENV, Some("barrier"))],
        Duration::from_secs(90),
    )?;
    ensure!(out.status.success(), "the child failed.\n{out}");
    out.expect("barrier", "CollectiveTimedOut")?;
    out.expect("aborted", "true")?;
    ended_by_the_timeout(&out, "waited_s", 1, "the barrier returned")
}

/// In a child, with two GPUs: rank 0's all_reduce, which rank 1 never joins, then an
/// `nccl::group` holding a grouped all_reduce on the same communicator and a download's
/// wait behind the hung collective. The wait gives up after the 1 s timeout with
/// `CollectiveTimedOut`; the communicator counts as aborted at once (the group's later
/// call on it is refused), the group ends (NCCL enqueues the held call; the abort is
/// made after that, which the host test `an_abort_inside_a_group_waits_for_its_end`
/// shows), and the scope's end, the device and a new communicator work after it.
fn a_wait_inside_a_group_times_out_and_the_group_still_ends() -> TestResult {
    let _one_at_a_time = exclusive();
    let out = run_self(
        "a wait inside a group behind a hung collective",
        &[(CHILD_ENV, Some("in_group"))],
        Duration::from_secs(90),
    )?;
    ensure!(out.status.success(), "the child failed.\n{out}");
    out.expect("wait", "CollectiveTimedOut")?;
    out.expect("aborted_inside", "true")?;
    out.expect("later_in_group", "CommunicatorAborted")?;
    out.expect("group", "ok")?;
    out.expect("scope", "CollectiveTimedOut")?;
    out.expect("new_communicators_work", "true")?;
    out.expect("device_still_works", "true")?;
    ended_by_the_timeout(&out, "wait_s", 1, "the wait returned")
}

/// See [`a_wait_inside_a_group_times_out_and_the_group_still_ends`].
fn in_group_child() -> TestResult {
    let (d0, d1) = (Device::new(0)?, Device::new(1)?);
    let stream = d0.new_stream()?;
    let mut pinned = d0.alloc_pinned::<u32>(1024)?;
    let ranks = warm_up(two_ranks(&d0, &d1)?, (&d0, &d1))?;
    ranks.0.set_timeout(Duration::from_secs(1));
    let mut outcome = None;
    let ended = scope(&stream, |s| {
        let mut x = s.upload(&[7u32; 1024])?;
        let mut y = s.upload(&[1u32; 1024])?;
        let mut z = s.upload(&[2u32; 1024])?;
        s.all_reduce_in_place(&ranks.0, &mut x, Sum)?;
        let start = Instant::now();
        let grouped = nccl::group(|g| {
            g.all_reduce_in_place(s, &ranks.0, &mut y, Sum)?;
            let waited = s.copy_to_host(&x, &mut pinned)?.wait().map(drop);
            let took = start.elapsed();
            let aborted_inside = ranks.0.is_aborted();
            let later = g.all_reduce_in_place(s, &ranks.0, &mut z, Sum);
            Ok::<_, Error>((waited, took, aborted_inside, later))
        });
        outcome = Some(grouped);
        Ok::<_, Error>(())
    });
    let (waited, took, aborted_inside, later) =
        outcome.ok_or("the scope did not run its closure")??;
    println!("wait = {}", variant_or_ok(&waited));
    println!("wait_s = {:.3}", took.as_secs_f64());
    println!("aborted_inside = {aborted_inside}");
    println!("later_in_group = {}", variant_or_ok(&later));
    println!("group = ok");
    println!("scope = {}", variant_or_ok(&ended));
    ranks.1.abort();
    // A fresh pair on the same devices: nothing of the aborted one is left in the way.
    let fresh = warm_up(two_ranks(&d0, &d1)?, (&d0, &d1));
    println!("new_communicators_work = {}", fresh.is_ok());
    print_whether_the_device_still_works(&stream)
}

/// See [`a_barrier_a_rank_never_reaches_times_out`].
fn barrier_child() -> TestResult {
    let (d0, d1) = (Device::new(0)?, Device::new(1)?);
    let ranks = warm_up(two_ranks(&d0, &d1)?, (&d0, &d1))?;
    ranks.0.set_timeout(Duration::from_secs(1));
    let start = Instant::now();
    let ended = ranks.0.barrier();
    println!("waited_s = {:.3}", start.elapsed().as_secs_f64());
    println!("barrier = {}", variant_or_ok(&ended));
    println!("aborted = {}", ranks.0.is_aborted());
    ranks.1.abort();
    Ok(())
}

/// Rank 0 of two issues all_reduces that rank 1 never joins, on communicators whose
/// connections are set up (a first all_reduce on both ranks): the collective waits on
/// the GPU, and the scope's end gives up at the timeout, also when it unwinds from a
/// panic, with `CollectiveTimedOut` and an aborted communicator, never a hang. (On a
/// communicator whose connections NCCL has not set up yet, the call itself would wait
/// inside NCCL for rank 1: see "When a peer dies" in the `nccl` module docs.)
fn hung_child() -> TestResult {
    let (d0, d1) = (Device::new(0)?, Device::new(1)?);
    let stream = d0.new_stream()?;
    let lone_all_reduce = |comm: &Communicator| {
        scope(&stream, |s| {
            let mut x = s.upload(&[7u32; 1024])?;
            s.all_reduce_in_place(comm, &mut x, Sum)
        })
    };
    // 1. Connected: the collective waits on the GPU; the scope's end is bounded.
    let connected = two_ranks(&d0, &d1)?;
    let connected = warm_up(connected, (&d0, &d1))?;
    connected.0.set_timeout(Duration::from_secs(2));
    let start = Instant::now();
    let ended = lone_all_reduce(&connected.0);
    println!("waited_s = {:.3}", start.elapsed().as_secs_f64());
    match &ended {
        Err(e) => println!("scope = {}\nscope_error = {e}", error_variant(e)),
        Ok(()) => println!("scope = ok"),
    }
    println!("aborted = {}", connected.0.is_aborted());
    let later = lone_all_reduce(&connected.0);
    println!("later = {}", variant_or_ok(&later));
    connected.1.abort();
    // 2. The same while the scope unwinds from a panic.
    let unwinding = two_ranks(&d0, &d1)?;
    let unwinding = warm_up(unwinding, (&d0, &d1))?;
    unwinding.0.set_timeout(Duration::from_secs(1));
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = scope(&stream, |s| {
            let mut x = s.upload(&[1u32; 64])?;
            s.all_reduce_in_place(&unwinding.0, &mut x, Sum)?;
            panic!("a panic while the collective hangs");
            #[allow(unreachable_code)]
            Ok::<_, Error>(())
        });
    }));
    println!("unwound = {}", unwound.is_err() && unwinding.0.is_aborted());
    unwinding.1.abort();
    print_whether_the_device_still_works(&stream)
}

/// The host waits [`host_waits_child`] makes behind a hung collective.
const HOST_WAITS: [&str; 6] = [
    "pinned_download_wait",
    "small_pageable_download",
    "staged_download_wait",
    "staged_upload",
    "out_of_memory_retry",
    "trim_pinned_memory",
];

/// Elements of the staged copies: 64 MiB, past the staging threshold.
const STAGED: usize = 16 << 20;

/// For each of [`HOST_WAITS`], on fresh connected communicators with a 1 s timeout: rank
/// 0's lone all_reduce, then the wait, timed; prints what the wait returned.
fn host_waits_child() -> TestResult {
    let (d0, d1) = (Device::new(0)?, Device::new(1)?);
    let stream = d0.new_stream()?;
    let mut pinned = d0.alloc_pinned::<u32>(1024)?;
    let mut small = vec![0u32; 1024];
    let mut big = vec![0u32; STAGED];
    let big_source = vec![3u32; STAGED];
    drop(d0.alloc_pinned::<u8>(1 << 20)?); // a block cached for `trim_pinned_memory` to free
    for wait in HOST_WAITS {
        let ranks = warm_up(two_ranks(&d0, &d1)?, (&d0, &d1))?;
        ranks.0.set_timeout(Duration::from_secs(1));
        let mut outcome = None;
        let ended = scope(&stream, |s| {
            let mut x = s.upload(&[7u32; 1024])?;
            let mut y = s.alloc_zeroed::<u32>(STAGED)?;
            s.all_reduce_in_place(&ranks.0, &mut x, Sum)?;
            let start = Instant::now();
            let waited = host_wait(
                s,
                wait,
                &x,
                &mut y,
                &mut pinned,
                &mut small,
                &mut big,
                &big_source,
            );
            outcome = Some((waited, start.elapsed()));
            Ok::<_, Error>(())
        });
        let (waited, took) = outcome.ok_or("the scope did not run its closure")?;
        println!("{wait} = {}", variant_or_ok(&waited));
        println!("{wait}_s = {:.3}", took.as_secs_f64());
        println!("{wait}_scope = {}", variant_or_ok(&ended));
        ranks.1.abort();
    }
    // The same behind `run_owned`, whose end is no synchronisation: the call itself waits,
    // bounded, and the future resolves to the timeout.
    let ranks = warm_up(two_ranks(&d0, &d1)?, (&d0, &d1))?;
    ranks.0.set_timeout(Duration::from_secs(1));
    let start = Instant::now();
    let future = stream.run_owned(ranks.0, |s, comm| {
        let mut x = s.upload(&[7u32; 1024])?;
        s.all_reduce_in_place(comm, &mut x, Sum)
    });
    let resolved = mini_executor::block_on(future).map(drop);
    println!("run_owned = {}", variant_or_ok(&resolved));
    println!("run_owned_s = {:.3}", start.elapsed().as_secs_f64());
    ranks.1.abort();
    cudarc_slice_behind_a_hung_collective(&d0, &d1)?;
    managed_drop_behind_a_hung_collective(&d0, &d1, &stream)?;
    print_whether_the_device_still_works(&stream)
}

/// A `ManagedVec` dropped behind the scope's hung collective: `cuMemFree` waits for the
/// whole device, so the drop first waits for the scope's stream, bounded by its watch
/// (`DeviceInner::bound_device_wide_wait`); the scope's end reports the timeout.
fn managed_drop_behind_a_hung_collective(d0: &Device, d1: &Device, stream: &Stream) -> TestResult {
    let ranks = warm_up(two_ranks(d0, d1)?, (d0, d1))?;
    ranks.0.set_timeout(Duration::from_secs(1));
    let managed = d0.alloc_managed::<u32>(1024)?;
    let mut took = None;
    let ended = scope(stream, |s| {
        let mut x = s.upload(&[7u32; 1024])?;
        s.all_reduce_in_place(&ranks.0, &mut x, Sum)?;
        let start = Instant::now();
        drop(managed);
        took = Some(start.elapsed());
        Ok::<_, Error>(())
    });
    let took = took.ok_or("the scope did not run its closure")?;
    println!("managed_drop_s = {:.3}", took.as_secs_f64());
    println!("managed_drop_scope = {}", variant_or_ok(&ended));
    ranks.1.abort();
    Ok(())
}

/// A blocking call on the device's housekeeping stream (`upload_vec`) after a `CudaSlice`
/// of a cudarc stream was converted in a scope on that stream, behind the scope's hung
/// collective: the housekeeping stream waits for the slice's stream, and the call is
/// bounded by the scope's watch (`DeviceInner::sync_housekeeping`).
fn cudarc_slice_behind_a_hung_collective(d0: &Device, d1: &Device) -> TestResult {
    let ranks = warm_up(two_ranks(d0, d1)?, (d0, d1))?;
    ranks.0.set_timeout(Duration::from_secs(1));
    let cudarc_stream = d0
        .cudarc_context()?
        .new_stream()
        .map_err(|e| format!("new_stream: {e:?}"))?;
    let slice = cudarc_stream
        .alloc_zeros::<u32>(1024)
        .map_err(|e| format!("alloc_zeros: {e:?}"))?;
    let ours = Stream::from_cudarc(&cudarc_stream)?;
    let mut outcome = None;
    let ended = scope(&ours, |s| {
        let mut x = s.upload(&[7u32; 1024])?;
        s.all_reduce_in_place(&ranks.0, &mut x, Sum)?;
        let converted = DeviceVec::from_cudarc(slice).map_err(|e| e.error().clone())?;
        let start = Instant::now();
        let uploaded = d0.upload_vec(&[1u32; 16]).map(drop);
        outcome = Some((uploaded, start.elapsed()));
        drop(converted);
        Ok::<_, Error>(())
    });
    let (uploaded, took) = outcome.ok_or("the scope did not run its closure")?;
    println!("cudarc_slice_upload = {}", variant_or_ok(&uploaded));
    println!("cudarc_slice_upload_s = {:.3}", took.as_secs_f64());
    println!("cudarc_slice_scope = {}", variant_or_ok(&ended));
    ranks.1.abort();
    Ok(())
}

/// One of [`HOST_WAITS`] on `s`, behind whatever `s` has enqueued.
#[allow(clippy::too_many_arguments)]
fn host_wait<'s, 'env>(
    s: &'s Scope<'s, 'env>,
    wait: &str,
    x: &stream_core::DeviceBuffer<'s, u32>,
    y: &mut stream_core::DeviceBuffer<'s, u32>,
    pinned: &'env mut [u32],
    small: &'env mut [u32],
    big: &'env mut [u32],
    big_source: &'env [u32],
) -> Result<(), Error> {
    match wait {
        "pinned_download_wait" => s.copy_to_host(x, pinned)?.wait().map(drop),
        "small_pageable_download" => s.copy_to_host(x, small)?.wait().map(drop),
        "staged_download_wait" => s.copy_to_host(y, big)?.wait().map(drop),
        "staged_upload" => s.copy_to_device(big_source, y),
        // `cuMemFreeHost` waits for the whole device: the scope's stream first, bounded.
        "trim_pinned_memory" => s.device().trim_pinned_memory(0).map(drop),
        // The whole card (a request larger than it is refused at once, without the
        // retry): out of memory, the retry waits for the scope's stream.
        _ => {
            let too_big = Device::new(0)?.total_memory()?;
            s.alloc::<u8>(too_big).map(drop)
        }
    }
}
