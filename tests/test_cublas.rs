//! `Cublas` handles, streams and their workspaces on a real GPU (`kernels/src/cublas.rs`,
//! `interop::with_stream_scratch`): one handle used by two unordered streams at once
//! gives the results of one stream (each stream lends its own workspace), two threads
//! issuing GEMMs on one stream take its workspace in turn, a stream's workspace is
//! allocated once and freed with the stream, a workspace that does not fit is
//! `OutOfMemory` (and the scope keeps working), and dropping a handle inside a scope waits
//! for no other work (the handle goes back to an idle list instead of `cublasDestroy`,
//! which would wait for the whole device).
//!
//! The tests measure the device's pool (a workspace is pool memory), so they run one at a
//! time, each from the state `Device::new` leaves (`gpu_tests::pool::begin`).
//!
//! Products are compared with the `f64` reference `gpu_tests::gemm_reference` within
//! the rounding bound of `test_gemm`, and with the same calls made on one stream, bit
//! for bit.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::time::{Duration, Instant};

use gpu_tests::pool::{begin, mib, MIB};
use gpu_tests::{
    check_close, check_eq, ensure, expect_err, gemm_reference, poisoned, signed, spin, Real, Rng,
    TestResult,
};
use kernels::Cublas;
use stream_core::{interop, scope, Device, DeviceVec, Error, Stream};

gpu_tests::test_main! {
    gpu: [
        one_cublas_handle_on_two_streams_at_once_gives_the_results_of_one_stream,
        two_threads_issuing_gemms_on_one_stream_take_its_workspace_in_turn,
        a_streams_workspace_is_allocated_once_and_freed_with_the_stream,
        stream_scratch_is_one_block_per_stream_that_only_grows_and_none_in_a_capture,
        a_workspace_that_does_not_fit_is_out_of_memory_and_the_scope_keeps_working,
        dropping_a_cublas_handle_inside_a_scope_waits_for_no_other_work,
    ],
}

/// The smallest workspace `Cublas` asks of a stream (4 MiB before Hopper, 32 MiB on it).
const MIN_WORKSPACE: usize = 4 * MIB;

/// One GEMM of `a` (`m x k`) and `b` (`k x n`) in a scope of its own on `stream`, through
/// `blas`: its product.
fn gemm_in_a_scope(
    blas: &mut Cublas,
    stream: &Stream,
    (m, n, k): (usize, usize, usize),
    (a, b): (&[f32], &[f32]),
) -> TestResult<Vec<f32>> {
    let mut out = poisoned::<f32>(m * n);
    scope(stream, |s| -> TestResult {
        let (da, db) = (s.upload(a)?, s.upload(b)?);
        let mut dc = s.alloc::<f32>(m * n)?;
        blas.sgemm(s, m as u32, n as u32, k as u32, 1.0, &da, &db, 0.0, &mut dc)?;
        let _download = s.copy_to_host(&dc, &mut out)?;
        Ok(())
    })?;
    Ok(out)
}

/// Two threads, each with a handle of its own, issue GEMMs long in `k` (cuBLAS reduces
/// their split sums through its workspace) on one stream at the same time, 8 each. Both
/// calls on the stream borrow its one workspace, under a lock for as long as each one
/// enqueues, so the kernels of two GEMMs never interleave around it on the stream: every
/// product is bit for bit what the same call gives alone, and within the rounding bound
/// of the `f64` reference.
fn two_threads_issuing_gemms_on_one_stream_take_its_workspace_in_turn() -> TestResult {
    let (_pool, dev) = begin()?;
    let stream = dev.new_stream()?;
    let (m, n, k) = (64, 64, 1 << 15);
    let mut rng = Rng::new();
    let inputs: Vec<(Vec<f32>, Vec<f32>)> = (0..2)
        .map(|_| (signed(&mut rng, m * k), signed(&mut rng, k * n)))
        .collect();
    let mut blas = Cublas::new(&dev)?;
    let alone: Vec<Vec<f32>> = inputs
        .iter()
        .map(|(a, b)| gemm_in_a_scope(&mut blas, &stream, (m, n, k), (a, b)))
        .collect::<TestResult<_>>()?;
    let products: Vec<TestResult<Vec<Vec<f32>>>> = std::thread::scope(|t| {
        let workers: Vec<_> = inputs
            .iter()
            .map(|(a, b)| {
                let (dev, stream) = (&dev, &stream);
                t.spawn(move || -> TestResult<Vec<Vec<f32>>> {
                    let mut blas = Cublas::new(dev)?;
                    (0..8)
                        .map(|_| gemm_in_a_scope(&mut blas, stream, (m, n, k), (a, b)))
                        .collect()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err("a GEMM thread panicked".into()))
            })
            .collect()
    });
    for (i, (thread_products, ((a, b), alone))) in products
        .into_iter()
        .zip(inputs.iter().zip(&alone))
        .enumerate()
    {
        let (ab, abs) = gemm_reference((m, n, k), a, b);
        for (j, got) in thread_products?.iter().enumerate() {
            let what = format!(
                "thread {i}'s GEMM {j} of {m}x{n}x{k}, the other thread issuing on the same stream"
            );
            check_eq(&what, alone, got)?;
            check_close(&what, got, |x| (ab[x], (k + 3) as f64 * f32::U * abs[x]))?;
        }
    }
    Ok(())
}

/// A stream's workspace is pool memory allocated by its first GEMM and kept: 20 more
/// GEMMs on it leave the pool's memory in use where the first left it. Dropping the
/// stream frees it (stream-ordered on the stream, which is idle): in use goes back to
/// where it was before the first GEMM.
fn a_streams_workspace_is_allocated_once_and_freed_with_the_stream() -> TestResult {
    let (_pool, dev) = begin()?;
    let mut blas = Cublas::new(&dev)?;
    let (m, n, k) = (32, 32, 256);
    let mut rng = Rng::new();
    let (a, b) = (
        signed::<f32>(&mut rng, m * k),
        signed::<f32>(&mut rng, k * n),
    );
    let in_use = |dev: &Device| -> TestResult<usize> { Ok(dev.memory_stats()?.in_use_bytes) };
    let before = in_use(&dev)?;
    let stream = dev.new_stream()?;
    let first = gemm_in_a_scope(&mut blas, &stream, (m, n, k), (&a, &b))?;
    let after_first = in_use(&dev)?;
    ensure!(
        after_first >= before + MIN_WORKSPACE,
        "the first GEMM on a stream left {} in use, {} before it: no workspace was kept",
        mib(after_first),
        mib(before)
    );
    for i in 0..20 {
        let again = gemm_in_a_scope(&mut blas, &stream, (m, n, k), (&a, &b))?;
        check_eq(&format!("GEMM {i} after the first"), &first, &again)?;
        let now = in_use(&dev)?;
        ensure!(
            now == after_first,
            "GEMM {i} after the first left {} in use, against {} after the first: the \
             workspace was not reused",
            mib(now),
            mib(after_first)
        );
    }
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = in_use(&dev)?;
        if now <= before {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "5 s after the stream was dropped, {} were still in use, against {} before its \
             first GEMM: its workspace was not freed",
            mib(now),
            mib(before)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `interop::with_stream_scratch`: the same block for a request of the same size or
/// smaller; a larger request gets a new block, which later smaller requests get too; a
/// request from inside the closure of another on the same stream is an error, not a
/// deadlock; another stream has a block of its own; a graph capture gets none (its graph
/// must own its memory).
fn stream_scratch_is_one_block_per_stream_that_only_grows_and_none_in_a_capture() -> TestResult {
    let (_pool, dev) = begin()?;
    let (one, other) = (dev.new_stream()?, dev.new_stream()?);
    let lent = |stream: &Stream, bytes: usize| -> TestResult<u64> {
        let ptr = scope(stream, |s| {
            interop::with_stream_scratch(s, bytes, |ptr| ptr)
        })?;
        ptr.ok_or_else(|| "a scope's stream lent no scratch".into())
    };
    let first = lent(&one, MIB)?;
    ensure!(first != 0, "a 1 MiB scratch block at address 0");
    let smaller = lent(&one, MIB / 2)?;
    ensure!(
        smaller == first,
        "a smaller request got {smaller:#x}, not the stream's block {first:#x}"
    );
    let grown = lent(&one, 8 * MIB)?;
    ensure!(
        grown != first && grown != 0,
        "an 8 MiB request got {grown:#x} (the 1 MiB block was {first:#x})"
    );
    let after = lent(&one, MIB)?;
    ensure!(
        after == grown,
        "after growing, a 1 MiB request got {after:#x}, not the grown block {grown:#x}"
    );
    // Asking again from inside the closure is an error, not a deadlock, and leaves the
    // block lent as before.
    let (outer, inner) = scope(&one, |s| -> TestResult<(u64, String)> {
        let lent = interop::with_stream_scratch(s, MIB, |outer| {
            let inner = interop::with_stream_scratch(s, MIB, |ptr| ptr);
            (outer, inner)
        })?;
        match lent {
            Some((outer, Err(e))) => Ok((outer, e.to_string())),
            other => Err(format!("a nested request on the same stream gave {other:?}").into()),
        }
    })?;
    ensure!(
        outer == grown && inner.contains("called again"),
        "the outer request got {outer:#x} (the block is {grown:#x}); the nested one: {inner}"
    );
    ensure!(
        lent(&one, MIB)? == grown,
        "after a nested request, the stream's block changed"
    );
    let others = lent(&other, MIB)?;
    ensure!(
        others != grown && others != 0,
        "another stream lent {others:#x}, the first stream's block is {grown:#x}"
    );
    let (_graph, in_capture) = dev.capture((), |g, ()| -> TestResult<Option<u64>> {
        let mut x = g.alloc::<u32>(16)?;
        g.zero(&mut x)?;
        Ok(interop::with_stream_scratch(g, MIB, |ptr| ptr)?)
    })?;
    ensure!(
        in_capture.is_none(),
        "a capture lent scratch memory ({in_capture:?}), which its graph would outlive"
    );
    Ok(())
}

/// One `Cublas` handle used by a scope and its fork's child at the same time, on two
/// unordered streams. Each stream lends its own workspace (a handle's default one would
/// be shared by both streams), so both products are bit for bit the ones the same calls
/// give one after the other on one stream, and within the rounding bound of the `f64`
/// reference. The shapes are long in `k`, where cuBLAS splits the sum over blocks and
/// reduces the parts through its workspace.
fn one_cublas_handle_on_two_streams_at_once_gives_the_results_of_one_stream() -> TestResult {
    let (_pool, dev) = begin()?;
    let (parent, child) = (dev.new_stream()?, dev.new_stream()?);
    let mut blas = Cublas::new(&dev)?;
    let mut rng = Rng::new();
    for (m, n, k) in [(64, 64, 1 << 16), (96, 200, 1 << 14)] {
        let inputs: Vec<(Vec<f32>, Vec<f32>)> = (0..2)
            .map(|_| (signed(&mut rng, m * k), signed(&mut rng, k * n)))
            .collect();
        let (ui, ki, ni) = (m as u32, k as u32, n as u32);
        let mut sequential = [poisoned::<f32>(m * n), poisoned::<f32>(m * n)];
        scope(&parent, |s| -> TestResult {
            for ((a, b), out) in inputs.iter().zip(sequential.iter_mut()) {
                let (da, db) = (s.upload(a)?, s.upload(b)?);
                let mut dc = s.alloc::<f32>(m * n)?;
                blas.sgemm(s, ui, ni, ki, 1.0, &da, &db, 0.0, &mut dc)?;
                let _download = s.copy_to_host(&dc, out)?;
            }
            Ok(())
        })?;
        let [mut first, mut second] = [poisoned::<f32>(m * n), poisoned::<f32>(m * n)];
        scope(&parent, |s| -> TestResult {
            let (a0, b0) = (s.upload(&inputs[0].0)?, s.upload(&inputs[0].1)?);
            let (a1, b1) = (s.upload(&inputs[1].0)?, s.upload(&inputs[1].1)?);
            let mut c0 = s.alloc::<f32>(m * n)?;
            let mut c1 = s.alloc::<f32>(m * n)?;
            s.fork(&child, (&a1, &b1, &mut c1), |c, (a1, b1, mut c1)| {
                // Issued back to back on two streams with no order between them: the
                // GPU runs them at the same time.
                blas.sgemm(s, ui, ni, ki, 1.0, &a0, &b0, 0.0, &mut c0)?;
                blas.sgemm(c, ui, ni, ki, 1.0, &a1, &b1, 0.0, &mut c1)
            })?;
            let _first = s.copy_to_host(&c0, &mut first)?;
            let _second = s.copy_to_host(&c1, &mut second)?;
            Ok(())
        })?;
        for (i, (got, alone)) in [&first, &second].into_iter().zip(&sequential).enumerate() {
            let what = format!("GEMM {i} of {m}x{n}x{k} on two streams through one handle");
            check_eq(&what, alone, got)?;
            let (ab, abs) = gemm_reference((m, n, k), &inputs[i].0, &inputs[i].1);
            check_close(&what, got, |j| (ab[j], (k + 3) as f64 * f32::U * abs[j]))?;
        }
    }
    Ok(())
}

/// `cublasDestroy` waits for the whole device, so dropping a `Cublas` must not call it:
/// inside a scope whose stream runs a long kernel, creating and dropping handles
/// returns while that kernel still runs, and the handle is reused afterwards.
fn dropping_a_cublas_handle_inside_a_scope_waits_for_no_other_work() -> TestResult {
    let (_pool, dev) = begin()?;
    let (busy, other) = (dev.new_stream()?, dev.new_stream()?);
    drop(Cublas::new(&dev)?); // the library is loaded and one handle exists
    let mut rng = Rng::new();
    let (a, b) = (
        signed::<f32>(&mut rng, 16 * 8),
        signed::<f32>(&mut rng, 8 * 4),
    );
    let mut out = poisoned::<f32>(16 * 4);
    let mut still_busy = Vec::new();
    scope(&busy, |s| -> TestResult {
        spin(s, 400_000_000)?; // about 200 ms
        for _ in 0..3 {
            let blas = Cublas::new(&dev)?;
            drop(blas);
            still_busy.push(!busy.is_idle()?);
        }
        // A handle taken back from the idle list works, on another stream.
        let mut blas = Cublas::new(&dev)?;
        scope(&other, |t| -> TestResult {
            let (da, db) = (t.upload(&a)?, t.upload(&b)?);
            let mut dc = t.alloc::<f32>(16 * 4)?;
            blas.sgemm(t, 16, 4, 8, 1.0, &da, &db, 0.0, &mut dc)?;
            let _download = t.copy_to_host(&dc, &mut out)?;
            Ok(())
        })?;
        Ok(())
    })?;
    ensure!(
        still_busy.iter().all(|&b| b),
        "the busy stream went idle while handles were dropped ({still_busy:?}): a drop \
         waited for the device"
    );
    let (ab, abs) = gemm_reference((16, 4, 8), &a, &b);
    check_close("SGEMM through a reused handle", &out, |j| {
        (ab[j], 11.0 * f32::U * abs[j])
    })
}

/// The workspace `Cublas` asks a stream for on `dev` (as `kernels/src/cublas.rs` sizes it).
fn workspace_bytes(dev: &Device) -> usize {
    if dev.compute_capability().0 >= 9 {
        32 * MIB
    } else {
        MIN_WORKSPACE
    }
}

/// A `DeviceVec` taking all but a few MiB of the device's free memory (the largest that
/// the pool grants, within 16 MiB of the free memory).
fn fill_the_card(dev: &Device) -> TestResult<DeviceVec<u8>> {
    let (free, _) = dev.memory_info()?;
    for slack in (2..=16).step_by(2) {
        let bytes = (free.saturating_sub(slack * MIB)) / (2 * MIB) * (2 * MIB);
        match dev.alloc_vec::<u8>(bytes) {
            Ok(v) => return Ok(v),
            Err(Error::OutOfMemory { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(format!(
        "no allocation within 16 MiB of the {} free would fit",
        mib(free)
    )
    .into())
}

/// With the card full, the first GEMM on a new stream cannot get its workspace: it is
/// `Error::OutOfMemory` for the workspace's size (after the library's retry), nothing is
/// enqueued, and the scope keeps working; once the memory that filled the card is
/// dropped, the same call in the same scope succeeds and computes the CPU's product.
fn a_workspace_that_does_not_fit_is_out_of_memory_and_the_scope_keeps_working() -> TestResult {
    let (_pool, dev) = begin()?;
    let mut blas = Cublas::new(&dev)?;
    let stream = dev.new_stream()?;
    let (m, n, k) = (16, 8, 32);
    let mut rng = Rng::new();
    let (a, b) = (
        signed::<f32>(&mut rng, m * k),
        signed::<f32>(&mut rng, k * n),
    );
    let workspace = workspace_bytes(&dev);
    let mut out = poisoned::<f32>(m * n);
    scope(&stream, |s| -> TestResult {
        let (da, db) = (s.upload(&a)?, s.upload(&b)?);
        let mut dc = s.alloc::<f32>(m * n)?;
        let hog = fill_the_card(&dev)?;
        let (free, _) = dev.memory_info()?;
        ensure!(
            free < workspace,
            "precondition: {} still free, the workspace needs {}",
            mib(free),
            mib(workspace)
        );
        let (ui, ni, ki) = (m as u32, n as u32, k as u32);
        let e = expect_err(
            "a GEMM whose workspace does not fit",
            blas.sgemm(s, ui, ni, ki, 1.0, &da, &db, 0.0, &mut dc),
        )?;
        ensure!(
            matches!(&e, Error::OutOfMemory(oom) if oom.requested == workspace),
            "a GEMM whose workspace does not fit gave {e:?}, not OutOfMemory for {}",
            mib(workspace)
        );
        drop(hog);
        blas.sgemm(s, ui, ni, ki, 1.0, &da, &db, 0.0, &mut dc)?;
        s.copy_to_host(&dc, &mut out)?.wait()?;
        Ok(())
    })?;
    let (ab, abs) = gemm_reference((m, n, k), &a, &b);
    check_close("the GEMM after the card was freed", &out, |j| {
        (ab[j], (k + 3) as f64 * f32::U * abs[j])
    })
}
