//! Managed memory in the stream-attached mode, the mode of devices without concurrent
//! managed access (chosen here on any GPU with `alloc_managed_with_access`): kernels run
//! and the data comes back to the host, and what a borrow cannot make safe in that mode
//! is refused with an error.
//!
//! The tests take this binary's lock, allocate a few dozen MiB of managed memory and
//! check random data against a CPU reference. Without a CUDA device they are reported
//! as ignored (see `gpu_tests::run`).

use gpu_tests::{check_eq, ensure, expect_err, TestResult};
use stream_core::{scope, Error, ManagedAccess};

mod managed_support;
use managed_support::{affine, affine_cpu, begin, fresh, managed_from, LEN};

gpu_tests::test_main! {
    gpu: [
        stream_attached_vec_runs_kernels_and_comes_back_to_the_host,
        stream_attached_vec_refuses_what_it_cannot_make_safe,
    ],
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
