//! Matrix kernels of the `kernels` crate on a real GPU (`kernels/src/transpose.rs`,
//! `sgemm.rs`, `cublas.rs`): `kernels::transpose`, and SGEMM both from the tiled kernel
//! (`kernels::sgemm_tiled`) and from cuBLAS (`Cublas::sgemm`), with their refusal of
//! operands of the wrong size.
//!
//! Every test draws fresh non-zero random inputs, poisons its outputs before the GPU
//! runs, and compares with a CPU reference: bit-exact for transpose, and for SGEMM
//! within a stated rounding-error bound of the product computed in `f64` by
//! `gemm_reference` (which a host test checks against a plain triple loop). Bad input
//! is an `Err` of the right variant that leaves the outputs untouched.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::{
    check_close, check_eq, check_error, device, ensure, expect_err, poisoned, signed, spin, stream,
    Element, Failed, Real, Rng, TestResult,
};
use kernels::Cublas;
use stream_core::{scope, DeviceMemory, DeviceMemoryMut, Error, Scope};

gpu_tests::test_main! {
    gpu: [
        transpose_is_exact,
        sgemm_tiled_matches_the_reference_for_beta_zero_and_half,
        cublas_sgemm_matches_the_reference_for_beta_zero_and_half,
        sgemm_tiled_with_k_zero_scales_c_by_beta,
        sgemm_tiled_on_views_at_odd_offsets_matches_the_reference,
        sgemm_tiled_with_more_row_tiles_than_a_grid_holds_computes_every_row,
        cublas_sgemm_with_k_zero_scales_c_by_beta,
        one_cublas_handle_on_two_streams_at_once_gives_the_results_of_one_stream,
        dropping_a_cublas_handle_inside_a_scope_waits_for_no_other_work,
        transpose_with_wrong_sizes_is_shape_mismatch_and_writes_nothing,
        sgemm_with_wrong_sizes_is_shape_mismatch_naming_the_operand,
    ],
    host: [
        gemm_reference_matches_a_plain_triple_loop,
    ],
}

/// SGEMM shapes `(m, n, k)`: the first four are multiples of neither the tiled kernel's
/// 128x128 tile nor its 8-deep slice, nor of 4 in `n` and `k` (its scalar loads and
/// stores); the others have `n` and `k` multiples of 4 (its 16-byte loads and stores),
/// in whole tiles, in partial tiles, and with a partial last slice.
const GEMM_SHAPES: [(usize, usize, usize); 7] = [
    (1, 1, 1),
    (65, 33, 17),
    (129, 257, 63),
    (1000, 999, 513),
    (256, 384, 64),
    (300, 260, 100),
    (130, 140, 12),
];

// ---------------------------------------------------------------------------------------
// Transpose and SGEMM.

/// `transpose` moves every element to its mirrored place, bit for bit, for shapes that
/// are and are not multiples of its 32x32 tile, and for empty ones.
fn transpose_is_exact() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for (rows, cols) in [(1, 1), (31, 33), (1000, 17), (4096, 4096), (0, 5), (5, 0)] {
        let input: Vec<f32> = rng.vec(rows * cols);
        let mut expected = vec![0f32; rows * cols];
        for r in 0..rows {
            for c in 0..cols {
                expected[c * rows + r] = input[r * cols + c];
            }
        }
        let mut out = poisoned::<f32>(rows * cols);
        scope(&stream, |s| -> TestResult {
            let x = s.upload(&input)?;
            let mut t = s.alloc::<f32>(rows * cols)?;
            s.fill(&mut t, f32::POISON)?;
            kernels::transpose(s, &x, rows as u32, cols as u32, &mut t)?;
            let _download = s.copy_to_host(&t, &mut out)?;
            Ok(())
        })?;
        check_eq(&format!("transpose of {rows}x{cols}"), &expected, &out)?;
    }
    Ok(())
}

/// `A B` and `|A| |B|` (row-major, `m x k` times `k x n`) in `f64`, rows spread over
/// the host's cores.
fn gemm_reference((m, n, k): (usize, usize, usize), a: &[f32], b: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let mut ab = vec![0f64; m * n];
    let mut abs = vec![0f64; m * n];
    if m == 0 || n == 0 {
        return (ab, abs);
    }
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let rows_per_thread = m.div_ceil(threads);
    std::thread::scope(|t| {
        let chunks = ab
            .chunks_mut(rows_per_thread * n)
            .zip(abs.chunks_mut(rows_per_thread * n));
        for (chunk, (ab_rows, abs_rows)) in chunks.enumerate() {
            t.spawn(move || {
                let rows = ab_rows.chunks_mut(n).zip(abs_rows.chunks_mut(n));
                for (r, (ab_row, abs_row)) in rows.enumerate() {
                    let i = chunk * rows_per_thread + r;
                    for p in 0..k {
                        let aip = f64::from(a[i * k + p]);
                        let b_row = &b[p * n..(p + 1) * n];
                        for ((sum, sum_abs), &bpj) in
                            ab_row.iter_mut().zip(abs_row.iter_mut()).zip(b_row)
                        {
                            let product = aip * f64::from(bpj);
                            *sum += product;
                            *sum_abs += product.abs();
                        }
                    }
                }
            });
        }
    });
    (ab, abs)
}

/// `c = alpha a b + beta c` for `(m, n, k)` with `Cublas::sgemm` when a handle is given,
/// else with `kernels::sgemm_tiled`.
#[allow(clippy::too_many_arguments)] // the BLAS signature
fn gemm<'s>(
    blas: Option<&mut Cublas>,
    s: &'s Scope<'s, '_>,
    (m, n, k): (usize, usize, usize),
    alpha: f32,
    a: &impl DeviceMemory<'s, f32>,
    b: &impl DeviceMemory<'s, f32>,
    beta: f32,
    c: &mut impl DeviceMemoryMut<'s, f32>,
) -> stream_core::Result<()> {
    let (m, n, k) = (m as u32, n as u32, k as u32);
    match blas {
        None => kernels::sgemm_tiled(s, m, n, k, alpha, a, b, beta, c),
        Some(h) => h.sgemm(s, m, n, k, alpha, a, b, beta, c),
    }
}

/// Which SGEMM a test runs.
#[derive(Clone, Copy)]
enum Gemm {
    Tiled,
    Cublas,
}

/// Checks one SGEMM against the `f64` reference for every shape, with `beta = 0` and a
/// poisoned (NaN) `C`, which must not be read, and with `beta = 0.5` and a random `C`.
///
/// Bound per element: `|got - (alpha (A B)_ij + beta C_ij)| <= (k + 3) u (|alpha| (|A| |B|)_ij
/// + |beta C_ij|)`: any order of summing `k` products rounds each at most `k` times
/// (fused or not), plus the roundings of `alpha *`, `beta *` and the final `+`. With
/// `k = 513` that is about `3.1e-5` relative to `sum |a||b|`.
fn sgemm_matches_the_reference(which: Gemm) -> TestResult {
    let stream = stream()?;
    let mut blas = match which {
        Gemm::Cublas => Some(Cublas::new(&device()?)?),
        Gemm::Tiled => None,
    };
    let mut rng = Rng::new();
    for (m, n, k) in GEMM_SHAPES {
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
                gemm(blas.as_mut(), s, (m, n, k), alpha, &da, &db, beta, &mut dc)?;
                let _download = s.copy_to_host(&dc, &mut out)?;
                Ok(())
            })?;
            let name = match which {
                Gemm::Tiled => "kernels::sgemm_tiled",
                Gemm::Cublas => "Cublas::sgemm",
            };
            let (alpha, beta) = (f64::from(alpha), f64::from(beta));
            check_close(
                &format!("{name} {m}x{n}x{k}, alpha {alpha}, beta {beta}"),
                &out,
                |i| {
                    let bc = if beta == 0.0 {
                        0.0
                    } else {
                        beta * f64::from(c[i])
                    };
                    let bound = (k + 3) as f64 * f32::U * (alpha.abs() * abs[i] + bc.abs());
                    (alpha * ab[i] + bc, bound)
                },
            )?;
        }
    }
    Ok(())
}

fn sgemm_tiled_matches_the_reference_for_beta_zero_and_half() -> TestResult {
    sgemm_matches_the_reference(Gemm::Tiled)
}

fn cublas_sgemm_matches_the_reference_for_beta_zero_and_half() -> TestResult {
    sgemm_matches_the_reference(Gemm::Cublas)
}

/// With `k = 0`, `A B` is an empty sum: `C = beta C` exactly (BLAS semantics), zeros for
/// `beta = 0` even over a NaN `C`.
fn sgemm_with_k_zero_scales_c_by_beta(which: Gemm) -> TestResult {
    let stream = stream()?;
    let mut blas = match which {
        Gemm::Cublas => Some(Cublas::new(&device()?)?),
        Gemm::Tiled => None,
    };
    let mut rng = Rng::new();
    let (m, n) = (37, 65);
    for beta in [0.0f32, 0.5, 1.0] {
        let c: Vec<f32> = if beta == 0.0 {
            poisoned(m * n)
        } else {
            signed(&mut rng, m * n)
        };
        let expected: Vec<f32> = c
            .iter()
            .map(|&v| if beta == 0.0 { 0.0 } else { beta * v })
            .collect();
        let mut out = poisoned::<f32>(m * n);
        scope(&stream, |s| -> TestResult {
            let (da, db) = (s.alloc::<f32>(0)?, s.alloc::<f32>(0)?);
            let mut dc = s.upload(&c)?;
            gemm(blas.as_mut(), s, (m, n, 0), 1.5, &da, &db, beta, &mut dc)?;
            let _download = s.copy_to_host(&dc, &mut out)?;
            Ok(())
        })?;
        check_close(&format!("sgemm {m}x{n}x0 with beta {beta}"), &out, |i| {
            (f64::from(expected[i]), 0.0)
        })?;
    }
    Ok(())
}

/// The tiled kernel on views that start one to three elements into their buffers (rows
/// no longer 16-byte aligned although `n` and `k` are multiples of 4: it must fall back
/// to its scalar loads and stores), in whole tiles, against the `f64` reference with the
/// bound of [`sgemm_matches_the_reference`]. The elements around the view of `C` keep
/// their poison.
fn sgemm_tiled_on_views_at_odd_offsets_matches_the_reference() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let (m, n, k) = (256, 256, 64);
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
            let (va, vb) = (
                da.slice(offset_a..offset_a + m * k)?,
                db.slice(offset_b..offset_b + k * n)?,
            );
            let (mu, nu, ku) = (m as u32, n as u32, k as u32);
            {
                let mut vc = dc.slice_mut(offset_c..offset_c + m * n)?;
                kernels::sgemm_tiled(s, mu, nu, ku, alpha, &va, &vb, beta, &mut vc)?;
            }
            let _download = s.copy_to_host(&dc, &mut out)?;
            Ok(())
        })?;
        let context = format!(
            "sgemm_tiled {m}x{n}x{k} on views at offsets {offset_a}, {offset_b}, {offset_c}"
        );
        check_eq(
            &format!("{context}: the elements before and after C's view"),
            &[&pc[..offset_c], &pc[offset_c + m * n..]].concat(),
            &[&out[..offset_c], &out[offset_c + m * n..]].concat(),
        )?;
        let (alpha, beta) = (f64::from(alpha), f64::from(beta));
        check_close(&context, &out[offset_c..offset_c + m * n], |i| {
            let bc = beta * f64::from(c[i]);
            let bound = (k + 3) as f64 * f32::U * (alpha.abs() * abs[i] + bc.abs());
            (alpha * ab[i] + bc, bound)
        })?;
    }
    Ok(())
}

/// More rows than 65,535 blocks of 128 rows (the grid's limit in y): the launch shape
/// stays valid and each block computes several row tiles; every row is checked, the
/// last ones (beyond the first grid's reach) included.
fn sgemm_tiled_with_more_row_tiles_than_a_grid_holds_computes_every_row() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let (m, n, k) = (65_535 * 128 + 200, 2, 3);
    let a: Vec<f32> = signed(&mut rng, m * k);
    let b: Vec<f32> = signed(&mut rng, k * n);
    let c: Vec<f32> = signed(&mut rng, m * n);
    let (ab, abs) = gemm_reference((m, n, k), &a, &b);
    let (alpha, beta) = (1.5f32, 0.5f32);
    let config = kernels::sgemm_tiled_config(m as u32, n as u32);
    ensure!(
        config.grid.1 == 65_535,
        "the launch shape for {m} rows has {} blocks in y, expected the limit 65535",
        config.grid.1
    );
    let mut out = poisoned::<f32>(m * n);
    scope(&stream, |s| -> TestResult {
        let (da, db) = (s.upload(&a)?, s.upload(&b)?);
        let mut dc = s.upload(&c)?;
        gemm(None, s, (m, n, k), alpha, &da, &db, beta, &mut dc)?;
        let _download = s.copy_to_host(&dc, &mut out)?;
        Ok(())
    })?;
    let (alpha, beta) = (f64::from(alpha), f64::from(beta));
    check_close(&format!("sgemm_tiled {m}x{n}x{k}"), &out, |i| {
        let bc = beta * f64::from(c[i]);
        let bound = (k + 3) as f64 * f32::U * (alpha.abs() * abs[i] + bc.abs());
        (alpha * ab[i] + bc, bound)
    })
}

fn sgemm_tiled_with_k_zero_scales_c_by_beta() -> TestResult {
    sgemm_with_k_zero_scales_c_by_beta(Gemm::Tiled)
}

fn cublas_sgemm_with_k_zero_scales_c_by_beta() -> TestResult {
    sgemm_with_k_zero_scales_c_by_beta(Gemm::Cublas)
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

// ---------------------------------------------------------------------------------------
// Bad input.

/// `transpose` of a 3x4 matrix from 11 or 13 elements, or into 11 or 13, is
/// `ShapeMismatch` naming the operand; the output keeps its poison.
fn transpose_with_wrong_sizes_is_shape_mismatch_and_writes_nothing() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let (x11, x12, x13): (Vec<f32>, Vec<f32>, Vec<f32>) = (rng.vec(11), rng.vec(12), rng.vec(13));
    let mut out = poisoned::<f32>(12);
    scope(&stream, |s| -> TestResult {
        let (d11, d12, d13) = (s.upload(&x11)?, s.upload(&x12)?, s.upload(&x13)?);
        let mut o12 = s.alloc::<f32>(12)?;
        s.fill(&mut o12, f32::POISON)?;
        let mut o11 = s.alloc::<f32>(11)?;
        let mut o13 = s.alloc::<f32>(13)?;
        let input = "transpose: input (rows * cols)";
        let output = "transpose: output (rows * cols)";
        let cases = [
            (
                "input of 11",
                kernels::transpose(s, &d11, 3, 4, &mut o12),
                input,
                11,
            ),
            (
                "input of 13",
                kernels::transpose(s, &d13, 3, 4, &mut o12),
                input,
                13,
            ),
            (
                "output of 11",
                kernels::transpose(s, &d12, 3, 4, &mut o11),
                output,
                11,
            ),
            (
                "output of 13",
                kernels::transpose(s, &d12, 3, 4, &mut o13),
                output,
                13,
            ),
        ];
        for (what, result, operand, actual) in cases {
            let e = expect_err(what, result)?;
            let expected = Error::ShapeMismatch {
                what: operand,
                expected: 12,
                actual,
            };
            check_error(what, &e, &expected, &[operand, "12", &actual.to_string()])?;
        }
        let _out = s.copy_to_host(&o12, &mut out)?;
        Ok(())
    })?;
    check_eq(
        "transpose output after refused launches",
        &poisoned::<f32>(12),
        &out,
    )
}

/// `sgemm_tiled` and `Cublas::sgemm` with `a`, `b` or `c` one element short of
/// `m*k`, `k*n`, `m*n` (for `m, n, k = 4, 3, 2`) are `ShapeMismatch` naming that
/// operand; `c` is left as it was.
fn sgemm_with_wrong_sizes_is_shape_mismatch_naming_the_operand() -> TestResult {
    let stream = stream()?;
    let mut blas = Cublas::new(&device()?)?;
    let mut rng = Rng::new();
    let (a, b, c): (Vec<f32>, Vec<f32>, Vec<f32>) = (
        signed(&mut rng, 8),
        signed(&mut rng, 6),
        signed(&mut rng, 12),
    );
    let mut out = poisoned::<f32>(12);
    scope(&stream, |s| -> TestResult {
        let (da, db, mut dc) = (s.upload(&a)?, s.upload(&b)?, s.upload(&c)?);
        let (short_a, short_b) = (da.slice(..7)?, db.slice(..5)?);
        for name in ["sgemm_tiled", "cublas sgemm"] {
            let cublas = name == "cublas sgemm";
            let shape = (4, 3, 2);
            let results = [
                (
                    "a (m * k)",
                    gemm(
                        cublas.then_some(&mut blas),
                        s,
                        shape,
                        1.0,
                        &short_a,
                        &db,
                        0.5,
                        &mut dc,
                    ),
                    8,
                    7,
                ),
                (
                    "b (k * n)",
                    gemm(
                        cublas.then_some(&mut blas),
                        s,
                        shape,
                        1.0,
                        &da,
                        &short_b,
                        0.5,
                        &mut dc,
                    ),
                    6,
                    5,
                ),
                (
                    "c (m * n)",
                    gemm(
                        cublas.then_some(&mut blas),
                        s,
                        shape,
                        1.0,
                        &da,
                        &db,
                        0.5,
                        &mut dc.slice_mut(..11)?,
                    ),
                    12,
                    11,
                ),
            ];
            for (operand, result, expected, actual) in results {
                let what = format!("{name} with {operand} of {actual}");
                let e = expect_err(&what, result)?;
                let Error::ShapeMismatch {
                    what: label,
                    expected: e_expected,
                    actual: e_actual,
                } = &e
                else {
                    return Err(Failed::from(format!(
                        "{what}: got {e:?}, expected ShapeMismatch"
                    )));
                };
                ensure!(
                    label.starts_with(name) && label.ends_with(operand),
                    "{what}: the error names {label:?}, not {name}'s {operand}"
                );
                ensure!(
                    (*e_expected, *e_actual) == (expected, actual),
                    "{what}: got expected {e_expected}, actual {e_actual}; wanted {expected}, {actual}"
                );
                let message = e.to_string();
                ensure!(
                    message.contains(operand) && message.contains(&actual.to_string()),
                    "{what}: the message {message:?} does not name both the operand and its size"
                );
            }
        }
        let _out = s.copy_to_host(&dc, &mut out)?;
        Ok(())
    })?;
    check_eq("c after refused SGEMMs", &c, &out)
}

// ---------------------------------------------------------------------------------------
// Host test of this file's reference (it runs without a GPU).

/// The threaded `gemm_reference` equals a plain triple loop, including shapes with
/// fewer rows than threads and an empty `k`.
fn gemm_reference_matches_a_plain_triple_loop() -> TestResult {
    let mut rng = Rng::new();
    for (m, n, k) in [(1, 1, 1), (3, 5, 7), (65, 33, 17), (5, 7, 0), (0, 3, 2)] {
        let a: Vec<f32> = signed(&mut rng, m * k);
        let b: Vec<f32> = signed(&mut rng, k * n);
        let (ab, abs) = gemm_reference((m, n, k), &a, &b);
        ensure!(
            ab.len() == m * n && abs.len() == m * n,
            "{m}x{n}x{k}: wrong sizes"
        );
        for i in 0..m {
            for j in 0..n {
                let products = (0..k).map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]));
                let (sum, sum_abs) = products.fold((0.0, 0.0), |(s, t), x| (s + x, t + x.abs()));
                ensure!(
                    ab[i * n + j] == sum && abs[i * n + j] == sum_abs,
                    "{m}x{n}x{k} at ({i}, {j}): got ({}, {}), expected ({sum}, {sum_abs})",
                    ab[i * n + j],
                    abs[i * n + j]
                );
            }
        }
    }
    Ok(())
}
