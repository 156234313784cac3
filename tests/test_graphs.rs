//! CUDA graphs: a graph captured once and replayed many times computes what the CPU
//! computes, with new inputs written and outputs read between replays; graph-owned
//! memory, forks, the `kernels` crate and cuBLAS work inside a capture; a panic inside a
//! capture, or after a replay was enqueued, leaves everything usable.
//!
//! The arithmetic is on `u32` (wrapping), so every result is compared bit for bit with
//! the CPU's. Errors (invalidated captures, updates, scalars, `StreamCapturing`, other
//! devices) are in `test_graph_errors.rs`.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::panic::{catch_unwind, AssertUnwindSafe};

use gpu_tests::{check_eq, device, ensure, poison, Failed, Rng, TestResult};
use stream_core::{kernel, scope, Error, LaunchConfig};

gpu_tests::test_main! {
    gpu: [
        replaying_1000_times_with_new_inputs_matches_the_cpu,
        one_graph_replays_on_several_streams_and_in_a_fork_in_turn,
        fork_and_join_inside_a_capture_order_both_branches,
        graph_owned_memory_is_made_and_freed_in_every_replay,
        a_buffer_forgotten_in_a_capture_does_not_break_later_replays,
        the_kernels_crate_records_into_a_capture,
        cublas_sgemm_records_into_a_capture,
        a_panic_inside_a_capture_ends_it_and_later_captures_work,
        a_panic_after_a_replay_was_enqueued_completes_it_before_unwinding,
    ],
}

/// Test kernels: grid-stride loops within the lengths they are given, for any launch
/// shape; `spin_u32` busy-waits to widen the window in which a missing dependency would
/// show.
const SRC: &str = r#"
extern "C" __global__ void affine_u32(unsigned a, unsigned b, const unsigned* x, size_t x_len,
                                      unsigned* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = a * x[i] + b;
}

extern "C" __global__ void add_u32(const unsigned* x, size_t x_len, unsigned* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

extern "C" __global__ void spin_u32(unsigned long long cycles, unsigned* flag, size_t flag_len) {
    long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) { }
    if (threadIdx.x == 0 && blockIdx.x == 0 && flag_len > 0) flag[0] = 1u;
}
"#;

#[kernel(cuda = SRC)]
/// `y[i] = a * x[i] + b` (wrapping).
unsafe fn affine_u32(a: u32, b: u32, x: &[u32], y: &mut [u32]);

#[kernel(cuda = SRC)]
/// `y[i] += x[i]` (wrapping).
unsafe fn add_u32(x: &[u32], y: &mut [u32]);

#[kernel(cuda = SRC)]
/// Busy-waits about `cycles` clock cycles, then sets `flag[0]`.
unsafe fn spin_u32(cycles: u64, flag: &mut [u32]);

/// About 10 ms at the 1 to 2 GHz clocks of current GPUs: far longer than the work it
/// delays, so that work not ordered after it would run first.
const SPIN_CYCLES: u64 = 20_000_000;

/// The CPU's `affine_u32`.
fn affine(a: u32, b: u32, x: &[u32]) -> Vec<u32> {
    x.iter()
        .map(|&v| a.wrapping_mul(v).wrapping_add(b))
        .collect()
}

/// The CPU's `add_u32`.
fn add(x: &[u32], y: &mut [u32]) {
    y.iter_mut()
        .zip(x)
        .for_each(|(y, &x)| *y = y.wrapping_add(x));
}

/// A graph made of a pinned upload, two kernels, an accumulation into a `DeviceVec` the
/// graph writes and a pinned download, replayed 1000 times in one scope: before each
/// replay the input is refilled with fresh data and the output poisoned through the
/// graph, after `wait` the output is compared with the CPU; the accumulated `DeviceVec`
/// holds the sum of every replay's output.
fn replaying_1000_times_with_new_inputs_matches_the_cpu() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let mut rng = Rng::new();
    let n = 3001;
    let weights_host: Vec<u32> = rng.vec(n);
    let weights = dev.upload_vec(&weights_host)?;
    let mut total = dev.alloc_vec::<u32>(n)?;
    let (a, b): (u32, u32) = (rng.value(), rng.value());
    let (input, output) = (dev.alloc_pinned::<u32>(n)?, dev.alloc_pinned::<u32>(n)?);
    let config = LaunchConfig::for_elements(n, 256);
    let (mut graph, ()) = dev.capture(
        (input, output, &weights, &mut total),
        |g, (x_host, mut y_host, w, mut total)| {
            let x = g.upload(&x_host)?;
            let mut y = g.alloc::<u32>(n)?;
            affine_u32(g, config, a, b, &x, &mut y)?;
            add_u32(g, config, &w, &mut y)?;
            add_u32(g, config, &y, &mut total)?;
            g.copy_to_host(&y, &mut y_host)?;
            Ok::<_, Error>(())
        },
    )?;
    let mut expected_total = vec![0u32; n];
    scope(&stream, |s| -> TestResult {
        let mut graph = &mut graph;
        for step in 0..1000 {
            let inputs: Vec<u32> = rng.vec(n);
            {
                let (x, y, _, _) = graph.held_mut();
                x.copy_from_slice(&inputs);
                poison(y);
            }
            graph = s.replay(graph)?.wait()?;
            let mut expected = affine(a, b, &inputs);
            add(&weights_host, &mut expected);
            check_eq(&format!("replay {step}"), &expected, graph.held().1)?;
            add(&expected, &mut expected_total);
        }
        Ok(())
    })?;
    let accumulated = graph.held().3.to_host_vec()?;
    check_eq(
        "the DeviceVec the graph adds every replay's output to",
        &expected_total,
        &accumulated,
    )
}

/// One graph replayed in turn on two streams (separate scopes) and in a fork's child,
/// with new inputs each time: each replay's output is complete and right once the scope
/// that replayed it has ended.
fn one_graph_replays_on_several_streams_and_in_a_fork_in_turn() -> TestResult {
    let dev = device()?;
    let (a_stream, b_stream) = (dev.new_stream()?, dev.new_stream()?);
    let mut rng = Rng::new();
    let n = 4096;
    let (a, b): (u32, u32) = (rng.value(), rng.value());
    let (input, output) = (dev.alloc_pinned::<u32>(n)?, dev.alloc_pinned::<u32>(n)?);
    let config = LaunchConfig::for_elements(n, 256);
    let (mut graph, ()) = dev.capture((input, output), |g, (x_host, mut y_host)| {
        let x = g.upload(&x_host)?;
        let mut y = g.alloc::<u32>(n)?;
        affine_u32(g, config, a, b, &x, &mut y)?;
        g.copy_to_host(&y, &mut y_host)?;
        Ok::<_, Error>(())
    })?;
    for round in 0..6 {
        let inputs: Vec<u32> = rng.vec(n);
        {
            let (x, y) = graph.held_mut();
            x.copy_from_slice(&inputs);
            poison(y);
        }
        let (stream, other) = if round % 2 == 0 {
            (&a_stream, &b_stream)
        } else {
            (&b_stream, &a_stream)
        };
        let where_ = if round < 4 {
            scope(stream, |s| s.replay(&mut graph).map(drop))?;
            "its own scope"
        } else {
            scope(stream, |s| {
                s.fork(other, (), |c, ()| c.replay(&mut graph).map(drop))
            })?;
            "a fork's child"
        };
        check_eq(
            &format!("replay {round} in {where_}"),
            &affine(a, b, &inputs),
            graph.held().1,
        )?;
    }
    Ok(())
}

/// A fork inside a capture: the child spins, computes one half and downloads it into a
/// half of the held output; the parent, inside the fork's closure, computes the other
/// half concurrently; after the fork (its join) it adds the child's half to its own and
/// downloads the sum. Were the join missing, the addition would read the child's half
/// before the spinning child wrote it.
fn fork_and_join_inside_a_capture_order_both_branches() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let mut rng = Rng::new();
    let half = 2000;
    let n = 2 * half;
    let (a1, b1, a2, b2): (u32, u32, u32, u32) =
        (rng.value(), rng.value(), rng.value(), rng.value());
    let (input, output) = (dev.alloc_pinned::<u32>(n)?, dev.alloc_pinned::<u32>(n)?);
    let config = LaunchConfig::for_elements(half, 256);
    let spin_config = LaunchConfig::for_elements(1, 32);
    let (mut graph, ()) = dev.capture((input, output), |g, (x_host, mut out)| {
        let x = g.upload(&x_host)?;
        let (x_lo, x_hi) = x.as_slice().split_at(half)?;
        let mut y = g.alloc::<u32>(n)?;
        let (mut y_lo, mut y_hi) = y.split_at_mut(half)?;
        let (mut out_lo, mut out_hi) = out.split_at_mut(half)?;
        g.fork(
            (x_hi, &mut y_hi, &mut out_hi),
            |c, (x_hi, mut y_hi, mut out_hi)| {
                let mut flag = c.alloc::<u32>(1)?;
                spin_u32(c, spin_config, SPIN_CYCLES, &mut flag)?;
                affine_u32(c, config, a2, b2, &x_hi, &mut y_hi)?;
                c.copy_to_host(&y_hi, &mut out_hi)?;
                // The parent's branch, recorded during the fork: concurrent with the
                // child's.
                affine_u32(g, config, a1, b1, &x_lo, &mut y_lo)?;
                Ok::<_, Error>(())
            },
        )?;
        add_u32(g, config, &y_hi, &mut y_lo)?;
        g.copy_to_host(&y_lo, &mut out_lo)?;
        Ok::<_, Error>(())
    })?;
    for replay in 0..20 {
        let inputs: Vec<u32> = rng.vec(n);
        {
            let (x, out) = graph.held_mut();
            x.copy_from_slice(&inputs);
            poison(out);
        }
        scope(&stream, |s| s.replay(&mut graph).map(drop))?;
        let hi = affine(a2, b2, &inputs[half..]);
        let mut lo = affine(a1, b1, &inputs[..half]);
        add(&hi, &mut lo);
        let out = graph.held().1;
        check_eq(
            &format!("replay {replay}: the child's half"),
            &hi,
            &out[half..],
        )?;
        check_eq(
            &format!("replay {replay}: the parent's half plus the child's, after the join"),
            &lo,
            &out[..half],
        )?;
    }
    Ok(())
}

/// Eight buffers of the graph's own, of different sizes, allocated, used and dropped in
/// turn inside the capture (allocation and free nodes), and a zeroed accumulator: every
/// replay starts from zero again and computes the same sum as the CPU.
fn graph_owned_memory_is_made_and_freed_in_every_replay() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let mut rng = Rng::new();
    let n = 1500;
    let (input, output) = (dev.alloc_pinned::<u32>(n)?, dev.alloc_pinned::<u32>(n)?);
    let config = LaunchConfig::for_elements(n, 256);
    let (mut graph, ()) = dev.capture((input, output), |g, (x_host, mut y_host)| {
        let x = g.upload(&x_host)?;
        let mut sum = g.alloc_zeroed::<u32>(n)?;
        for k in 0..8u32 {
            let mut t = g.alloc::<u32>(n + 17 * k as usize)?;
            let mut t = t.slice_mut(..n)?;
            affine_u32(g, config, k + 1, k, &x, &mut t)?;
            add_u32(g, config, &t, &mut sum)?;
        }
        g.copy_to_host(&sum, &mut y_host)?;
        Ok::<_, Error>(())
    })?;
    for replay in 0..50 {
        let inputs: Vec<u32> = rng.vec(n);
        {
            let (x, y) = graph.held_mut();
            x.copy_from_slice(&inputs);
            poison(y);
        }
        scope(&stream, |s| s.replay(&mut graph).map(drop))?;
        let mut expected = vec![0u32; n];
        for k in 0..8u32 {
            add(&affine(k + 1, k, &inputs), &mut expected);
        }
        check_eq(
            &format!("replay {replay} of a graph with eight allocations of its own"),
            &expected,
            graph.held().1,
        )?;
    }
    Ok(())
}

/// A buffer of the graph's own that the capture forgets (`mem::forget`, so no free node)
/// stays allocated after a replay; the graph is instantiated to free it at the next
/// launch, so later replays still run and compute the right result.
fn a_buffer_forgotten_in_a_capture_does_not_break_later_replays() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let n = 1024;
    let output = dev.alloc_pinned::<u32>(n)?;
    let (mut graph, ()) = dev.capture(output, |g, mut out| {
        let mut kept = g.alloc::<u32>(n)?;
        g.fill(&mut kept, 9)?;
        g.copy_to_host(&kept, &mut out)?;
        std::mem::forget(kept);
        Ok::<_, Error>(())
    })?;
    for replay in 0..5 {
        poison(graph.held_mut());
        scope(&stream, |s| s.replay(&mut graph).map(drop))?;
        check_eq(
            &format!("replay {replay} after a forgotten buffer"),
            &vec![9u32; n],
            graph.held(),
        )?;
    }
    Ok(())
}

/// `kernels::fill`, `kernels::scale` and `kernels::reduce_sum` (which allocates its
/// partial sums: the graph's own memory) take a capture where they take a scope. Small
/// integers keep every `f32` result exact.
fn the_kernels_crate_records_into_a_capture() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let mut rng = Rng::new();
    let n = 5000;
    let (input, scaled, sum, filled) = (
        dev.alloc_pinned::<f32>(n)?,
        dev.alloc_pinned::<f32>(n)?,
        dev.alloc_pinned::<f32>(1)?,
        dev.alloc_pinned::<u32>(n)?,
    );
    let (mut graph, ()) = dev.capture(
        (input, scaled, sum, filled),
        |g, (x_host, mut scaled_host, mut sum_host, mut filled_host)| {
            let x = g.upload(&x_host)?;
            let mut y = g.alloc::<f32>(n)?;
            kernels::scale(g, 2.0f32, &x, &mut y)?;
            g.copy_to_host(&y, &mut scaled_host)?;
            let mut total = g.alloc::<f32>(1)?;
            kernels::reduce_sum(g, &x, &mut total)?;
            g.copy_to_host(&total, &mut sum_host)?;
            let mut f = g.alloc::<u32>(n)?;
            kernels::fill(g, &mut f, 77u32)?;
            g.copy_to_host(&f, &mut filled_host)?;
            Ok::<_, Error>(())
        },
    )?;
    for replay in 0..10 {
        let inputs: Vec<f32> = (0..n).map(|_| (rng.below(100) + 1) as f32).collect();
        {
            let (x, scaled, sum, filled) = graph.held_mut();
            x.copy_from_slice(&inputs);
            poison(scaled);
            poison(sum);
            poison(filled);
        }
        scope(&stream, |s| s.replay(&mut graph).map(drop))?;
        let (_, scaled, sum, filled) = graph.held();
        let doubled: Vec<f32> = inputs.iter().map(|v| 2.0 * v).collect();
        check_eq(
            &format!("replay {replay}: kernels::scale"),
            &doubled,
            scaled,
        )?;
        let exact: f32 = inputs.iter().sum();
        check_eq(
            &format!("replay {replay}: kernels::reduce_sum"),
            &[exact],
            sum,
        )?;
        check_eq(
            &format!("replay {replay}: kernels::fill"),
            &vec![77u32; n],
            filled,
        )?;
    }
    Ok(())
}

/// `Cublas::sgemm` recorded into a graph (its workspace becomes an allocation of the
/// graph's own) computes the CPU's product at every replay, with new inputs. Small
/// integers keep the products and sums exact in `f32`.
fn cublas_sgemm_records_into_a_capture() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let mut blas = kernels::Cublas::new(&dev)?;
    let mut rng = Rng::new();
    let (m, n, k) = (37usize, 29usize, 41usize);
    let (a_host, b_host, c_host) = (
        dev.alloc_pinned::<f32>(m * k)?,
        dev.alloc_pinned::<f32>(k * n)?,
        dev.alloc_pinned::<f32>(m * n)?,
    );
    let (mut graph, ()) = dev.capture((a_host, b_host, c_host), |g, (a, b, mut c_out)| {
        let (a, b) = (g.upload(&a)?, g.upload(&b)?);
        let mut c = g.alloc::<f32>(m * n)?;
        blas.sgemm(g, m as u32, n as u32, k as u32, 1.0, &a, &b, 0.0, &mut c)?;
        g.copy_to_host(&c, &mut c_out)?;
        Ok::<_, Error>(())
    })?;
    for replay in 0..5 {
        let small = |rng: &mut Rng, len: usize| -> Vec<f32> {
            (0..len).map(|_| rng.below(9) as f32 - 4.0).collect()
        };
        let (a, b) = (small(&mut rng, m * k), small(&mut rng, k * n));
        {
            let (a_in, b_in, c_out) = graph.held_mut();
            a_in.copy_from_slice(&a);
            b_in.copy_from_slice(&b);
            poison(c_out);
        }
        scope(&stream, |s| s.replay(&mut graph).map(drop))?;
        let expected: Vec<f32> = (0..m * n)
            .map(|idx| {
                let (i, j) = (idx / n, idx % n);
                (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum()
            })
            .collect();
        check_eq(
            &format!("replay {replay}: cuBLAS sgemm"),
            &expected,
            graph.held().2,
        )?;
    }
    Ok(())
}

/// A panic inside a capture's closure (and inside a fork of a capture) unwinds through
/// the capture, which ends it and discards what it recorded; the device keeps working:
/// a later capture, replayed, computes the right result.
fn a_panic_inside_a_capture_ends_it_and_later_captures_work() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let caught = catch_unwind(AssertUnwindSafe(|| {
        dev.capture((), |g, ()| -> Result<(), Error> {
            let mut x = g.alloc::<u32>(256)?;
            g.fill(&mut x, 1)?;
            panic!("deliberate panic inside a capture (expected by this test)");
        })
    }));
    ensure!(caught.is_err(), "the capture's panic did not propagate");
    let caught = catch_unwind(AssertUnwindSafe(|| {
        dev.capture((), |g, ()| -> Result<(), Error> {
            let x = g.alloc::<u32>(256)?;
            g.fork(x, |c, mut x| -> Result<(), Error> {
                c.fill(&mut x, 2)?;
                panic!("deliberate panic inside a capture's fork (expected by this test)");
            })
        })
    }));
    ensure!(caught.is_err(), "the fork's panic did not propagate");
    let n = 300;
    let output = dev.alloc_pinned::<u32>(n)?;
    let (mut graph, ()) = dev.capture(output, |g, mut out| {
        let mut x = g.alloc::<u32>(n)?;
        g.fill(&mut x, 42)?;
        g.copy_to_host(&x, &mut out)?;
        Ok::<_, Error>(())
    })?;
    poison(graph.held_mut());
    scope(&stream, |s| s.replay(&mut graph).map(drop))?;
    check_eq(
        "a capture after two panicking ones",
        &vec![42u32; n],
        graph.held(),
    )
}

/// A scope that enqueues a replay (behind a spinning kernel) and then panics
/// synchronises its stream before the panic leaves it: once `catch_unwind` returns, the
/// replay's output is complete in the held pinned buffer, and the graph replays again
/// with new inputs.
fn a_panic_after_a_replay_was_enqueued_completes_it_before_unwinding() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let mut rng = Rng::new();
    let n = 2048;
    let (a, b): (u32, u32) = (rng.value(), rng.value());
    let (input, output) = (dev.alloc_pinned::<u32>(n)?, dev.alloc_pinned::<u32>(n)?);
    let config = LaunchConfig::for_elements(n, 256);
    let spin_config = LaunchConfig::for_elements(1, 32);
    let (mut graph, ()) = dev.capture((input, output), |g, (x_host, mut y_host)| {
        let mut flag = g.alloc::<u32>(1)?;
        spin_u32(g, spin_config, 10 * SPIN_CYCLES, &mut flag)?;
        let x = g.upload(&x_host)?;
        let mut y = g.alloc::<u32>(n)?;
        affine_u32(g, config, a, b, &x, &mut y)?;
        g.copy_to_host(&y, &mut y_host)?;
        Ok::<_, Error>(())
    })?;
    for attempt in 0..2 {
        let inputs: Vec<u32> = rng.vec(n);
        {
            let (x, y) = graph.held_mut();
            x.copy_from_slice(&inputs);
            poison(y);
        }
        let caught = catch_unwind(AssertUnwindSafe(|| {
            scope(&stream, |s| -> TestResult {
                let _replay = s.replay(&mut graph)?;
                if attempt == 0 {
                    panic!("deliberate panic after a replay (expected by this test)");
                }
                Ok(())
            })
        }));
        match (attempt, caught) {
            (0, Err(_)) => {}
            (0, Ok(_)) => return Err(Failed::from("the scope's panic did not propagate")),
            (_, Ok(done)) => done?,
            (_, Err(_)) => return Err(Failed::from("the second scope panicked")),
        }
        check_eq(
            &format!("attempt {attempt}: the replay's output once its scope has ended"),
            &affine(a, b, &inputs),
            graph.held().1,
        )?;
    }
    Ok(())
}
