//! Part of case 7: the tiled SGEMM on the shapes of a weight gradient (a C of few tiles,
//! a long k), where `kernels::sgemm_tiled` splits k among blocks (`kernels::SplitK`):
//! GPU time of one call between two events, ours against the raw one-pass launch of the
//! same kernel (what the split replaces), and as a figure against cuBLAS. Each result is
//! checked against an `f64` CPU product.

use kernels::SplitK;

use super::baselines::Raw;
use super::Ours;
use crate::env::Env;
use crate::error::{Error, Result};
use crate::measurement::Measurement;
use crate::report::{Better, Report, Row};

/// `(m, n, k)`: the two-layer `data_parallel` example's weight gradients (256 -> 256 ->
/// 128 over a batch of 1024 rows).
const SHAPES: [(u32, u32, u32); 2] = [(256, 256, 1024), (256, 128, 1024)];

/// Measures [`SHAPES`]; `size` is the square case's (its buffers hold `size * size`).
pub(super) fn run(
    env: &Env,
    rep: &mut Report,
    ours: &mut Ours<'_>,
    raw: &mut Raw,
    size: usize,
) -> Result<()> {
    let multiprocessors = env.dev.multiprocessor_count();
    for (m, n, k) in SHAPES {
        let biggest = [m * k, k * n, m * n].map(|e| e as usize).into_iter().max();
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
        let row = Measurement::new()
            .ours("ours", || ours.gemm((m, n, k), false))
            .raw("raw one-pass launch", || raw.one_pass((m, n, k)))
            .into_row(
                env.cfg.plan(5, 51),
                Row::new(
                    "sgemm",
                    format!("tiled SGEMM {m}x{n}x{k}, {split} (raw: the kernel in one pass)"),
                    "us",
                    Better::Lower,
                ),
            )?
            .in_unit(|t| t * 1e6);
        let tiled = row.ours.as_ref().map(|r| r.median());
        rep.push(row);
        ours.check((m, n, k), false)?;
        if ours.blas.is_some() {
            let cublas = Measurement::new()
                .ours("cuBLAS", || ours.gemm((m, n, k), true))
                .rounds(env.cfg.plan(5, 51))?;
            let cublas = cublas.first().map_or(f64::NAN, |r| r.median());
            ours.check((m, n, k), true)?;
            if let Some(tiled) = tiled {
                let name = format!("split-k {m}x{n}x{k}: tiled / cuBLAS time");
                rep.figure("sgemm", name, tiled / (cublas * 1e6), "x");
            }
        }
    }
    Ok(())
}

impl Ours<'_> {
    /// The last [`gemm`](Self::gemm) on `(m, n, k)` against the `f64` product.
    fn check(&self, (m, n, k): (u32, u32, u32), use_blas: bool) -> Result<()> {
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
        for i in 0..m {
            for j in 0..n {
                let (mut exact, mut magnitude) = (0f64, 0f64);
                for p in 0..k {
                    let term = f64::from(a[i * k + p]) * f64::from(b[p * n + j]);
                    exact += term;
                    magnitude += term.abs();
                }
                let got = f64::from(c[i * n + j]);
                if (got - exact).abs() > 1e-3 * magnitude + 1e-6 {
                    return Err(Error::msg(format!(
                        "split-k {who} {m}x{n}x{k}: C[{i}][{j}] is {got}, the CPU computes {exact}"
                    )));
                }
            }
        }
        Ok(())
    }
}
