//! Part of case 7: the tiled SGEMM on the shapes of a weight gradient (a C of few tiles,
//! a long k), where `kernels::sgemm_tiled` splits k among blocks (`kernels::SplitK`):
//! GPU time of one call between two events, ours against the raw one-pass launch of the
//! same kernel (what the split replaces), and as a figure against cuBLAS. Each result is
//! checked against an `f64` CPU product.

use kernels::{Op, SplitK};

use super::baselines::Raw;
use super::{f32_bound, operand_lens, Ours};
use crate::env::Env;
use crate::error::{Error, Result};
use crate::measurement::Measurement;
use crate::report::{Better, Report, Row};

/// `(m, n, k)`: the two-layer `data_parallel` example's weight gradients (256 -> 256 ->
/// 128 over a batch of 1024 rows), with operands as stored, then the first with A read
/// transposed (the gradient `x^T dy` as the example computes it), then the example's
/// data gradient `dy w2^T`, B read transposed.
const SHAPES: [(Shape, (Op, Op)); 4] = [
    ((256, 256, 1024), (Op::N, Op::N)),
    ((256, 128, 1024), (Op::N, Op::N)),
    ((256, 256, 1024), (Op::T, Op::N)),
    ((1024, 256, 128), (Op::N, Op::T)),
];

/// `(m, n, k)` of a GEMM.
type Shape = (u32, u32, u32);

/// Measures [`SHAPES`]; `size` is the square case's (its buffers hold `size * size`).
pub(super) fn run(
    env: &Env,
    rep: &mut Report,
    ours: &mut Ours<'_>,
    raw: &mut Raw,
    size: usize,
) -> Result<()> {
    let multiprocessors = env.dev.multiprocessor_count();
    for ((m, n, k), ops) in SHAPES {
        let biggest = operand_lens((m, n, k)).into_iter().max();
        if biggest > Some(size * size) {
            return Err(Error::msg(format!(
                "split-k {m}x{n}x{k}: the square case's buffers hold {} elements",
                size * size
            )));
        }
        let split = match SplitK::choose(m, n, k, multiprocessors) {
            Some(s) => format!("k in {} ranges of {}", s.splits, s.chunk),
            None => "not split on this device".to_owned(),
        };
        let transposed = ops != (Op::N, Op::N);
        let what = match ops {
            (Op::T, Op::N) => format!("{m}x{n}x{k}, A transposed"),
            (Op::N, Op::T) => format!("{m}x{n}x{k}, B transposed"),
            _ => format!("{m}x{n}x{k}"),
        };
        // The raw one-pass launch is of the kernel for operands as stored: a baseline
        // only for those.
        let mut row = Measurement::new().ours("ours", || ours.gemm((m, n, k), ops, false));
        let name = if transposed {
            format!("tiled SGEMM {what}, {split}")
        } else {
            row = row.raw("raw one-pass launch", || raw.one_pass((m, n, k)));
            format!("tiled SGEMM {what}, {split} (raw: the kernel in one pass)")
        };
        let row = row
            .into_row(
                env.cfg.plan(5, 51),
                Row::new("sgemm", name, "us", Better::Lower),
            )?
            .in_unit(|t| t * 1e6);
        let tiled = row.ours.as_ref().map(|r| r.median());
        rep.push(row);
        ours.check((m, n, k), ops, false)?;
        if ours.blas.is_some() {
            let cublas = Measurement::new()
                .ours("cuBLAS", || ours.gemm((m, n, k), ops, true))
                .rounds(env.cfg.plan(5, 51))?;
            let cublas = cublas.first().map_or(f64::NAN, |r| r.median());
            ours.check((m, n, k), ops, true)?;
            if let Some(tiled) = tiled {
                let name = format!("split-k {what}: tiled / cuBLAS time");
                rep.figure("sgemm", name, tiled / (cublas * 1e6), "x");
            }
        }
    }
    Ok(())
}

impl Ours<'_> {
    /// The last [`gemm`](Self::gemm) on `(m, n, k)` with `ops` against the `f64` product
    /// of the operands as read.
    fn check(&self, (m, n, k): Shape, ops: (Op, Op), use_blas: bool) -> Result<()> {
        let (m, n, k) = (m as usize, n as usize, k as usize);
        let a = self.a.to_host_vec()?;
        let b = self.b.to_host_vec()?;
        let c = if use_blas {
            &self.c_blas
        } else {
            &self.c_tiled
        }
        .to_host_vec()?;
        let who = if use_blas { "cuBLAS" } else { "tiled" };
        // op(A)[i][p] and op(B)[p][j] in the stored (leading) parts of the buffers.
        let a_at = |i: usize, p: usize| match ops.0 {
            Op::N => a[i * k + p],
            Op::T => a[p * m + i],
        };
        let b_at = |p: usize, j: usize| match ops.1 {
            Op::N => b[p * n + j],
            Op::T => b[j * k + p],
        };
        for i in 0..m {
            for j in 0..n {
                let (mut exact, mut magnitude) = (0f64, 0f64);
                for p in 0..k {
                    let term = f64::from(a_at(i, p)) * f64::from(b_at(p, j));
                    exact += term;
                    magnitude += term.abs();
                }
                let got = f64::from(c[i * n + j]);
                if (got - exact).abs() > f32_bound(magnitude) {
                    return Err(Error::msg(format!(
                        "split-k {who} {m}x{n}x{k} {ops:?}: C[{i}][{j}] is {got}, the CPU computes {exact}"
                    )));
                }
            }
        }
        Ok(())
    }
}
