//! `Cublas` handles and streams on a real GPU (`kernels/src/cublas.rs`): one handle used
//! by two unordered streams at once gives the results of one stream (each call has its
//! own workspace), and dropping a handle inside a scope waits for no other work (the
//! handle goes back to an idle list instead of `cublasDestroy`, which would wait for
//! the whole device).
//!
//! Products are compared with the `f64` reference `gpu_tests::gemm_reference` within
//! the rounding bound of `test_gemm`, and with the same calls made on one stream, bit
//! for bit.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::{
    check_close, check_eq, device, ensure, gemm_reference, poisoned, signed, spin, Real, Rng,
    TestResult,
};
use kernels::Cublas;
use stream_core::scope;

gpu_tests::test_main! {
    gpu: [
        one_cublas_handle_on_two_streams_at_once_gives_the_results_of_one_stream,
        dropping_a_cublas_handle_inside_a_scope_waits_for_no_other_work,
    ],
}

/// One `Cublas` handle used by a scope and its fork's child at the same time, on two
/// unordered streams. Each call gets its own workspace (a handle's default one would be
/// shared by both streams), so both products are bit for bit the ones the same calls
/// give one after the other on one stream, and within the rounding bound of the `f64`
/// reference. The shapes are long in `k`, where cuBLAS splits the sum over blocks and
/// reduces the parts through its workspace.
fn one_cublas_handle_on_two_streams_at_once_gives_the_results_of_one_stream() -> TestResult {
    let dev = device()?;
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
    let dev = device()?;
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
