//! The limits of managed memory: an allocation larger than the free device memory is
//! refused before the driver is asked, the statistics count live allocations, an empty
//! vec allocates nothing and works everywhere, and the errors say what to do.
//!
//! The tests take this binary's lock (they measure the process's managed statistics and
//! the device's free memory). Without a CUDA device the GPU tests are reported as
//! ignored (see `gpu_tests::run`).

use gpu_tests::{ensure, expect_err, Failed, TestResult};
use stream_core::{scope, Error, ManagedAccess, ManagedAdvice};

mod managed_support;
use managed_support::{begin, device_access};

gpu_tests::test_main! {
    gpu: [
        over_asking_is_refused_before_any_driver_allocation,
        stats_count_live_managed_allocations,
        empty_managed_vec_allocates_nothing_and_works_everywhere,
    ],
    host: [managed_errors_say_what_to_do],
}

/// Asking for the whole card, twice the card, or the free memory plus 1 GiB is
/// `ManagedExceedsFreeMemory` with the request and the device's numbers, in both modes
/// and for any element type; the statistics show that nothing was allocated, and a
/// small allocation right after works.
fn over_asking_is_refused_before_any_driver_allocation() -> TestResult {
    let (_lock, dev) = begin()?;
    let before = dev.managed_memory_stats();
    // Nothing cached in the pool: the refusal path releases the cache before it looks
    // again, which must not make `free + 1 GiB` fit.
    dev.trim_memory(0)?;
    let (free, total) = dev.memory_info()?;
    let requests = [total, total.saturating_mul(2), free.saturating_add(1 << 30)];
    for request in requests {
        for access in [device_access(&dev)?, ManagedAccess::StreamAttached] {
            let what = format!("alloc_managed_with_access::<u8>({request}, {access:?})");
            let e = expect_err(
                &what,
                dev.alloc_managed_with_access::<u8>(request, access)
                    .map(drop),
            )?;
            check_refusal(&what, &e, request, total, before.allocated_bytes)?;
        }
        let what = format!("alloc_managed::<u32>({} elements)", request / 4);
        let e = expect_err(&what, dev.alloc_managed::<u32>(request / 4).map(drop))?;
        check_refusal(&what, &e, request / 4 * 4, total, before.allocated_bytes)?;
    }
    let after = dev.managed_memory_stats();
    ensure!(
        after.allocated_bytes == before.allocated_bytes && after.allocations == before.allocations,
        "refused allocations changed the managed statistics: {before:?} before, {after:?} after"
    );
    let small = dev.alloc_managed::<u32>(1 << 20)?;
    ensure!(
        small.host()?.iter().all(|&x| x == 0),
        "a small allocation after the refusals is not zeroed"
    );
    Ok(())
}

/// `e` is the refusal of `request` bytes with plausible numbers and an actionable
/// message.
fn check_refusal(
    what: &str,
    e: &Error,
    request: usize,
    total: usize,
    managed: usize,
) -> TestResult {
    let Error::ManagedExceedsFreeMemory(refusal) = e else {
        return Err(Failed::from(format!(
            "{what}: got {e:?}, expected ManagedExceedsFreeMemory (a refusal before the driver is asked)"
        )));
    };
    let stream_core::error::ManagedExceedsFreeMemory {
        requested,
        free,
        managed: counted,
        margin,
        available,
    } = **refusal;
    ensure!(
        requested == request,
        "{what}: requested is {requested}, not {request}"
    );
    ensure!(
        free <= total,
        "{what}: free {free} is more than the total {total}"
    );
    ensure!(
        counted == managed,
        "{what}: counted {counted} bytes of live managed memory, the statistics say {managed}"
    );
    ensure!(
        margin >= 256 << 20,
        "{what}: margin {margin} is below 256 MiB"
    );
    ensure!(
        available < requested,
        "{what}: available {available} would have fit {requested}"
    );
    let message = e.to_string();
    for part in [
        &request.to_string(),
        "alloc_managed_oversubscribed",
        "ask for less",
    ] {
        ensure!(
            message.contains(part),
            "{what}: the message {message:?} lacks {part:?}"
        );
    }
    Ok(())
}

/// Live allocations add their bytes and count, drops take them away, the peak stays
/// until reset; empty vecs are not counted.
fn stats_count_live_managed_allocations() -> TestResult {
    let (_lock, dev) = begin()?;
    dev.reset_peak_managed_memory_stats();
    let base = dev.managed_memory_stats();
    let a = dev.alloc_managed::<u32>(1 << 20)?;
    let b = dev.alloc_managed_with_access::<f64>(3 << 18, ManagedAccess::StreamAttached)?;
    let empty = dev.alloc_managed::<u8>(0)?;
    let both = dev.managed_memory_stats();
    let bytes = (4 << 20) + (6 << 20);
    ensure!(
        both.allocated_bytes == base.allocated_bytes + bytes
            && both.allocations == base.allocations + 2,
        "two live allocations of {bytes} bytes in all: {base:?} before, {both:?} now"
    );
    ensure!(
        both.peak_allocated_bytes >= both.allocated_bytes,
        "peak below the live bytes: {both:?}"
    );
    drop(a);
    let one = dev.managed_memory_stats();
    ensure!(
        one.allocated_bytes == base.allocated_bytes + (6 << 20)
            && one.allocations == base.allocations + 1,
        "after dropping the 4 MiB vec: {one:?} (base {base:?})"
    );
    ensure!(
        one.peak_allocated_bytes == both.peak_allocated_bytes,
        "the peak moved on a drop: {both:?} then {one:?}"
    );
    dev.reset_peak_managed_memory_stats();
    ensure!(
        dev.managed_memory_stats().peak_allocated_bytes == one.allocated_bytes,
        "reset_peak_managed_memory_stats did not restart the peak from the live bytes"
    );
    drop((b, empty));
    let end = dev.managed_memory_stats();
    ensure!(
        end.allocated_bytes == base.allocated_bytes && end.allocations == base.allocations,
        "after dropping everything: {end:?} (base {base:?})"
    );
    Ok(())
}

/// Zero elements: nothing is allocated or counted, and attaching, prefetching both ways
/// and advising all succeed, in both modes.
fn empty_managed_vec_allocates_nothing_and_works_everywhere() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let before = dev.managed_memory_stats();
    for access in [device_access(&dev)?, ManagedAccess::StreamAttached] {
        let mut v = dev.alloc_managed_with_access::<u32>(0, access)?;
        ensure!(
            v.is_empty() && v.host()?.is_empty(),
            "{access:?}: not empty"
        );
        v.advise(ManagedAdvice::ReadMostly)?;
        scope(&stream, |s| -> TestResult {
            let view = s.attach_managed(&mut v)?;
            s.prefetch_to_device(&view)?;
            let host = s.prefetch_to_host(view)?.wait()?;
            ensure!(
                host.is_empty(),
                "{access:?}: {} elements came back",
                host.len()
            );
            Ok(())
        })?;
        ensure!(
            v.host_mut()?.is_empty(),
            "{access:?}: not empty after the scope"
        );
    }
    let after = dev.managed_memory_stats();
    ensure!(
        after.allocations == before.allocations && after.allocated_bytes == before.allocated_bytes,
        "empty vecs were counted: {before:?} then {after:?}"
    );
    Ok(())
}

/// The managed errors' messages say what happened and what to do.
fn managed_errors_say_what_to_do() -> TestResult {
    let unsupported = Error::ManagedMemoryUnsupported { ordinal: 3 }.to_string();
    for part in ["device 3", "managed memory", "DeviceVec"] {
        ensure!(unsupported.contains(part), "{unsupported:?} lacks {part:?}");
    }
    let refused = Error::from(stream_core::error::ManagedExceedsFreeMemory {
        requested: 100,
        free: 90,
        managed: 10,
        margin: 5,
        available: 75,
    })
    .to_string();
    for part in [
        "managed allocation of 100 bytes refused",
        "90 bytes free",
        "10 bytes of managed memory",
        "margin of 5 bytes",
        "75 bytes are available",
        "oversubscribes",
        "Device::alloc_managed_oversubscribed",
    ] {
        ensure!(refused.contains(part), "{refused:?} lacks {part:?}");
    }
    Ok(())
}
