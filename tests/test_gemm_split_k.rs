//! The tiled SGEMM's split-k path (`kernels::SplitK`) on a real GPU, beside
//! `test_gemm`'s checks against the `f64` reference (whose shapes include
//! `gpu_tests::SPLIT_SHAPES`): those shapes split on this device, and the ranges are
//! added in a fixed order, so the result is the same at every run and in graph replays.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::{
    check_eq, device, ensure, poisoned, signed, Element, Failed, Rng, TestResult, SPLIT_SHAPES,
};
use kernels::SplitK;
use stream_core::{scope, Error};

gpu_tests::test_main! {
    gpu: [
        split_shapes_split_on_this_device,
        split_k_gives_the_same_bits_at_every_run_and_in_a_graph,
    ],
    host: [],
}

/// `SPLIT_SHAPES` split k on this device, so `test_gemm`'s checks of them cannot pass
/// through the one-pass kernel alone.
fn split_shapes_split_on_this_device() -> TestResult {
    let multiprocessors = device()?.multiprocessor_count();
    for (m, n, k) in SPLIT_SHAPES {
        let split = SplitK::choose(m as u32, n as u32, k as u32, multiprocessors);
        ensure!(
            split.is_some(),
            "{m}x{n}x{k} does not split on a device of {multiprocessors} multiprocessors"
        );
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
    let (mu, nu, ku) = (m as u32, n as u32, k as u32);
    let a: Vec<f32> = signed(&mut rng, m * k);
    let b: Vec<f32> = signed(&mut rng, k * n);
    let run = || -> Result<Vec<f32>, Failed> {
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
    ensure!(
        first.iter().all(|v| v.is_finite()),
        "split-k: the result has non-finite elements"
    );
    check_eq("split-k: a second run", &first, &run()?)?;
    let (mut da, mut db) = (dev.upload_vec(&a)?, dev.upload_vec(&b)?);
    let held = (&mut da, &mut db, dev.alloc_pinned::<f32>(m * n)?);
    let (mut graph, ()) = dev.capture(held, |g, (da, db, mut host)| {
        let mut dc = g.alloc::<f32>(m * n)?;
        kernels::sgemm_tiled(g, mu, nu, ku, 1.0, &da, &db, 0.0, &mut dc)?;
        g.copy_to_host(&dc, &mut host)?;
        Ok::<_, Error>(())
    })?;
    for replay in 0..5 {
        graph.held_mut().2.fill(f32::POISON);
        scope(&stream, |s| s.replay(&mut graph).map(drop))?;
        let what = format!("split-k: replay {replay} of a graph");
        check_eq(&what, &first, graph.held().2)?;
    }
    Ok(())
}
