//! Case 7: SGEMM at 4096^3 (row-major `C = A B`), GPU time of one call between two
//! events, as GFLOP/s: the `kernels` crate's tiled kernel and cuBLAS, each through this
//! library (`kernels::sgemm_tiled`, `kernels::Cublas`), raw calls (`cuLaunchKernel` of
//! the same CUBIN, `cublasSgemm` on a raw stream) and cudarc's safe API
//! (`launch_builder`, `CudaBlas` + `Gemm`). Results are checked against each other and
//! against an f64 CPU reference at sampled entries. Then the weight-gradient shapes on
//! which the tiled kernel splits k ([`split_k`]), and the host cost of enqueuing small
//! cuBLAS GEMMs ([`enqueue`]).
#![allow(unsafe_code)]

mod baselines;
mod enqueue;
mod split_k;
mod square;

pub(crate) use square::RawBlas;

use cudarc::cublas::sys as blas_sys;
use kernels::{Op, SplitK};
use stream_core::{scope, DeviceVec, Stream};

use crate::cuda::{self, SGEMM_SOURCE};
use crate::env::Env;
use crate::error::{Context, Error, Result};
use crate::measurement::Measurement;
use crate::report::{Better, Report, Row, Source};
use crate::sampling::Rounds;

use baselines::{Cudarc, Raw};

/// Runs case 7.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    // Quick: 2048, not 1024, whose 64 tiles `sgemm_tiled` splits on a device of 128 or
    // more multiprocessors (`split_k.rs` measures that), which the raw and cudarc rows
    // would not do.
    let size = env.cfg.pick(4096usize, 2048);
    let (warmup, reps) = env.cfg.pick((2, 10), (1, 3));
    // SAFETY: only `dlopen`s the library by its well-known names, so that a missing
    // cuBLAS is reported rather than a panic of cudarc's lazy loader.
    let have_cublas = unsafe { blas_sys::is_culib_present() };
    let a = pseudo_random(size * size, 1);
    let b = pseudo_random(size * size, 2);
    let cubin = cuda::compile_cubin(SGEMM_SOURCE, env.dev.compute_capability())
        .context("compiling the tiled SGEMM for the raw and cudarc baselines")?;

    let mut ours = Ours::new(env, &a, &b, have_cublas)?;
    let mut raw = Raw::new(env, &cubin, &a, &b, have_cublas)?;
    let mut cu1 = Cudarc::new(env.cu1.clone(), &cubin, &a, &b, have_cublas)?;
    let mut cu2 = Cudarc::new(env.cu2[0].clone(), &cubin, &a, &b, have_cublas)?;
    let flops = 2.0 * (size as f64).powi(3);
    let sms = env.dev.multiprocessor_count();
    let one_pass = SplitK::choose(size as u32, size as u32, size as u32, sms).is_none();
    if !one_pass {
        rep.note(format!(
            "sgemm: on this device of {sms} multiprocessors ours splits k at {size}^3, the raw \
             and cudarc rows launch the kernel in one pass (their results are not compared bit \
             for bit)"
        ));
    }

    let kinds: &[bool] = if have_cublas {
        &[false, true]
    } else {
        &[false]
    };
    let mut medians = Vec::new();
    for &use_blas in kinds {
        let what = if use_blas { "cuBLAS" } else { "tiled" };
        let row = Measurement::new()
            .ours("ours", || ours.sgemm(size, use_blas))
            .raw("raw", || raw.sgemm(size, use_blas))
            .cudarc1("cudarc, default stream", || cu1.sgemm(size, use_blas))
            .cudarc2("cudarc, own stream", || cu2.sgemm(size, use_blas))
            .into_row(
                env.cfg.plan(warmup, reps),
                Row::new(
                    "sgemm",
                    format!("{what} SGEMM {size}^3"),
                    "GFLOP/s",
                    Better::Higher,
                ),
            )?
            .in_unit(|t| flops / t / 1e9);
        medians.extend(row.ours.as_ref().map(Rounds::median));
        rep.push(row.check_vs_raw(0.98, Source::Goal));

        let results = [
            ("ours", ours.result(use_blas)?),
            ("raw", raw.result(use_blas)?),
            ("cudarc, default stream", cu1.result(use_blas)?),
            ("cudarc, own stream", cu2.result(use_blas)?),
        ];
        for (who, c) in &results {
            check_against_cpu(&format!("{who} {what}"), c, &a, &b, size)?;
        }
        if !use_blas && one_pass {
            for (who, c) in &results[1..] {
                if c != &results[0].1 {
                    return Err(Error::msg(format!(
                        "{who}: the tiled SGEMM's result differs from ours (same kernel, same inputs)"
                    )));
                }
            }
        }
    }
    split_k::run(env, rep, &mut ours, &mut raw, size)?;
    if let [tiled, blas] = medians[..] {
        rep.figure("sgemm", "ours: tiled / cuBLAS", 100.0 * tiled / blas, "%");
        enqueue::run(env, rep)?;
    } else {
        rep.note(
            "sgemm: cuBLAS (libcublas) could not be loaded; only the tiled kernel was measured",
        );
    }
    Ok(())
}

/// Uniform values in [-0.5, 0.5) from a xorshift generator.
pub(crate) fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// The elements of `a`, `b` and `c` in an `m x n x k` product: `m * k`, `k * n`, `m * n`.
pub(super) fn operand_lens((m, n, k): (u32, u32, u32)) -> [usize; 3] {
    let (m, n, k) = (m as usize, n as usize, k as usize);
    [m * k, k * n, m * n]
}

/// How far an f32 SGEMM's entry may be from the f64 product whose terms' magnitudes sum
/// to `magnitude`: f32 rounding of the dot product (and TF32, should cuBLAS use it).
pub(super) fn f32_bound(magnitude: f64) -> f64 {
    1e-3 * magnitude + 1e-6
}

/// 64 sampled entries of `c` agree with an f64 reference within [`f32_bound`].
pub(super) fn check_against_cpu(
    who: &str,
    c: &[f32],
    a: &[f32],
    b: &[f32],
    size: usize,
) -> Result<()> {
    if c.len() != size * size {
        return Err(Error::msg(format!(
            "{who}: result has {} elements",
            c.len()
        )));
    }
    let at = |m: &[f32], index: usize| f64::from(m[index]);
    check_sampled_entries(
        who,
        size,
        |i| at(a, i),
        |i| at(b, i),
        |i| at(c, i),
        |_, magnitude| f32_bound(magnitude),
    )
}

/// Checks 64 entries, sampled the same way every time, of the row-major `size x size`
/// product `c = a b` (elements read through `a`, `b`, `c` by index) against the `f64`
/// reference: `Err` at the first one farther from it than `bound(exact, sum of |terms|)`.
pub(crate) fn check_sampled_entries(
    who: &str,
    size: usize,
    a: impl Fn(usize) -> f64,
    b: impl Fn(usize) -> f64,
    c: impl Fn(usize) -> f64,
    bound: impl Fn(f64, f64) -> f64,
) -> Result<()> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..64 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let (i, j) = ((state as usize) % size, ((state >> 32) as usize) % size);
        let (mut exact, mut magnitude) = (0f64, 0f64);
        for p in 0..size {
            let term = a(i * size + p) * b(p * size + j);
            exact += term;
            magnitude += term.abs();
        }
        let (got, bound) = (c(i * size + j), bound(exact, magnitude));
        if (got - exact).abs() > bound {
            return Err(Error::msg(format!(
                "{who}: C[{i}][{j}] is {got} but the CPU computes {exact} (bound {bound:e})"
            )));
        }
    }
    Ok(())
}

/// This library: `DeviceVec`s attached to a scope per sample.
struct Ours<'e> {
    stream: &'e Stream,
    a: DeviceVec<f32>,
    b: DeviceVec<f32>,
    c_tiled: DeviceVec<f32>,
    c_blas: DeviceVec<f32>,
    blas: Option<kernels::Cublas>,
    timer: stream_core::GpuTimer,
}

impl<'e> Ours<'e> {
    fn new(env: &'e Env, a: &[f32], b: &[f32], have_cublas: bool) -> Result<Self> {
        Ok(Ours {
            stream: &env.streams[0],
            a: env.dev.upload_vec(a)?,
            b: env.dev.upload_vec(b)?,
            c_tiled: env.dev.alloc_vec(a.len())?,
            c_blas: env.dev.alloc_vec(a.len())?,
            blas: if have_cublas {
                Some(kernels::Cublas::new(&env.dev)?)
            } else {
                None
            },
            timer: stream_core::GpuTimer::new(&env.dev)?,
        })
    }

    fn sgemm(&mut self, size: usize, use_blas: bool) -> Result<f64> {
        let n = size as u32;
        self.gemm((n, n, n), (Op::N, Op::N), use_blas)
    }

    /// GPU time of one `kernels::sgemm_tiled_op` (or cuBLAS) call on `(m, n, k)` with the
    /// operands read as the `Op`s say, on the leading parts of the square buffers.
    fn gemm(
        &mut self,
        (m, n, k): (u32, u32, u32),
        (op_a, op_b): (Op, Op),
        use_blas: bool,
    ) -> Result<f64> {
        let [a_len, b_len, c_len] = operand_lens((m, n, k));
        let Ours {
            stream,
            a,
            b,
            c_tiled,
            c_blas,
            blas,
            timer,
        } = self;
        scope(stream, |s| {
            let (da, db) = (s.attach_ref(a)?, s.attach_ref(b)?);
            let (da, db) = (da.slice(..a_len)?, db.slice(..b_len)?);
            timer.start(s)?;
            match (use_blas, blas.as_mut()) {
                (false, _) => {
                    let mut dc = s.attach(c_tiled)?;
                    let mut dc = dc.slice_mut(..c_len)?;
                    kernels::sgemm_tiled_op(s, op_a, op_b, m, n, k, 1.0, &da, &db, 0.0, &mut dc)?;
                }
                (true, Some(blas)) => {
                    let mut dc = s.attach(c_blas)?;
                    let mut dc = dc.slice_mut(..c_len)?;
                    blas.sgemm_op(s, op_a, op_b, m, n, k, 1.0, &da, &db, 0.0, &mut dc)?;
                }
                (true, None) => return Err(Error::msg("cuBLAS is not loaded")),
            }
            timer.stop(s)?;
            Ok::<_, Error>(())
        })?;
        Ok(timer.elapsed()?.as_secs_f64())
    }

    fn result(&self, use_blas: bool) -> Result<Vec<f32>> {
        Ok(if use_blas {
            &self.c_blas
        } else {
            &self.c_tiled
        }
        .to_host_vec()?)
    }
}
