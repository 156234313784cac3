//! Out of device memory (`stream-core/src/memory/pool.rs`): an allocation the card
//! cannot hold is `Error::OutOfMemory` with the request and the device's numbers, and
//! the scope, stream and device keep working; before it gives up, the library releases
//! the pool's cached memory and retries once, after waiting for the frees pending on
//! this thread's open scopes, so an allocation that needs that memory succeeds; one
//! larger than the card is refused at once, without the retry. (The
//! pool's caching, statistics and trimming are tested in `test_memory_pool.rs`.)
//!
//! Every test here measures the one pool of device 0 that the whole process shares, so
//! they run one at a time ([`begin`] takes a lock), each from a pool with nothing
//! cached and no free pending (`trim_memory` waits for the frees of dropped
//! `DeviceVec`s). Without a CUDA device they are reported as ignored (see `gpu_tests::run`).
//! No test uses managed memory; the largest allocations take about 80% of the device
//! memory that is free when the test starts, and host buffers stay at a few MiB.

use gpu_tests::pool::{begin, mib, MIB, PROBE, SLACK};
use gpu_tests::{
    check_eq, ensure, expect_err, poisoned, round_trip_in, spin, Failed, Rng, TestResult,
};
use stream_core::nccl::{Communicator, Sum};
use stream_core::{scope, Device, Error};

gpu_tests::test_main! {
    gpu: [
        out_of_memory_larger_than_card_is_an_error_and_the_stream_keeps_working,
        out_of_memory_releases_cached_memory_before_failing,
        out_of_memory_retry_waits_for_this_threads_pending_frees,
        out_of_memory_retry_behind_a_collective_waits_for_it_within_its_bounds,
        allocation_that_needs_the_cached_memory_succeeds_when_the_card_is_full,
    ],
}

/// About 200 ms of spinning on an H100/H200 (clocks near 2 GHz): the host issues the
/// next calls long before it ends.
const SPIN: u64 = 400_000_000;

fn round_down(bytes: usize, to: usize) -> usize {
    bytes / to * to
}

/// `OutOfMemory` for `request` bytes, more than is free, with plausible device numbers,
/// and a message that names the request and says why nothing more could be done: more
/// than the card has (refused at once), or what the library did first (released its
/// cache and retried).
fn check_out_of_memory(what: &str, e: Error, request: usize, total: usize) -> TestResult {
    let message = e.to_string();
    let Error::OutOfMemory(oom) = &e else {
        return Err(Failed::from(format!(
            "{what}: got {e:?}, expected OutOfMemory"
        )));
    };
    let stream_core::error::OutOfMemory {
        requested,
        free,
        total: reported_total,
    } = **oom;
    ensure!(
        requested == request,
        "{what}: requested is {requested}, not {request}"
    );
    ensure!(
        reported_total == total,
        "{what}: total is {reported_total}, but Device::total_memory() is {total}"
    );
    ensure!(
        0 < free && free <= total,
        "{what}: implausible free {free} of total {total}"
    );
    ensure!(
        requested > free,
        "{what}: the request {requested} fits in the {free} bytes free"
    );
    let why = match requested > total {
        true => "no release of cached memory can make room",
        false => "retrying once",
    };
    for part in [&request.to_string(), why, "; "] {
        ensure!(
            message.contains(part),
            "{what}: the message {message:?} does not contain {part:?}"
        );
    }
    Ok(())
}

/// Asking for twice the card's memory is `OutOfMemory` (at once, no retry) from `alloc`
/// and `alloc_zeroed` (of bytes and of words) and from `alloc_vec`; the scope, a new
/// scope on the same stream, and the device's `DeviceVec` helpers (`upload_vec`, and
/// `alloc_vec` zeroed) then still move fresh data correctly, and the failed attempts
/// leave nothing in use. Refused before the retry, they leave the pool's cache alone
/// (the retry hands it back to the driver).
fn out_of_memory_larger_than_card_is_an_error_and_the_stream_keeps_working() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let total = dev.total_memory()?;
    let request = total
        .checked_mul(2)
        .ok_or_else(|| Failed::from(format!("2 * total memory ({total}) overflows")))?;
    let before = dev.memory_stats()?;
    scope(&stream, |s| s.alloc::<u8>(64 * MIB).map(drop))?; // left cached
    let mut rng = Rng::new();
    let (first, second, third): (Vec<u32>, Vec<u32>, Vec<u64>) =
        (rng.vec(PROBE), rng.vec(PROBE), rng.vec(4097));
    let (mut first_out, mut second_out) = (poisoned::<u32>(PROBE), poisoned::<u32>(PROBE));

    let cached = dev.memory_stats()?.cached_bytes;
    scope(&stream, |s| -> TestResult {
        let words = request / 4;
        for (what, result, bytes) in [
            ("alloc::<u8>", s.alloc::<u8>(request).map(drop), request),
            (
                "alloc_zeroed::<u8>",
                s.alloc_zeroed::<u8>(request).map(drop),
                request,
            ),
            ("alloc::<u32>", s.alloc::<u32>(words).map(drop), words * 4),
            (
                "alloc_zeroed::<u32>",
                s.alloc_zeroed::<u32>(words).map(drop),
                words * 4,
            ),
        ] {
            let what = format!("{what} of {bytes} bytes (2 * total)");
            check_out_of_memory(&what, expect_err(&what, result)?, bytes, total)?;
        }
        let still = dev.memory_stats()?.cached_bytes;
        ensure!(
            still >= cached && cached >= 64 * MIB,
            "the refused requests released the pool's cache ({} before, {} after): they \
             went through the out-of-memory retry",
            mib(cached),
            mib(still)
        );
        round_trip_in(
            s,
            &first,
            &mut first_out,
            "round trip in the scope after out of memory",
        )
    })?;
    scope(&stream, |s| -> TestResult {
        round_trip_in(
            s,
            &second,
            &mut second_out,
            "round trip in a new scope after out of memory",
        )
    })?;

    let e = expect_err(
        "alloc_vec::<u8>(2 * total)",
        dev.alloc_vec::<u8>(request).map(drop),
    )?;
    check_out_of_memory("alloc_vec::<u8>(2 * total)", e, request, total)?;
    let v = dev.upload_vec(&third)?;
    check_eq("upload_vec after out of memory", &third, &v.to_host_vec()?)?;
    drop(v);
    check_eq(
        "alloc_vec after out of memory",
        &[0u64; 100],
        &dev.alloc_vec::<u64>(100)?.to_host_vec()?,
    )?;
    // Waits for the housekeeping stream, where the `DeviceVec`s were freed.
    dev.trim_memory(0)?;

    let after = dev.memory_stats()?;
    ensure!(
        after.in_use_bytes <= before.in_use_bytes,
        "the failed allocations left memory in use: {} before, {} after",
        mib(before.in_use_bytes),
        mib(after.in_use_bytes)
    );
    Ok(())
}

/// Out of memory, the library hands the pool's cached memory back to the driver before
/// it gives up, and reports the free memory measured after that.
///
/// This test fails without the trim-and-retry (unless the driver released the cache on
/// its own): 1 GiB is left cached by an ended scope, then a request of the card's whole
/// memory fails (the context holds some of it; a larger request would be refused
/// without a retry); afterwards nothing is cached any more, and the error's `free`
/// includes the released GiB.
fn out_of_memory_releases_cached_memory_before_failing() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let total = dev.total_memory()?;
    let cache = 1024 * MIB;
    scope(&stream, |s| -> TestResult {
        let mut x = s.alloc::<u8>(cache)?;
        s.fill(&mut x, 0x5A)?;
        Ok(())
    })?;
    let cached = dev.memory_stats()?;
    ensure!(
        cached.cached_bytes >= cache,
        "an ended scope's {} are not cached (threshold u64::MAX): {cached:?}",
        mib(cache)
    );
    let (free_before, _) = dev.memory_info()?;

    let request = total;
    let e = scope(&stream, |s| -> TestResult<Error> {
        expect_err("alloc::<u8>(total)", s.alloc::<u8>(request).map(drop))
    })?;
    let reported_free = match &e {
        Error::OutOfMemory(oom) => oom.free,
        other => {
            return Err(Failed::from(format!(
                "alloc::<u8>(total): got {other:?}, expected OutOfMemory"
            )))
        }
    };
    check_out_of_memory("alloc::<u8>(total)", e, request, total)?;

    let after = dev.memory_stats()?;
    ensure!(
        after.cached_bytes <= SLACK,
        "out of memory did not release the cache: {} still cached ({after:?})",
        mib(after.cached_bytes)
    );
    ensure!(
        reported_free >= free_before + cache / 2,
        "the error reports {} free, but {} were free with {} cached before: the free \
         memory was not measured after releasing the cache",
        mib(reported_free),
        mib(free_before),
        mib(cache)
    );
    Ok(())
}

/// The retry recovers: memory freed on this thread's outer scope's stream, behind a
/// long kernel, is needed by an allocation on another stream, first in a nested scope,
/// then by a `DeviceVec`. Both succeed, after waiting for the outer stream, and hold
/// their data.
///
/// This test fails without the wait-trim-retry: the pool never makes one stream wait
/// for another (`CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES` is off, see
/// `Device::new`), the free has not run yet (the kernel spins for ~200 ms), nothing
/// else is cached (`begin` trimmed the pool), and the device has only ~40% of the
/// request free. So the first attempt fails with out of memory; the retry waits for
/// the outer scope's stream (an open scope of this thread), after which the freed
/// memory can be reused. `outer.is_idle()` right after the allocation proves that the
/// allocation waited for it.
fn out_of_memory_retry_waits_for_this_threads_pending_frees() -> TestResult {
    let (_lock, dev) = begin()?;
    retry_waits_for_pending_frees(&dev, None)
}

/// The same with a collective (of a one-rank communicator) issued first on the outer
/// scope's stream: the retry's wait for that stream is then bounded by the
/// communicator's timeout (`device/watch.rs`), polling the stream instead of
/// synchronising it, and must still wait for the kernel and the free behind it. (A
/// collective whose peer never joins ends that wait with `CollectiveTimedOut`:
/// `test_nccl_hung`, two GPUs.)
fn out_of_memory_retry_behind_a_collective_waits_for_it_within_its_bounds() -> TestResult {
    let (_lock, dev) = begin()?;
    let comm = Communicator::for_devices(std::slice::from_ref(&dev))?
        .pop()
        .ok_or("for_devices made no communicator")?;
    // A first collective, where NCCL sets up (and allocates) what it keeps; then the
    // pool as `begin` left it.
    scope(&dev.new_stream()?, |s| {
        let mut token = s.upload(&[1u32])?;
        s.all_reduce_in_place(&comm, &mut token, Sum)
    })?;
    dev.trim_memory(0)?;
    retry_waits_for_pending_frees(&dev, Some(&comm))
}

/// The body of the two retry tests on `dev` (its pool trimmed, the lock held), with a
/// collective on `comm` first when given.
fn retry_waits_for_pending_frees(dev: &Device, comm: Option<&Communicator>) -> TestResult {
    let outer = dev.new_stream()?;
    let inner = dev.new_stream()?;
    let (free, _) = dev.memory_info()?;
    let big = round_down(free / 5 * 3, 2 * MIB) / 4; // elements of u32: 60% of free
    let mut rng = Rng::new();
    let (first, second): (Vec<u32>, Vec<u32>) = (rng.vec(PROBE), rng.vec(PROBE));
    let (mut first_out, mut second_out) = (poisoned::<u32>(PROBE), poisoned::<u32>(PROBE));
    let mut vec_zeros = poisoned::<u32>(PROBE);
    let mut vec = None;

    scope(&outer, |s| -> TestResult {
        if let Some(comm) = comm {
            let mut token = s.upload(&[1u32])?;
            s.all_reduce_in_place(comm, &mut token, Sum)?;
        }
        // Fills the card with memory freed on `outer` behind a long kernel, and checks
        // that an allocation of `big` elsewhere cannot get it yet.
        let free_behind_a_kernel = |what: &str| -> TestResult {
            let mut a = s.alloc::<u32>(big)?;
            s.fill(&mut a, 0xA)?;
            spin(s, SPIN)?;
            drop(a);
            let (free_now, _) = dev.memory_info()?;
            ensure!(
                big * 4 > free_now && !outer.is_idle()?,
                "precondition of {what}: {} must exceed the {} free, and `outer` must still \
                 be spinning (is the machine so loaded that 200 ms passed?)",
                mib(big * 4),
                mib(free_now)
            );
            Ok(())
        };

        free_behind_a_kernel("the nested scope")?;
        scope(&inner, |t| -> TestResult {
            let mut b = t.alloc::<u32>(big)?;
            ensure!(
                outer.is_idle()?,
                "the nested scope's allocation returned while `outer` still ran its kernel: \
                 the first attempt did not fail, so this test did not exercise the retry"
            );
            t.fill(&mut b, 0xB)?;
            t.copy_to_device(&first, &mut b.slice_mut(big - PROBE..)?)?;
            t.copy_to_host(&b.slice(big - PROBE..)?, &mut first_out)?
                .wait()?;
            Ok(())
        })?;

        free_behind_a_kernel("the DeviceVec")?;
        let v = dev.alloc_vec::<u32>(big)?;
        ensure!(
            outer.is_idle()?,
            "alloc_vec returned while `outer` still ran its kernel: the first attempt did \
             not fail, so this test did not exercise the retry"
        );
        vec = Some(v);
        Ok(())
    })?;
    check_eq(
        "data through the nested scope's buffer made by the retry",
        &first,
        &first_out,
    )?;

    let v = vec.ok_or_else(|| Failed::from("the DeviceVec was not made"))?;
    scope(&outer, |s| -> TestResult {
        let view = s.attach_ref(&v)?;
        s.copy_to_host(&view.slice(big - PROBE..)?, &mut vec_zeros)?
            .wait()?;
        let mut x = s.alloc::<u32>(PROBE)?;
        s.copy_to_device(&second, &mut x)?;
        s.copy_to_host(&x, &mut second_out)?.wait()?;
        Ok(())
    })?;
    check_eq(
        "tail of the DeviceVec made by the retry (zeroed)",
        &vec![0; PROBE],
        &vec_zeros,
    )?;
    check_eq("a round trip afterwards", &second, &second_out)
}

/// With the card mostly taken by memory freed on the scope's stream (two blocks of 40%
/// of the free memory, freed but still pending, around a live 64 MiB spacer), an
/// allocation of 60% of the free memory, larger than what the driver reports free and
/// than either freed block, succeeds, holds its data, and leaves the spacer intact. A
/// `DeviceVec` of the same size after the scope succeeds too.
///
/// The allocation needs the pool's cached memory. The driver may serve it by itself
/// (it can remap a pool's unused memory into one range); when it reports out of memory
/// instead, the library's retry (wait for the scope's stream, trim, retry) serves it.
/// Which of the two happens is the driver's choice, so this test cannot show that the
/// retry alone is needed; `out_of_memory_releases_cached_memory_before_failing` shows
/// that the retry runs.
fn allocation_that_needs_the_cached_memory_succeeds_when_the_card_is_full() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let (free, _) = dev.memory_info()?;
    let block = round_down(free / 5 * 2, 2 * MIB) / 4; // elements of u32: 40% of free
    let big = round_down(free / 5 * 3, 2 * MIB) / 4; // 60% of free
    let spacer_len = 64 * MIB / 4;
    let mut rng = Rng::new();
    let input: Vec<u32> = rng.vec(PROBE);
    let (mut head, mut tail, mut spacer_out, mut vec_tail) = (
        poisoned::<u32>(PROBE),
        poisoned::<u32>(PROBE),
        poisoned::<u32>(PROBE),
        poisoned::<u32>(PROBE),
    );
    scope(&stream, |s| -> TestResult {
        let mut a = s.alloc::<u32>(block)?;
        let mut spacer = s.alloc::<u32>(spacer_len)?;
        let mut b = s.alloc::<u32>(block)?;
        s.fill(&mut a, 0xA)?;
        s.fill(&mut spacer, 0x5)?;
        s.fill(&mut b, 0xB)?;
        drop(a);
        drop(b);
        let (free_now, _) = dev.memory_info()?;
        ensure!(
            big * 4 > free_now,
            "precondition: {} requested must exceed the {} the driver reports free",
            mib(big * 4),
            mib(free_now)
        );
        let mut c = s.alloc::<u32>(big)?;
        s.fill(&mut c, 0xC0FFEE)?;
        s.copy_to_device(&input, &mut c.slice_mut(big - PROBE..)?)?;
        s.copy_to_host(&c.slice(..PROBE)?, &mut head)?.wait()?;
        s.copy_to_host(&c.slice(big - PROBE..)?, &mut tail)?
            .wait()?;
        s.copy_to_host(&spacer.slice(spacer_len - PROBE..)?, &mut spacer_out)?
            .wait()?;
        Ok(())
    })?;
    check_eq(
        "head of the allocation that needed cached memory",
        &vec![0xC0FFEE; PROBE],
        &head,
    )?;
    check_eq(
        "tail of the allocation that needed cached memory",
        &input,
        &tail,
    )?;
    check_eq("the live spacer", &vec![0x5; PROBE], &spacer_out)?;

    let v = dev.alloc_vec::<u32>(big)?;
    scope(&stream, |s| -> TestResult {
        let view = s.attach_ref(&v)?;
        s.copy_to_host(&view.slice(big - PROBE..)?, &mut vec_tail)?
            .wait()?;
        Ok(())
    })?;
    check_eq(
        "tail of a DeviceVec that needed cached memory (zeroed)",
        &vec![0; PROBE],
        &vec_tail,
    )
}
