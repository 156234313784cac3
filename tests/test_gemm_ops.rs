//! GEMMs with operands stored transposed (`kernels::Op`): `kernels::sgemm_tiled_op`,
//! `Cublas::sgemm_op` and `Cublas::gemm_op` on a real GPU, for every pair of `Op`s,
//! against the `f64` product of the operands as used. Shapes: one the tiled kernel
//! computes in one pass, one it splits k for (a weight gradient: `x^T dy`), and odd
//! lengths (scalar loads). `beta = 0` over a poisoned C (never read), and `beta = 0.5`.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::{
    check_close, device, gemm_reference, poisoned, signed, stream, Real, Rng, TestResult,
};
use kernels::{Cublas, HalfGemm, Op};
use stream_core::scope;

gpu_tests::test_main! {
    gpu: [
        sgemm_tiled_op_matches_the_reference_for_every_op,
        cublas_sgemm_op_matches_the_reference_for_every_op,
        cublas_gemm_op_bf16_matches_the_f32_reference = cublas_gemm_op_matches_the_f32_reference::<half::bf16>,
    ],
    host: [
        stored_transposes_what_the_reference_uses,
    ],
}

/// `(m, n, k)`: one pass (256 tiles); split k on any device of 8 or more multiprocessors
/// (the first layer's weight gradient of `data_parallel`); odd lengths, a partial slice.
const SHAPES: [(usize, usize, usize); 3] = [(2048, 2048, 40), (256, 256, 1024), (130, 70, 1001)];

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
        Op::T => (0..cols)
            .flat_map(|c| (0..rows).map(move |r| x[r * cols + c]))
            .collect(),
    }
}

fn stored_transposes_what_the_reference_uses() -> TestResult {
    let x = [1, 2, 3, 4, 5, 6]; // 2 x 3
    gpu_tests::check_eq("as stored", &x, &stored(&x, 2, 3, Op::N))?;
    gpu_tests::check_eq("transposed", &[1, 4, 2, 5, 3, 6], &stored(&x, 2, 3, Op::T))
}

/// Which f32 GEMM a test runs.
#[derive(Clone, Copy, PartialEq)]
enum Which {
    Tiled,
    Cublas,
}

/// Every `Op` pair and shape with `which`: `c = alpha op_a(a) op_b(b) + beta c`, the
/// operands stored as `op` says, against the `f64` product of the matrices as used,
/// within `test_gemm`'s bound (`(k + 3) u` of `|alpha| |A||B| + |beta c|`).
fn sgemm_op_matches_the_reference(which: Which) -> TestResult {
    let stream = stream()?;
    let mut blas = match which {
        Which::Cublas => Some(Cublas::new(&device()?)?),
        Which::Tiled => None,
    };
    let mut rng = Rng::new();
    for (m, n, k) in SHAPES {
        let a: Vec<f32> = signed(&mut rng, m * k); // op_a(a), m x k
        let b: Vec<f32> = signed(&mut rng, k * n); // op_b(b), k x n
        let (ab, abs) = gemm_reference((m, n, k), &a, &b);
        for (op_a, op_b) in OPS {
            let (sa, sb) = (stored(&a, m, k, op_a), stored(&b, k, n, op_b));
            let alpha = signed::<f32>(&mut rng, 1)[0];
            for beta in [0.0f32, 0.5] {
                let c: Vec<f32> = if beta == 0.0 {
                    poisoned(m * n)
                } else {
                    signed(&mut rng, m * n)
                };
                let mut out = poisoned::<f32>(m * n);
                scope(&stream, |s| -> TestResult {
                    let (da, db) = (s.upload(&sa)?, s.upload(&sb)?);
                    let mut dc = s.upload(&c)?;
                    let (mu, nu, ku) = (m as u32, n as u32, k as u32);
                    match blas.as_mut() {
                        None => kernels::sgemm_tiled_op(
                            s, op_a, op_b, mu, nu, ku, alpha, &da, &db, beta, &mut dc,
                        )?,
                        Some(h) => {
                            h.sgemm_op(s, op_a, op_b, mu, nu, ku, alpha, &da, &db, beta, &mut dc)?
                        }
                    }
                    let _download = s.copy_to_host(&dc, &mut out)?;
                    Ok(())
                })?;
                let name = match which {
                    Which::Tiled => "sgemm_tiled_op",
                    Which::Cublas => "Cublas::sgemm_op",
                };
                let (alpha, beta) = (f64::from(alpha), f64::from(beta));
                let what = format!("{name}({op_a:?}, {op_b:?}) {m}x{n}x{k}, beta {beta}");
                check_close(&what, &out, |i| {
                    let bc = if beta == 0.0 {
                        0.0
                    } else {
                        beta * f64::from(c[i])
                    };
                    let bound = (k + 3) as f64 * f32::U * (alpha.abs() * abs[i] + bc.abs());
                    (alpha * ab[i] + bc, bound)
                })?;
            }
        }
    }
    Ok(())
}

fn sgemm_tiled_op_matches_the_reference_for_every_op() -> TestResult {
    sgemm_op_matches_the_reference(Which::Tiled)
}

fn cublas_sgemm_op_matches_the_reference_for_every_op() -> TestResult {
    sgemm_op_matches_the_reference(Which::Cublas)
}

/// `Cublas::gemm_op` on half-precision operands, for every `Op` pair, on the split
/// shape and the odd one, with `test_gemm`'s tensor-core bound (`4 (k + 3) u32` of the
/// magnitudes, plus the result's rounding to `T`).
fn cublas_gemm_op_matches_the_f32_reference<T: Real + HalfGemm>() -> TestResult {
    let stream = stream()?;
    let mut blas = Cublas::new(&device()?)?;
    let mut rng = Rng::new();
    let wide = |v: &[T]| v.iter().map(|x| x.to_f64() as f32).collect::<Vec<f32>>();
    for (m, n, k) in &SHAPES[1..] {
        let (m, n, k) = (*m, *n, *k);
        let a: Vec<T> = signed(&mut rng, m * k);
        let b: Vec<T> = signed(&mut rng, k * n);
        let (ab, abs) = gemm_reference((m, n, k), &wide(&a), &wide(&b));
        for (op_a, op_b) in OPS {
            let (sa, sb) = (stored(&a, m, k, op_a), stored(&b, k, n, op_b));
            let c: Vec<T> = signed(&mut rng, m * n);
            let (alpha, beta) = (0.75f32, 0.5f32);
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
            let what = format!(
                "Cublas::gemm_op::<{}>({op_a:?}, {op_b:?}) {m}x{n}x{k}",
                T::NAME
            );
            check_close(&what, &out, |i| {
                let bc = beta * c[i].to_f64();
                let exact = alpha * ab[i] + bc;
                let accumulated = 4.0 * (k + 3) as f64 * f32::U * (alpha.abs() * abs[i] + bc.abs());
                (exact, accumulated + T::U * exact.abs())
            })?;
        }
    }
    Ok(())
}
