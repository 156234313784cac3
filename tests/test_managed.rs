//! Managed (unified) memory with concurrent access: `ManagedVec` is the host's between
//! scopes, the scope's while attached, and the host's again after `prefetch_to_host` +
//! `wait`; kernels on prefetched, demand-paged and host-resident data agree with the
//! CPU; advice never changes results; a read-only attach serves two scopes on two
//! streams and the host at once; a fork prefetches ahead while the parent computes; a
//! panic with a prefetch in flight unwinds only once it completed. The stream-attached
//! mode is in `test_managed_stream_attached.rs`; refusals, statistics, empty vecs and
//! error messages in `test_managed_limits.rs`; what the three share in
//! `managed_support/`.
//!
//! Every test takes this binary's lock (they measure the process's managed statistics
//! and the device's free memory), allocates at most a few dozen MiB of managed memory,
//! and checks fresh random data against a CPU reference. Without a CUDA device they are
//! reported as ignored (see `gpu_tests::run`).

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use gpu_tests::{check_eq, ensure, panic_message, poisoned, Failed, Rng, TestResult};
use stream_core::{scope, Error, ManagedAccess, ManagedAdvice, ManagedLocation, ManagedSliceMut};

mod managed_support;
use managed_support::{
    affine, affine_cpu, begin, device_access, fresh, managed_from, require_concurrent, LEN,
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
    ],
}

/// About 0.2 to 0.4 s of spinning at 1 to 2 GHz: the prefetch queued behind it is
/// certainly still pending when the scope panics.
const SPIN_CYCLES: u64 = 400_000_000;

/// The message of the panic a test raises on purpose.
const DELIBERATE: &str =
    "deliberate panic inside a scope with a managed prefetch in flight (expected by this test)";

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
