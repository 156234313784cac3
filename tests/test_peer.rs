//! Work across devices in one process: forks onto another device's stream, hand-offs
//! to a scope on another device, kernels and copies that reach lent memory over the
//! peer path, and `scope_all!` over several streams.
//!
//! The one-GPU tests run everywhere a GPU is; the two-GPU tests are registered only
//! with two devices (stderr says when they are left out). Every result is checked
//! against the host, element for element. The tests run one at a time (`serial`): one
//! of them compares a device's memory statistics before and after, which another
//! test's buffers would change.

use std::panic::{catch_unwind, AssertUnwindSafe};

use cudarc::driver::result as cu;
use gpu_tests::tests;
use gpu_tests::{
    check_eq, ensure, gpu_status, poisoned, serial, stream, GpuStatus, Rng, Test, TestResult,
};
use stream_core::{scope, scope_all, Device, Error, Stream};

fn main() {
    let mut gpu: Vec<Test> = tests![
        scope_all_over_two_streams_of_one_device_ends_with_both_done,
        scope_all_over_three_streams_hands_buffers_along,
    ];
    match gpu_status() {
        GpuStatus::Present(n) if *n >= 2 => gpu.extend(tests![
            a_fork_onto_another_device_reads_and_writes_lent_memory,
            forks_onto_another_device_lend_an_option_some_or_none,
            a_buffer_handed_to_another_device_is_used_and_freed_there,
            the_parent_works_inside_a_fork_onto_another_device,
            a_fork_back_onto_the_first_device_reaches_memory_of_both,
            scope_all_over_two_devices_hands_a_buffer_across,
            a_panic_in_a_fork_onto_another_device_joins_and_restores_the_context,
        ]),
        GpuStatus::Present(n) => eprintln!(
            "test_peer: {n} CUDA device(s): the two-GPU tests are not registered (run \
             this binary on a machine with two GPUs to cover forks and hand-offs across \
             devices)"
        ),
        GpuStatus::Absent(_) => {}
    }
    gpu_tests::run(&gpu, &[])
}

/// A stream on each of the first two devices.
fn two_devices() -> TestResult<(Device, Device, Stream, Stream)> {
    let (d0, d1) = (Device::new(0)?, Device::new(1)?);
    let (s0, s1) = (d0.new_stream()?, d1.new_stream()?);
    Ok((d0, d1, s0, s1))
}

/// `a * x` element-wise, on the host.
fn scaled(a: f32, x: &[f32]) -> Vec<f32> {
    x.iter().map(|v| a * v).collect()
}

/// The context current on this thread, as a number to compare.
fn current_context() -> TestResult<usize> {
    let current = cu::ctx::get_current().map_err(|e| format!("cuCtxGetCurrent: {e:?}"))?;
    Ok(current.map_or(0, |c| c as usize))
}

fn scope_all_over_two_streams_of_one_device_ends_with_both_done() -> TestResult {
    let _one_at_a_time = serial();
    let (s0, s1) = (stream()?, stream()?);
    let mut rng = Rng::new();
    let (x, y): (Vec<f32>, Vec<f32>) = (rng.vec(70_001), rng.vec(1 << 20));
    let (mut out_x, mut out_y) = (poisoned::<f32>(x.len()), poisoned::<f32>(y.len()));
    scope_all!([&s0, &s1], |a, b| {
        let dx = a.upload(&x)?;
        let dy = b.upload(&y)?;
        let mut sx = a.alloc::<f32>(x.len())?;
        let mut sy = b.alloc::<f32>(y.len())?;
        kernels::scale(a, 2.0, &dx, &mut sx)?;
        kernels::scale(b, 3.0, &dy, &mut sy)?;
        let _ = a.copy_to_host(&sx, &mut out_x)?;
        let _ = b.copy_to_host(&sy, &mut out_y)?;
        Ok::<_, Error>(())
    })?;
    check_eq("stream 0's result", &scaled(2.0, &x), &out_x)?;
    check_eq("stream 1's result", &scaled(3.0, &y), &out_y)
}

fn scope_all_over_three_streams_hands_buffers_along() -> TestResult {
    let _one_at_a_time = serial();
    let (s0, s1, s2) = (stream()?, stream()?, stream()?);
    let x: Vec<f32> = Rng::new().vec(300_007);
    let mut out = poisoned::<f32>(x.len());
    scope_all!([&s0, &s1, &s2], |a, b, c| {
        let dx = a.upload(&x)?;
        // a -> b -> c, each step ordered by the hand-off's event.
        let dx = a.hand_off(dx, b)?;
        let mut once = b.alloc::<f32>(x.len())?;
        kernels::scale(b, 2.0, &dx, &mut once)?;
        let once = b.hand_off(once, c)?;
        let mut twice = c.alloc::<f32>(x.len())?;
        kernels::scale(c, 5.0, &once, &mut twice)?;
        let _ = c.copy_to_host(&twice, &mut out)?;
        Ok::<_, Error>(())
    })?;
    check_eq("x * 2 * 5 across three streams", &scaled(10.0, &x), &out)
}

fn a_fork_onto_another_device_reads_and_writes_lent_memory() -> TestResult {
    let _one_at_a_time = serial();
    let (_d0, _d1, s0, s1) = two_devices()?;
    let x: Vec<f32> = Rng::new().vec((1 << 22) + 3);
    let n = x.len();
    let (mut out_y, mut out_copy) = (poisoned::<f32>(n), poisoned::<f32>(n));
    scope(&s0, |s| {
        let dx = s.upload(&x)?; // GPU 0
        let mut dy = s.alloc_zeroed::<f32>(n)?; // GPU 0
        s.fork(&s1, (&dx, &mut dy), |c, (x0, mut y0)| {
            // A kernel on GPU 1 reads GPU 0's `x` and writes GPU 1's `z`...
            let mut z = c.alloc::<f32>(n)?;
            kernels::scale(c, 2.0, &x0, &mut z)?;
            // ...then writes GPU 0's `y` from it.
            kernels::axpy(c, 1.0, &z, &mut y0)?;
            // A device copy from GPU 0's memory into GPU 1's.
            let mut copy = c.alloc::<f32>(n)?;
            c.copy_device(&x0, &mut copy)?;
            let _ = c.copy_to_host(&copy, &mut out_copy)?;
            Ok::<_, Error>(())
        })?;
        // Ordered after the child's writes by the join.
        let _ = s.copy_to_host(&dy, &mut out_y)?;
        Ok::<_, Error>(())
    })?;
    check_eq(
        "GPU 0 memory written by a GPU 1 kernel",
        &scaled(2.0, &x),
        &out_y,
    )?;
    check_eq("GPU 0 memory copied into GPU 1's", &x, &out_copy)
}

/// A pipeline's pattern: forks onto GPU 1 lending `None` (nothing yet), then
/// `Some(&x)` of GPU 0's memory. The child receives what was lent; with `None` nothing
/// of GPU 0 is lent, so no peer access is needed (`Lend::lends_memory`; on a pair
/// without a peer path this is what lets the fork run at all).
fn forks_onto_another_device_lend_an_option_some_or_none() -> TestResult {
    let _one_at_a_time = serial();
    let (_d0, _d1, s0, s1) = two_devices()?;
    let x: Vec<f32> = Rng::new().vec(1 << 16);
    let n = x.len();
    let (mut out_none, mut out_some) = (poisoned::<f32>(n), poisoned::<f32>(n));
    scope(&s0, |s| {
        let dx = s.upload(&x)?; // GPU 0
        for (lent, out) in [(None, &mut out_none), (Some(&dx), &mut out_some)] {
            s.fork(&s1, lent, |c, x0| {
                let mut z = c.alloc_zeroed::<f32>(n)?; // GPU 1
                if let Some(x0) = x0 {
                    kernels::scale(c, 3.0, &x0, &mut z)?;
                }
                let _ = c.copy_to_host(&z, out)?;
                Ok::<_, Error>(())
            })?;
        }
        Ok::<_, Error>(())
    })?;
    check_eq("a fork lent None (zeros)", &vec![0.0; n], &out_none)?;
    check_eq("a fork lent Some(&x) of GPU 0", &scaled(3.0, &x), &out_some)
}

fn a_buffer_handed_to_another_device_is_used_and_freed_there() -> TestResult {
    let _one_at_a_time = serial();
    let (d0, _d1, s0, s1) = two_devices()?;
    let x: Vec<f32> = Rng::new().vec(1 << 21);
    let n = x.len();
    let (mut out_z, mut out_back) = (poisoned::<f32>(n), poisoned::<f32>(n));
    let before = d0.memory_stats()?.in_use_bytes;
    scope(&s0, |s| -> TestResult {
        let dx = s.upload(&x)?;
        let back = s.fork(&s1, (), |c, ()| {
            let dx = s.hand_off(dx, c)?; // now the child's, freed on GPU 1's stream
            let mut z = c.alloc::<f32>(n)?;
            kernels::scale(c, 4.0, &dx, &mut z)?;
            let _ = c.copy_to_host(&z, &mut out_z)?;
            // And one back: GPU 1 memory, the parent's from now on.
            c.hand_off(z, s)
        })?;
        let _ = s.copy_to_host(&back, &mut out_back)?;
        Ok(())
    })?;
    // The buffer's free ran on GPU 1's stream, which GPU 0's scope waited for through
    // the join; the empty scope makes sure GPU 1's stream has passed it too.
    scope(&s1, |_| Ok::<_, Error>(()))?;
    check_eq(
        "a handed-off buffer used on GPU 1",
        &scaled(4.0, &x),
        &out_z,
    )?;
    check_eq(
        "GPU 1 memory handed back to GPU 0's scope",
        &scaled(4.0, &x),
        &out_back,
    )?;
    let after = d0.memory_stats()?.in_use_bytes;
    ensure!(
        after == before,
        "GPU 0's pool holds {after} bytes after the scope, {before} before: the buffer \
         freed on GPU 1's stream was not returned"
    );
    Ok(())
}

fn the_parent_works_inside_a_fork_onto_another_device() -> TestResult {
    let _one_at_a_time = serial();
    let (_d0, _d1, s0, s1) = two_devices()?;
    let mut rng = Rng::new();
    let (x, y): (Vec<f32>, Vec<f32>) = (rng.vec(1 << 18), rng.vec(1 << 18));
    let n = x.len();
    let (mut out_x, mut out_y) = (poisoned::<f32>(n), poisoned::<f32>(n));
    scope(&s0, |s| -> TestResult {
        let outer = current_context()?;
        s.fork(&s1, (), |c, ()| -> TestResult {
            ensure!(
                current_context()? != outer,
                "the child's context is not current inside a fork onto another device"
            );
            // The parent's upload, kernel and download, issued with GPU 1's context
            // current.
            let dx = s.upload(&x)?;
            let mut sx = s.alloc::<f32>(n)?;
            kernels::scale(s, -1.0, &dx, &mut sx)?;
            let host = s.copy_to_host(&sx, &mut out_x)?.wait()?;
            check_eq(
                "the parent's work inside the child",
                &scaled(-1.0, &x),
                host,
            )?;
            let dy = c.upload(&y)?;
            let _ = c.copy_to_host(&dy, &mut out_y)?;
            Ok(())
        })?;
        ensure!(
            current_context()? == outer,
            "the parent's context is not current again after the fork"
        );
        Ok(())
    })?;
    check_eq("the child's round trip", &y, &out_y)
}

fn a_fork_back_onto_the_first_device_reaches_memory_of_both() -> TestResult {
    let _one_at_a_time = serial();
    let (d0, _d1, s0, s1) = two_devices()?;
    let s0b = d0.new_stream()?;
    let x: Vec<f32> = Rng::new().vec(1 << 20);
    let n = x.len();
    let mut out = poisoned::<f32>(n);
    scope(&s0, |s| {
        let dx = s.upload(&x)?; // GPU 0
        s.fork(&s1, &dx, |c, x0| {
            let mut y1 = c.alloc::<f32>(n)?; // GPU 1
            kernels::scale(c, 3.0, &x0, &mut y1)?;
            // Back on GPU 0, lending GPU 0 memory (lent to `c`) and GPU 1 memory.
            c.fork(&s0b, (&x0, &y1), |g, (x0, y1)| {
                let mut sum = g.alloc::<f32>(n)?;
                g.copy_device(&y1, &mut sum)?; // GPU 1 -> GPU 0
                kernels::axpy(g, 1.0, &x0, &mut sum)?; // 3x + x
                let _ = g.copy_to_host(&sum, &mut out)?;
                Ok::<_, Error>(())
            })
        })
    })?;
    check_eq("3x + x over GPU 0 -> 1 -> 0", &scaled(4.0, &x), &out)
}

fn scope_all_over_two_devices_hands_a_buffer_across() -> TestResult {
    let _one_at_a_time = serial();
    let (_d0, _d1, s0, s1) = two_devices()?;
    // Small integers: y + 2x is exact whether or not the kernel fuses it.
    let mut rng = Rng::new();
    let small = |rng: &mut Rng| (rng.below(2001) as f32) - 1000.0;
    let x: Vec<f32> = (0..1 << 20).map(|_| small(&mut rng)).collect();
    let y: Vec<f32> = (0..1 << 20).map(|_| small(&mut rng)).collect();
    let n = x.len();
    let mut out = poisoned::<f32>(n);
    scope_all!([&s0, &s1], |a, b| {
        let dx = a.upload(&x)?;
        let mut dy = b.upload(&y)?;
        let dx = a.hand_off(dx, b)?;
        kernels::axpy(b, 2.0, &dx, &mut dy)?; // y + 2x on GPU 1, x on GPU 0
        let _ = b.copy_to_host(&dy, &mut out)?;
        Ok::<_, Error>(())
    })?;
    let expected: Vec<f32> = x.iter().zip(&y).map(|(x, y)| 2.0 * x + y).collect();
    check_eq("y + 2x across two devices", &expected, &out)
}

fn a_panic_in_a_fork_onto_another_device_joins_and_restores_the_context() -> TestResult {
    let _one_at_a_time = serial();
    let (_d0, _d1, s0, s1) = two_devices()?;
    let x: Vec<f32> = Rng::new().vec(1 << 22);
    let n = x.len();
    let mut out = poisoned::<f32>(n);
    scope(&s0, |s| -> TestResult {
        let outer = current_context()?;
        let mut dy = s.alloc_zeroed::<f32>(n)?;
        let dx = s.upload(&x)?;
        let unwound = catch_unwind(AssertUnwindSafe(|| {
            s.fork(&s1, (&dx, &mut dy), |c, (x0, mut y0)| {
                c.copy_device(&x0, &mut y0)?;
                panic!("a panic inside the child, with a copy in flight");
                #[allow(unreachable_code)]
                Ok::<_, Error>(())
            })
        }));
        ensure!(
            unwound.is_err(),
            "the child's panic did not reach the parent"
        );
        ensure!(
            current_context()? == outer,
            "the parent's context is not current again after the child unwound"
        );
        // The join was enqueued while unwinding: this download sees the child's copy.
        let _ = s.copy_to_host(&dy, &mut out)?;
        Ok(())
    })?;
    check_eq("the copy of a child that panicked", &x, &out)
}
