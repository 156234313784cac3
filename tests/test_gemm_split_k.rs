//! The tiled SGEMM's split-k path (`kernels::sgemm_tiled` on a C of few tiles with a
//! long k, `kernels::SplitK`) on a real GPU: against the `f64` reference, at odd
//! offsets and odd lengths (its scalar loads), the same bits at every run and in a
//! graph replay, and with `beta = 0` over a poisoned C (never read). Each shape is
//! checked to split on this device first, so the tests cannot pass through the one-pass
//! kernel. The one-pass kernel is `test_gemm`'s.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::{
    check_close, check_eq, device, ensure, gemm_reference, poisoned, signed, stream, Element, Real,
    Rng, TestResult,
};
use kernels::SplitK;
use stream_core::{scope, Error};

gpu_tests::test_main! {
    gpu: [
        split_k_matches_the_reference_for_beta_zero_and_half,
        split_k_on_views_at_odd_offsets_matches_the_reference,
        split_k_gives_the_same_bits_at_every_run_and_in_a_graph,
    ],
    host: [],
}

/// Shapes `(m, n, k)` that split on any device of 8 or more multiprocessors: a weight
/// gradient (16-byte loads), odd lengths with a last range shorter than the others (k not
/// a multiple of 8: scalar loads), one element of C over a long k (the most ranges).
const SPLIT_SHAPES: [(usize, usize, usize); 3] =
    [(256, 256, 1024), (130, 70, 1001), (1, 1, 20_000)];

/// The split of `(m, n, k)` on the test device: an `Err` when it would not split (the
/// test would then check the one-pass kernel, `test_gemm`'s job).
fn split_of((m, n, k): (usize, usize, usize)) -> Result<SplitK, gpu_tests::Failed> {
    let multiprocessors = device()?.multiprocessor_count();
    let split = SplitK::choose(m as u32, n as u32, k as u32, multiprocessors);
    split.ok_or_else(|| {
        gpu_tests::Failed::from(format!(
            "{m}x{n}x{k} does not split on a device of {multiprocessors} multiprocessors"
        ))
    })
}

/// The bound of `test_gemm`: any order of summing `k` products rounds each at most `k`
/// times, plus `alpha *`, `beta *` and the final `+`. The split's ranges are one more
/// grouping of the same sum.
fn bound(k: usize, alpha: f64, abs: f64, bc: f64) -> f64 {
    (k + 3) as f64 * f32::U * (alpha.abs() * abs + bc.abs())
}

fn split_k_matches_the_reference_for_beta_zero_and_half() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for (m, n, k) in SPLIT_SHAPES {
        let split = split_of((m, n, k))?;
        let a: Vec<f32> = signed(&mut rng, m * k);
        let b: Vec<f32> = signed(&mut rng, k * n);
        let (ab, abs) = gemm_reference((m, n, k), &a, &b);
        let alpha = signed::<f32>(&mut rng, 1)[0];
        for beta in [0.0f32, 0.5] {
            let c: Vec<f32> = if beta == 0.0 {
                poisoned(m * n)
            } else {
                signed(&mut rng, m * n)
            };
            let mut out = poisoned::<f32>(m * n);
            scope(&stream, |s| -> TestResult {
                let (da, db) = (s.upload(&a)?, s.upload(&b)?);
                let mut dc = s.upload(&c)?;
                let (mu, nu, ku) = (m as u32, n as u32, k as u32);
                kernels::sgemm_tiled(s, mu, nu, ku, alpha, &da, &db, beta, &mut dc)?;
                let _download = s.copy_to_host(&dc, &mut out)?;
                Ok(())
            })?;
            let (alpha, beta) = (f64::from(alpha), f64::from(beta));
            let what = format!("split-k ({split:?}) {m}x{n}x{k}, alpha {alpha}, beta {beta}");
            check_close(&what, &out, |i| {
                let bc = if beta == 0.0 {
                    0.0
                } else {
                    beta * f64::from(c[i])
                };
                (alpha * ab[i] + bc, bound(k, alpha, abs[i], bc))
            })?;
        }
    }
    Ok(())
}

/// Views that start one to three elements into their buffers: the rows are no longer
/// 16-byte aligned (the split kernel, its partial sums and the sum fall back to scalar
/// loads where they must); the elements around C's view keep their poison.
fn split_k_on_views_at_odd_offsets_matches_the_reference() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let (m, n, k) = SPLIT_SHAPES[0];
    split_of((m, n, k))?;
    let a: Vec<f32> = signed(&mut rng, m * k);
    let b: Vec<f32> = signed(&mut rng, k * n);
    let c: Vec<f32> = signed(&mut rng, m * n);
    let (ab, abs) = gemm_reference((m, n, k), &a, &b);
    let (alpha, beta) = (0.75f32, 0.5f32);
    for (offset_a, offset_b, offset_c) in [(1, 0, 0), (0, 2, 0), (0, 0, 3), (3, 1, 2)] {
        let padded = |v: &[f32], offset: usize| {
            let mut p = poisoned::<f32>(offset);
            p.extend_from_slice(v);
            p.push(f32::POISON);
            p
        };
        let (pa, pb, pc) = (
            padded(&a, offset_a),
            padded(&b, offset_b),
            padded(&c, offset_c),
        );
        let mut out = poisoned::<f32>(pc.len());
        scope(&stream, |s| -> TestResult {
            let (da, db) = (s.upload(&pa)?, s.upload(&pb)?);
            let mut dc = s.upload(&pc)?;
            let va = da.slice(offset_a..offset_a + m * k)?;
            let vb = db.slice(offset_b..offset_b + k * n)?;
            let (mu, nu, ku) = (m as u32, n as u32, k as u32);
            {
                let mut vc = dc.slice_mut(offset_c..offset_c + m * n)?;
                kernels::sgemm_tiled(s, mu, nu, ku, alpha, &va, &vb, beta, &mut vc)?;
            }
            let _download = s.copy_to_host(&dc, &mut out)?;
            Ok(())
        })?;
        let what = format!("split-k {m}x{n}x{k} at offsets {offset_a}, {offset_b}, {offset_c}");
        check_eq(
            &format!("{what}: the elements before and after C's view"),
            &[&pc[..offset_c], &pc[offset_c + m * n..]].concat(),
            &[&out[..offset_c], &out[offset_c + m * n..]].concat(),
        )?;
        let (alpha, beta) = (f64::from(alpha), f64::from(beta));
        check_close(&what, &out[offset_c..offset_c + m * n], |i| {
            let bc = beta * f64::from(c[i]);
            (alpha * ab[i] + bc, bound(k, alpha, abs[i], bc))
        })?;
    }
    Ok(())
}

/// The ranges are added in a fixed order: two runs in scopes and five replays of a graph
/// that recorded the same call (its partial sums are the graph's own memory) give the
/// same bits.
fn split_k_gives_the_same_bits_at_every_run_and_in_a_graph() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let mut rng = Rng::new();
    let (m, n, k) = SPLIT_SHAPES[1];
    split_of((m, n, k))?;
    let (mu, nu, ku) = (m as u32, n as u32, k as u32);
    let a: Vec<f32> = signed(&mut rng, m * k);
    let b: Vec<f32> = signed(&mut rng, k * n);
    let run = || -> Result<Vec<f32>, gpu_tests::Failed> {
        let mut out = poisoned::<f32>(m * n);
        scope(&stream, |s| -> TestResult {
            let (da, db) = (s.upload(&a)?, s.upload(&b)?);
            let mut dc = s.alloc::<f32>(m * n)?;
            kernels::sgemm_tiled(s, mu, nu, ku, 1.0, &da, &db, 0.0, &mut dc)?;
            let _download = s.copy_to_host(&dc, &mut out)?;
            Ok(())
        })?;
        Ok(out)
    };
    let first = run()?;
    check_eq("split-k: a second run", &first, &run()?)?;
    let (mut da, mut db) = (dev.upload_vec(&a)?, dev.upload_vec(&b)?);
    let result = dev.alloc_pinned::<f32>(m * n)?;
    let held = (&mut da, &mut db, result);
    let (mut graph, ()) = dev.capture(held, |g, (da, db, mut host)| {
        let mut dc = g.alloc::<f32>(m * n)?;
        kernels::sgemm_tiled(g, mu, nu, ku, 1.0, &da, &db, 0.0, &mut dc)?;
        g.copy_to_host(&dc, &mut host)?;
        Ok::<_, Error>(())
    })?;
    for replay in 0..5 {
        poison(graph.held_mut().2);
        scope(&stream, |s| s.replay(&mut graph).map(drop))?;
        check_eq(
            &format!("split-k: replay {replay} of a graph"),
            &first,
            graph.held().2,
        )?;
    }
    ensure!(
        first.iter().all(|v| v.is_finite()),
        "split-k: the result has non-finite elements"
    );
    Ok(())
}

fn poison(values: &mut [f32]) {
    values.fill(f32::POISON);
}
