//! Managed (unified) memory: `ManagedVec` is the host's between scopes, the scope's
//! while attached, and the host's again after `prefetch_to_host` + `wait`; kernels on
//! prefetched and on demand-paged data agree with the CPU; advice never changes
//! results; a read-only attach serves two scopes on two streams and the host at once; a
//! fork prefetches ahead while the parent computes; a panic with a prefetch in flight
//! unwinds only once it completed; an allocation larger than the free device memory is
//! refused before the driver is asked; the statistics count live allocations; and the
//! stream-attached mode (what a device without concurrent managed access uses, chosen
//! here with `alloc_managed_with_access`) runs the same work and refuses what it cannot
//! make safe.
//!
//! Every test takes this binary's lock (they measure the process's managed statistics
//! and the device's free memory), allocates at most a few dozen MiB of managed memory,
//! and checks fresh random data against a CPU reference. Without a CUDA device they are
//! reported as ignored (see `gpu_tests::run`).

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, PoisonError};

use gpu_tests::{
    check_eq, device, ensure, expect_err, panic_message, poisoned, Failed, Rng, TestResult,
};
use stream_core::{
    kernel, scope, Device, DeviceMemoryMut, Error, LaunchConfig, ManagedAccess, ManagedAdvice,
    ManagedLocation, ManagedSliceMut, ManagedVec, Scope,
};

gpu_tests::test_main! {
    gpu: [
        managed_access_is_read_from_the_device_and_given_to_new_vecs,
        new_managed_vec_is_zeroed_and_the_host_reads_and_writes_it,
        kernels_on_prefetched_data_match_the_cpu,
        kernels_on_demand_paged_data_match_the_cpu,
        host_reads_after_prefetch_to_host_and_wait_inside_the_scope,
        part_handed_back_to_the_host_while_the_rest_stays_with_the_scope,
        every_advice_is_accepted_and_leaves_results_unchanged,
        host_resident_memory_mapped_by_the_device_computes_without_prefetches,
        two_scopes_on_two_streams_and_the_host_share_a_read_only_attach,
        fork_prefetches_the_next_chunk_while_the_parent_computes,
        panic_while_a_prefetch_to_host_is_in_flight_completes_it_before_unwinding,
        over_asking_is_refused_before_any_driver_allocation,
        stats_count_live_managed_allocations,
        stream_attached_vec_runs_kernels_and_comes_back_to_the_host,
        stream_attached_vec_refuses_what_it_cannot_make_safe,
        empty_managed_vec_allocates_nothing_and_works_everywhere,
    ],
    host: [managed_errors_say_what_to_do],
}

/// Elements of most tests: 16 MiB of `u32`.
const LEN: usize = 1 << 22;

/// About 0.2 to 0.4 s of spinning at 1 to 2 GHz: the prefetch queued behind it is
/// certainly still pending when the scope panics.
const SPIN_CYCLES: u64 = 400_000_000;

/// The message of the panic a test raises on purpose.
const DELIBERATE: &str =
    "deliberate panic inside a scope with a managed prefetch in flight (expected by this test)";

const AFFINE_SRC: &str = r#"
extern "C" __global__ void __launch_bounds__(256)
affine_in_place_u32(unsigned a, unsigned b, unsigned* y, size_t y_len) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < y_len;
         i += (size_t)gridDim.x * blockDim.x) {
        y[i] = y[i] * a + b;
    }
}
"#;

#[kernel(cuda = AFFINE_SRC, block = 256)]
/// `y[i] = y[i] * a + b` (wrapping), in place, grid-stride.
unsafe fn affine_in_place_u32(a: u32, b: u32, y: &mut [u32]);

/// Queues `y = y * a + b` on `s`'s stream.
fn affine<'s>(
    s: &'s Scope<'s, '_>,
    a: u32,
    b: u32,
    y: &mut impl DeviceMemoryMut<'s, u32>,
) -> Result<(), Error> {
    let config = LaunchConfig::for_elements(y.len().min(1 << 24), 256);
    affine_in_place_u32(s, config, a, b, y)
}

/// The CPU reference of [`affine`].
fn affine_cpu(x: &[u32], a: u32, b: u32) -> Vec<u32> {
    x.iter()
        .map(|v| v.wrapping_mul(a).wrapping_add(b))
        .collect()
}

/// Takes this binary's lock and device 0.
fn begin() -> TestResult<(MutexGuard<'static, ()>, Device)> {
    static LOCK: Mutex<()> = Mutex::new(());
    let lock = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    Ok((lock, device()?))
}

/// A managed vec of `input.len()` elements in mode `access`, holding `input`.
fn managed_from(dev: &Device, input: &[u32], access: ManagedAccess) -> TestResult<ManagedVec<u32>> {
    let mut v = dev.alloc_managed_with_access::<u32>(input.len(), access)?;
    v.host_mut()?.copy_from_slice(input);
    Ok(v)
}

/// The device's own mode, failing clearly when it has no managed memory at all.
fn device_access(dev: &Device) -> TestResult<ManagedAccess> {
    dev.managed_access()?.ok_or_else(|| {
        Failed::from(
            "the device reports no managed memory support (CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 0)",
        )
    })
}

/// Fails with a clear message unless the device has concurrent managed access (the
/// tests of what only that mode allows).
fn require_concurrent(dev: &Device) -> TestResult {
    let access = device_access(dev)?;
    ensure!(
        access == ManagedAccess::Concurrent,
        "this test needs a device with concurrent managed access (H100/H200 have it); this one is {access:?}"
    );
    Ok(())
}

/// Two random multipliers and offsets, and random input.
fn fresh(len: usize) -> (Vec<u32>, u32, u32) {
    let mut rng = Rng::new();
    (rng.vec(len), rng.value(), rng.value())
}

/// `view` cut into consecutive chunks of `chunk` elements (the last may be shorter).
fn chunks<'a, 's>(
    mut view: ManagedSliceMut<'a, 's, u32>,
    chunk: usize,
) -> Result<Vec<ManagedSliceMut<'a, 's, u32>>, Error> {
    let mut out = Vec::new();
    while view.len() > chunk {
        let (head, tail) = view.into_split_at_mut(chunk)?;
        out.push(head);
        view = tail;
    }
    out.push(view);
    Ok(out)
}

/// `Device::managed_access` reports the device's mode; `alloc_managed` gives it to new
/// vecs, and `alloc_managed_with_access(StreamAttached)` works on any device.
fn managed_access_is_read_from_the_device_and_given_to_new_vecs() -> TestResult {
    let (_lock, dev) = begin()?;
    let access = device_access(&dev)?;
    let v = dev.alloc_managed::<u32>(1024)?;
    ensure!(
        v.access() == access,
        "alloc_managed gave {:?}, the device is {access:?}",
        v.access()
    );
    ensure!(v.len() == 1024 && !v.is_empty(), "len {} of 1024", v.len());
    let w = dev.alloc_managed_with_access::<u32>(1024, ManagedAccess::StreamAttached)?;
    ensure!(
        w.access() == ManagedAccess::StreamAttached,
        "alloc_managed_with_access(StreamAttached) gave {:?}",
        w.access()
    );
    if access == ManagedAccess::Concurrent {
        let c = dev.alloc_managed_with_access::<u32>(1024, ManagedAccess::Concurrent)?;
        ensure!(
            c.access() == ManagedAccess::Concurrent,
            "got {:?}",
            c.access()
        );
    }
    Ok(())
}

/// A new vec reads as zeros on the host in both modes, and what the host writes it
/// reads back.
fn new_managed_vec_is_zeroed_and_the_host_reads_and_writes_it() -> TestResult {
    let (_lock, dev) = begin()?;
    let (input, _, _) = fresh(LEN);
    for access in [device_access(&dev)?, ManagedAccess::StreamAttached] {
        let mut v = dev.alloc_managed_with_access::<u32>(LEN, access)?;
        ensure!(
            v.host()?.iter().all(|&x| x == 0),
            "{access:?}: a new ManagedVec is not all zeros"
        );
        v.host_mut()?.copy_from_slice(&input);
        check_eq(
            &format!("{access:?}: host write then read"),
            &input,
            v.host()?,
        )?;
    }
    Ok(())
}

/// Random data written by the host, prefetched to the device, run through the kernel
/// twice in place: a copy of the view inside the scope and the host's view after it
/// match the CPU.
fn kernels_on_prefetched_data_match_the_cpu() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let (input, a, b) = fresh(LEN);
    let expected = affine_cpu(&affine_cpu(&input, a, b), a, b);
    let mut data = managed_from(&dev, &input, device_access(&dev)?)?;
    let mut out = poisoned::<u32>(LEN);
    scope(&stream, |s| -> TestResult {
        let mut view = s.attach_managed(&mut data)?;
        s.prefetch_to_device(&view)?;
        affine(s, a, b, &mut view)?;
        affine(s, a, b, &mut view)?;
        let copied = s.copy_to_host(&view, &mut out)?.wait()?;
        check_eq(
            "copy of the prefetched view after two kernels",
            &expected,
            copied,
        )
    })?;
    check_eq("host view after the scope", &expected, data.host()?)
}

/// The same without any prefetch: the kernel faults the pages in, the host's read
/// after the scope faults them back.
fn kernels_on_demand_paged_data_match_the_cpu() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let (input, a, b) = fresh(LEN);
    let mut data = managed_from(&dev, &input, device_access(&dev)?)?;
    scope(&stream, |s| -> TestResult {
        let mut view = s.attach_managed(&mut data)?;
        affine(s, a, b, &mut view)?;
        Ok(())
    })?;
    check_eq(
        "host view after a kernel on demand-paged data",
        &affine_cpu(&input, a, b),
        data.host()?,
    )
}

/// `prefetch_to_host` + `wait` hands the host the kernel's results inside the scope;
/// what the host then writes there is what the vec holds after the scope.
fn host_reads_after_prefetch_to_host_and_wait_inside_the_scope() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let (input, a, b) = fresh(LEN);
    let (second, _, _) = fresh(LEN);
    let mut data = managed_from(&dev, &input, device_access(&dev)?)?;
    scope(&stream, |s| -> TestResult {
        let mut view = s.attach_managed(&mut data)?;
        s.prefetch_to_device(&view)?;
        affine(s, a, b, &mut view)?;
        let host = s.prefetch_to_host(view)?.wait()?;
        check_eq(
            "host slice from prefetch_to_host + wait, inside the scope",
            &affine_cpu(&input, a, b),
            host,
        )?;
        host.copy_from_slice(&second);
        Ok(())
    })?;
    check_eq(
        "the host's writes inside the scope, after it",
        &second,
        data.host()?,
    )
}

/// The lower half goes back to the host (checked inside the scope) while the upper
/// half stays attached and runs another kernel after that; both halves are right
/// afterwards.
fn part_handed_back_to_the_host_while_the_rest_stays_with_the_scope() -> TestResult {
    let (_lock, dev) = begin()?;
    require_concurrent(&dev)?;
    let stream = dev.new_stream()?;
    let (input, a, b) = fresh(LEN);
    let once = affine_cpu(&input, a, b);
    let mid = LEN / 2 + 4099; // not on a page boundary: the halves share a page
    let mut expected = once.clone();
    expected[mid..].copy_from_slice(&affine_cpu(&once[mid..], a, b));
    let mut data = managed_from(&dev, &input, ManagedAccess::Concurrent)?;
    let mut upper = poisoned::<u32>(LEN - mid);
    scope(&stream, |s| -> TestResult {
        let mut view = s.attach_managed(&mut data)?;
        s.prefetch_to_device(&view)?;
        affine(s, a, b, &mut view)?;
        let (lo, mut hi) = view.into_split_at_mut(mid)?;
        let lower = s.prefetch_to_host(lo)?.wait()?;
        affine(s, a, b, &mut hi)?;
        check_eq(
            "lower half on the host inside the scope",
            &once[..mid],
            lower,
        )?;
        let copied = s.copy_to_host(&hi, &mut upper)?.wait()?;
        check_eq("upper half, one more kernel", &expected[mid..], copied)
    })?;
    check_eq("both halves after the scope", &expected, data.host()?)
}

/// Every hint (`ReadMostly` and back, a preferred location on the device and on the
/// host and back, accessed-by the device and the host and back), each followed by a
/// prefetch, a kernel and a host read: the results match the CPU every time.
fn every_advice_is_accepted_and_leaves_results_unchanged() -> TestResult {
    let (_lock, dev) = begin()?;
    require_concurrent(&dev)?;
    let stream = dev.new_stream()?;
    let (input, a, b) = fresh(LEN);
    let mut data = managed_from(&dev, &input, ManagedAccess::Concurrent)?;
    let mut expected = input.clone();
    let device = ManagedLocation::Device(&dev);
    let advice = [
        ManagedAdvice::ReadMostly,
        ManagedAdvice::NotReadMostly,
        ManagedAdvice::PreferredLocation(device),
        ManagedAdvice::PreferredLocation(ManagedLocation::Host),
        ManagedAdvice::NoPreferredLocation,
        ManagedAdvice::AccessedBy(device),
        ManagedAdvice::NotAccessedBy(device),
        ManagedAdvice::AccessedBy(ManagedLocation::Host),
        ManagedAdvice::NotAccessedBy(ManagedLocation::Host),
        // Left in place for the last round, with a write under read-mostly.
        ManagedAdvice::ReadMostly,
    ];
    for hint in advice {
        data.advise(hint)
            .map_err(|e| Failed::from(format!("advise({hint:?}) failed: {e}")))?;
        scope(&stream, |s| -> TestResult {
            let mut view = s.attach_managed(&mut data)?;
            s.prefetch_to_device(&view)?;
            affine(s, a, b, &mut view)?;
            Ok(())
        })?;
        expected = affine_cpu(&expected, a, b);
        check_eq(
            &format!("after advise({hint:?}) and a kernel"),
            &expected,
            data.host()?,
        )?;
    }
    Ok(())
}

/// Managed memory advised to stay on the host (`PreferredLocation(Host)`) and to be
/// mapped by the device (`AccessedBy(Device)`): kernels with no prefetch read and write
/// it over the bus, three scopes in a row, and the host reads the CPU's results after
/// each (the benchmark's host-resident variant).
fn host_resident_memory_mapped_by_the_device_computes_without_prefetches() -> TestResult {
    let (_lock, dev) = begin()?;
    require_concurrent(&dev)?;
    let stream = dev.new_stream()?;
    let (input, a, b) = fresh(LEN);
    let mut data = managed_from(&dev, &input, ManagedAccess::Concurrent)?;
    data.advise(ManagedAdvice::PreferredLocation(ManagedLocation::Host))?;
    data.advise(ManagedAdvice::AccessedBy(ManagedLocation::Device(&dev)))?;
    let mut expected = input;
    for round in 0..3 {
        scope(&stream, |s| -> TestResult {
            let mut view = s.attach_managed(&mut data)?;
            affine(s, a, b, &mut view)?;
            Ok(())
        })?;
        expected = affine_cpu(&expected, a, b);
        check_eq(
            &format!("host-resident data after kernel {}", round + 1),
            &expected,
            data.host()?,
        )?;
    }
    Ok(())
}

/// One vec attached read-only by a scope on stream a and, nested, a scope on stream b:
/// each computes its own result from it, and the host reads it meanwhile.
fn two_scopes_on_two_streams_and_the_host_share_a_read_only_attach() -> TestResult {
    let (_lock, dev) = begin()?;
    require_concurrent(&dev)?;
    let (sa, sb) = (dev.new_stream()?, dev.new_stream()?);
    let (input, a1, b1) = fresh(LEN);
    let mut rng = Rng::new();
    let (a2, b2): (u32, u32) = (rng.value(), rng.value());
    let data = managed_from(&dev, &input, ManagedAccess::Concurrent)?;
    let (mut out_a, mut out_b) = (poisoned::<u32>(LEN), poisoned::<u32>(LEN));
    scope(&sa, |s| -> TestResult {
        let v = s.attach_managed_ref(&data)?;
        s.prefetch_to_device(&v)?;
        let mut ya = s.alloc::<u32>(LEN)?;
        s.copy_device(&v, &mut ya)?;
        affine(s, a1, b1, &mut ya)?;
        let pending_a = s.copy_to_host(&ya, &mut out_a)?;
        scope(&sb, |t| -> TestResult {
            let w = t.attach_managed_ref(&data)?;
            let mut yb = t.alloc::<u32>(LEN)?;
            t.copy_device(&w, &mut yb)?;
            affine(t, a2, b2, &mut yb)?;
            let got = t.copy_to_host(&yb, &mut out_b)?.wait()?;
            check_eq(
                "stream b's result from the shared vec",
                &affine_cpu(&input, a2, b2),
                got,
            )?;
            check_eq(
                "the host's read while both scopes hold it",
                &input,
                data.host()?,
            )
        })?;
        check_eq(
            "stream a's result from the shared vec",
            &affine_cpu(&input, a1, b1),
            pending_a.wait()?,
        )
    })?;
    check_eq("the vec after both scopes", &input, data.host()?)
}

/// Eight chunks processed in place on one stream while a fork on a second stream
/// prefetches the next chunk each time: every element matches the CPU.
fn fork_prefetches_the_next_chunk_while_the_parent_computes() -> TestResult {
    let (_lock, dev) = begin()?;
    let (main, side) = (dev.new_stream()?, dev.new_stream()?);
    let (input, a, b) = fresh(LEN);
    let mut data = managed_from(&dev, &input, device_access(&dev)?)?;
    scope(&main, |s| -> TestResult {
        let view = s.attach_managed(&mut data)?;
        let mut parts = chunks(view, LEN / 8 + 17)?;
        s.prefetch_to_device(&parts[0])?;
        for i in 0..parts.len() {
            let (done, rest) = parts.split_at_mut(i + 1);
            let current = &mut done[i];
            match rest.first() {
                Some(next) => s.fork(&side, next, |c, next| {
                    c.prefetch_to_device(&next)?;
                    affine(s, a, b, current)?;
                    Ok::<_, Error>(())
                })?,
                None => affine(s, a, b, current)?,
            }
        }
        Ok(())
    })?;
    check_eq(
        "chunks processed with a fork prefetching ahead",
        &affine_cpu(&input, a, b),
        data.host()?,
    )
}

/// A kernel, then a spinning kernel that writes a marker to element 0, then a
/// `prefetch_to_host` still pending when the scope panics: once `catch_unwind` returns,
/// the vec holds the kernel's results and the marker (the scope waited before it let
/// the panic go on), and the stream keeps working.
fn panic_while_a_prefetch_to_host_is_in_flight_completes_it_before_unwinding() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let (input, a, b) = fresh(LEN);
    let mut expected = affine_cpu(&input, a, b);
    let marker = loop {
        let m: u32 = Rng::new().value();
        if m != expected[0] {
            break m;
        }
    };
    expected[0] = marker;
    let mut data = managed_from(&dev, &input, device_access(&dev)?)?;
    let was_ready = Cell::new(None);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        scope(&stream, |s| -> TestResult {
            let mut view = s.attach_managed(&mut data)?;
            affine(s, a, b, &mut view)?;
            gpu_tests::spin_then_write(s, SPIN_CYCLES, marker, &mut view)?;
            let pending = s.prefetch_to_host(view)?;
            was_ready.set(Some(pending.is_ready()?));
            panic!("{DELIBERATE}");
        })
    }));
    match caught {
        Err(payload) if panic_message(&*payload) == DELIBERATE => {}
        Err(payload) => {
            return Err(format!("a different panic: {}", panic_message(&*payload)).into())
        }
        Ok(result) => return Err(format!("the scope did not panic; it returned {result:?}").into()),
    }
    check_eq("the vec after the panic", &expected, data.host()?)?;
    ensure!(
        was_ready.get() == Some(false),
        "the prefetch was {:?} just before the panic (expected Some(false): still pending behind \
         the spinning kernel), so the test did not exercise a prefetch in flight",
        was_ready.get()
    );
    scope(&stream, |s| -> TestResult {
        let mut view = s.attach_managed(&mut data)?;
        affine(s, 1, 1, &mut view)?;
        Ok(())
    })?;
    let plus_one: Vec<u32> = expected.iter().map(|x| x.wrapping_add(1)).collect();
    check_eq(
        "a scope on the same stream after the panic",
        &plus_one,
        data.host()?,
    )
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
    let Error::ManagedExceedsFreeMemory {
        requested,
        free,
        managed: counted,
        margin,
        available,
    } = *e
    else {
        return Err(Failed::from(format!(
            "{what}: got {e:?}, expected ManagedExceedsFreeMemory (a refusal before the driver is asked)"
        )));
    };
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

/// The mode of devices without concurrent managed access, on this device: a kernel in
/// one scope, the host's read after it (attached back to the host), a second scope
/// handing the whole view back with `prefetch_to_host`, and a third moving the whole
/// view into a fork whose child hands it back: all match the CPU.
fn stream_attached_vec_runs_kernels_and_comes_back_to_the_host() -> TestResult {
    let (_lock, dev) = begin()?;
    let (stream, side) = (dev.new_stream()?, dev.new_stream()?);
    let (input, a, b) = fresh(LEN);
    let mut data = managed_from(&dev, &input, ManagedAccess::StreamAttached)?;
    let once = affine_cpu(&input, a, b);
    scope(&stream, |s| -> TestResult {
        let mut view = s.attach_managed(&mut data)?;
        s.prefetch_to_device(&view)?; // nothing to do in this mode, and no error
        affine(s, a, b, &mut view)?;
        Ok(())
    })?;
    check_eq(
        "stream-attached: host read after the scope",
        &once,
        data.host()?,
    )?;

    let twice = affine_cpu(&once, a, b);
    let (written, _, _) = fresh(LEN);
    scope(&stream, |s| -> TestResult {
        let mut view = s.attach_managed(&mut data)?;
        affine(s, a, b, &mut view)?;
        let host = s.prefetch_to_host(view)?.wait()?;
        check_eq(
            "stream-attached: whole view handed back inside the scope",
            &twice,
            host,
        )?;
        host.copy_from_slice(&written);
        Ok(())
    })?;
    check_eq(
        "stream-attached: the host's writes inside the scope",
        &written,
        data.host()?,
    )?;

    scope(&stream, |s| -> TestResult {
        let view = s.attach_managed(&mut data)?;
        s.fork(&side, view, |c, mut view| -> TestResult {
            affine(c, a, b, &mut view)?;
            let host = c.prefetch_to_host(view)?.wait()?;
            check_eq(
                "stream-attached: whole view moved into a fork and handed back there",
                &affine_cpu(&written, a, b),
                host,
            )
        })
    })?;
    check_eq(
        "stream-attached: after the fork's scope",
        &affine_cpu(&written, a, b),
        data.host()?,
    )
}

/// In the stream-attached mode, a read-only attach and a `prefetch_to_host` of a
/// sub-range or a reborrow are `ManagedNeedsConcurrentAccess` (nothing enqueued); the
/// scope goes on, and the whole view still goes back to the host.
fn stream_attached_vec_refuses_what_it_cannot_make_safe() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let (input, a, b) = fresh(LEN);
    let mut data = managed_from(&dev, &input, ManagedAccess::StreamAttached)?;
    scope(&stream, |s| -> TestResult {
        let e = expect_err(
            "attach_managed_ref of a stream-attached vec",
            s.attach_managed_ref(&data).map(drop),
        )?;
        check_needs_concurrent("attach_managed_ref", &e, "attach_managed_ref")?;
        Ok(())
    })?;
    scope(&stream, |s| -> TestResult {
        let mut view = s.attach_managed(&mut data)?;
        affine(s, a, b, &mut view)?;
        let e = expect_err(
            "prefetch_to_host of a reborrow",
            s.prefetch_to_host(view.as_slice_mut()).map(drop),
        )?;
        check_needs_concurrent("prefetch_to_host of a reborrow", &e, "whole and by value")?;
        let e = expect_err(
            "prefetch_to_host of a sub-range",
            s.prefetch_to_host(view.slice_mut(1..)?).map(drop),
        )?;
        check_needs_concurrent("prefetch_to_host of a sub-range", &e, "whole and by value")?;
        let host = s.prefetch_to_host(view)?.wait()?;
        check_eq(
            "the whole view after the refusals",
            &affine_cpu(&input, a, b),
            host,
        )
    })?;
    check_eq("after the scope", &affine_cpu(&input, a, b), data.host()?)
}

/// `e` is `ManagedNeedsConcurrentAccess` whose message contains `part`.
fn check_needs_concurrent(what: &str, e: &Error, part: &str) -> TestResult {
    ensure!(
        matches!(e, Error::ManagedNeedsConcurrentAccess { .. }),
        "{what}: got {e:?}, expected ManagedNeedsConcurrentAccess"
    );
    let message = e.to_string();
    for part in [part, "concurrentManagedAccess = 0"] {
        ensure!(
            message.contains(part),
            "{what}: the message {message:?} lacks {part:?}"
        );
    }
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
    let refused = Error::ManagedExceedsFreeMemory {
        requested: 100,
        free: 90,
        managed: 10,
        margin: 5,
        available: 75,
    }
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
