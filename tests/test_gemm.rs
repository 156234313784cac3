//! SGEMM of the `kernels` crate on a real GPU (`kernels/src/sgemm.rs`, `cublas.rs`),
//! both from the tiled kernel (`kernels::sgemm_tiled_op`, in one pass or with k split
//! among blocks) and from cuBLAS (`Cublas::sgemm_op`), for every pair of `kernels::Op`s
//! (operands stored transposed), with their refusal of operands of the wrong size; and cuBLAS's
//! half-precision GEMM (`Cublas::gemm_op`, `f16` and `bf16` with `f32` accumulation). How
//! `Cublas` handles share streams is in `test_cublas`; the transpose kernel in
//! `test_transpose`.
//!
//! Every test draws fresh non-zero random inputs, poisons its outputs before the GPU
//! runs, and compares with a CPU reference: within a stated rounding-error bound of the
//! product computed in `f64` by `gpu_tests::gemm_reference` (which a host test of this
//! file checks against a plain triple loop). Bad input is an `Err` of the right variant
//! that leaves the outputs untouched.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::{
    check_close, check_eq, device, ensure, expect_err, gemm_reference, poisoned, signed, stream,
    transposed, Element, Failed, Real, Rng, TestResult, SPLIT_SHAPES,
};
use kernels::{Cublas, HalfGemm, Op};
use stream_core::{scope, DeviceMemory, DeviceMemoryMut, Error, Scope};

gpu_tests::test_main! {
    gpu: [
        sgemm_tiled_matches_the_reference_for_beta_zero_and_half,
        cublas_sgemm_matches_the_reference_for_beta_zero_and_half,
        sgemm_tiled_with_k_zero_scales_c_by_beta,
        sgemm_tiled_on_views_at_odd_offsets_matches_the_reference,
        sgemm_tiled_with_more_row_tiles_than_a_grid_holds_computes_every_row,
        cublas_sgemm_with_k_zero_scales_c_by_beta,
        sgemm_with_wrong_sizes_is_shape_mismatch_naming_the_operand,
        cublas_gemm_f16_matches_the_f32_reference = cublas_half_gemm_matches_the_f32_reference::<half::f16>,
        cublas_gemm_bf16_matches_the_f32_reference = cublas_half_gemm_matches_the_f32_reference::<half::bf16>,
    ],
    host: [
        gemm_reference_matches_a_plain_triple_loop,
        stored_transposes_what_the_reference_uses,
    ],
}

/// SGEMM shapes `(m, n, k)`: the first four are multiples of neither the tiled kernel's
/// 128x128 tile nor its 8-deep slice, nor of 4 in `n` and `k` (its scalar loads and
/// stores); the next three have `n` and `k` multiples of 4 (its 16-byte loads and
/// stores), in whole tiles, in partial tiles, and with a partial last slice. The tiled
/// kernel splits k for `SPLIT_SHAPES` (see `test_gemm_split_k`) and, on 128 or more
/// multiprocessors, for 1000x999x513.
const GEMM_SHAPES: [(usize, usize, usize); 10] = [
    (1, 1, 1),
    (65, 33, 17),
    (129, 257, 63),
    (1000, 999, 513),
    (256, 384, 64),
    (300, 260, 100),
    (130, 140, 12),
    SPLIT_SHAPES[0],
    SPLIT_SHAPES[1],
    SPLIT_SHAPES[2],
];

/// Both operands as stored.
const NN: (Op, Op) = (Op::N, Op::N);

/// Every pair of operand forms.
const OPS: [(Op, Op); 4] = [
    (Op::N, Op::N),
    (Op::T, Op::N),
    (Op::N, Op::T),
    (Op::T, Op::T),
];

/// `x`, a row-major `rows x cols` matrix, stored as `op` reads it: as it is, or
/// transposed (`cols x rows`).
fn stored<T: Copy>(x: &[T], rows: usize, cols: usize, op: Op) -> Vec<T> {
    match op {
        Op::N => x.to_vec(),
        Op::T => transposed(x, rows, cols),
    }
}

// ---------------------------------------------------------------------------------------
// SGEMM.

/// `c = alpha op_a(a) op_b(b) + beta c` for `(m, n, k)` with `Cublas::sgemm_op` when a
/// handle is given, else with `kernels::sgemm_tiled_op`.
#[allow(clippy::too_many_arguments)] // the BLAS signature
fn gemm<'s>(
    blas: Option<&mut Cublas>,
    s: &'s Scope<'s, '_>,
    (m, n, k): (usize, usize, usize),
    (op_a, op_b): (Op, Op),
    alpha: f32,
    a: &impl DeviceMemory<'s, f32>,
    b: &impl DeviceMemory<'s, f32>,
    beta: f32,
    c: &mut impl DeviceMemoryMut<'s, f32>,
) -> stream_core::Result<()> {
    let (m, n, k) = (m as u32, n as u32, k as u32);
    match blas {
        None => kernels::sgemm_tiled_op(s, op_a, op_b, m, n, k, alpha, a, b, beta, c),
        Some(h) => h.sgemm_op(s, op_a, op_b, m, n, k, alpha, a, b, beta, c),
    }
}

/// Which SGEMM a test runs.
#[derive(Clone, Copy)]
enum Gemm {
    Tiled,
    Cublas,
}

/// Checks one SGEMM against the `f64` reference for every shape and every pair of
/// [`OPS`] (the operands stored as the op reads them, the reference computed on the
/// matrices as used), with `beta = 0` and a poisoned (NaN) `C`, which must not be read,
/// and with `beta = 0.5` and a random `C`.
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
        for ((op_a, op_b), beta) in OPS.into_iter().flat_map(|o| [(o, 0.0f32), (o, 0.5)]) {
            let (sa, sb) = (stored(&a, m, k, op_a), stored(&b, k, n, op_b));
            let c: Vec<f32> = if beta == 0.0 {
                poisoned(m * n)
            } else {
                signed(&mut rng, m * n)
            };
            let mut out = poisoned::<f32>(m * n);
            scope(&stream, |s| -> TestResult {
                let (da, db) = (s.upload(&sa)?, s.upload(&sb)?);
                let mut dc = s.upload(&c)?;
                let ops = (op_a, op_b);
                gemm(
                    blas.as_mut(),
                    s,
                    (m, n, k),
                    ops,
                    alpha,
                    &da,
                    &db,
                    beta,
                    &mut dc,
                )?;
                let _download = s.copy_to_host(&dc, &mut out)?;
                Ok(())
            })?;
            let name = match which {
                Gemm::Tiled => "kernels::sgemm_tiled_op",
                Gemm::Cublas => "Cublas::sgemm_op",
            };
            let (alpha, beta) = (f64::from(alpha), f64::from(beta));
            check_close(
                &format!("{name}({op_a:?}, {op_b:?}) {m}x{n}x{k}, alpha {alpha}, beta {beta}"),
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

/// `Cublas::gemm_op` on `f16` or `bf16` matrices, for every pair of [`OPS`], accumulated
/// in `f32`, against the `f64` product of the same (exactly converted) values. Stated tolerance: `4 (k + 3) u32
/// (|alpha| |A||B| + |beta c|)` for the accumulation, plus the one rounding of the
/// result to `T`, `u_T |alpha AB + beta c|`. Four units per step, not one: tensor cores
/// add the products of one block FMA after aligning them to the largest and truncating
/// (Fasi, Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor cores",
/// 2021). cuBLAS's default split-K reduction in the output's type (`bf16` at
/// 1000x999x513 was off by up to 7 of its units on an H200) is what `Cublas` turns off.
fn cublas_half_gemm_matches_the_f32_reference<T: Real + HalfGemm>() -> TestResult {
    let stream = stream()?;
    let mut blas = Cublas::new(&device()?)?;
    let mut rng = Rng::new();
    let wide = |v: &[T]| v.iter().map(|x| x.to_f64() as f32).collect::<Vec<f32>>();
    for (m, n, k) in GEMM_SHAPES {
        let a: Vec<T> = signed(&mut rng, m * k);
        let b: Vec<T> = signed(&mut rng, k * n);
        let (ab, abs) = gemm_reference((m, n, k), &wide(&a), &wide(&b));
        let alpha = signed::<f32>(&mut rng, 1)[0];
        for ((op_a, op_b), beta) in OPS.into_iter().flat_map(|o| [(o, 0.0f32), (o, 0.5)]) {
            let (sa, sb) = (stored(&a, m, k, op_a), stored(&b, k, n, op_b));
            let c: Vec<T> = if beta == 0.0 {
                poisoned(m * n)
            } else {
                signed(&mut rng, m * n)
            };
            let mut out = poisoned::<T>(m * n);
            scope(&stream, |s| -> TestResult {
                let (da, db) = (s.upload(&sa)?, s.upload(&sb)?);
                let mut dc = s.upload(&c)?;
                let (mu, nu, ku) = (m as u32, n as u32, k as u32);
                blas.gemm_op(s, op_a, op_b, mu, nu, ku, alpha, &da, &db, beta, &mut dc)?;
                let _download = s.copy_to_host(&dc, &mut out)?;
                Ok(())
            })?;
            let (alpha, beta) = (f64::from(alpha), f64::from(beta));
            check_close(
                &format!(
                    "Cublas::gemm_op::<{}>({op_a:?}, {op_b:?}) {m}x{n}x{k}, alpha {alpha}, beta {beta}",
                    T::NAME
                ),
                &out,
                |i| {
                    let bc = if beta == 0.0 {
                        0.0
                    } else {
                        beta * c[i].to_f64()
                    };
                    let exact = alpha * ab[i] + bc;
                    let accumulated =
                        4.0 * (k + 3) as f64 * f32::U * (alpha.abs() * abs[i] + bc.abs());
                    (exact, accumulated + T::U * exact.abs())
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
            gemm(
                blas.as_mut(),
                s,
                (m, n, 0),
                NN,
                1.5,
                &da,
                &db,
                beta,
                &mut dc,
            )?;
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
/// bound of [`sgemm_matches_the_reference`], in one pass and split (the split kernel, its
/// partial sums and the sum fall back where they must). The elements around the view of
/// `C` keep their poison.
fn sgemm_tiled_on_views_at_odd_offsets_matches_the_reference() -> TestResult {
    for shape in [(256, 256, 64), SPLIT_SHAPES[0]] {
        sgemm_tiled_on_views_at_odd_offsets(shape)?;
    }
    Ok(())
}

fn sgemm_tiled_on_views_at_odd_offsets((m, n, k): (usize, usize, usize)) -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
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
        gemm(None, s, (m, n, k), NN, alpha, &da, &db, beta, &mut dc)?;
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

// ---------------------------------------------------------------------------------------
// Bad input.

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
                        NN,
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
                        NN,
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
                        NN,
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
                let Error::ShapeMismatch(mismatch) = &e else {
                    return Err(Failed::from(format!(
                        "{what}: got {e:?}, expected ShapeMismatch"
                    )));
                };
                let stream_core::error::ShapeMismatch {
                    what: label,
                    expected: e_expected,
                    actual: e_actual,
                } = &**mismatch;
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
// Host test of the reference (it runs without a GPU).

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

/// `stored` lays a matrix out as an op reads it.
fn stored_transposes_what_the_reference_uses() -> TestResult {
    let x = [1, 2, 3, 4, 5, 6]; // 2 x 3
    check_eq("as stored", &x, &stored(&x, 2, 3, Op::N))?;
    check_eq("transposed", &[1, 4, 2, 5, 3, 6], &stored(&x, 2, 3, Op::T))
}
