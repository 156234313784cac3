//! The soak's operations that run kernels: `kernels::{axpy, scale, fill}`, `reduce_sum`
//! and `dot`, `transpose`, `sgemm_tiled`, and multi-step pipelines on one buffer. All
//! arithmetic is on small integers, so every result is exact and compared bit for bit.

use gpu_tests::{check_eq, transposed, Element, Failed};
use stream_core::scope;

use crate::host::Host;
use crate::ops::{int, ints_f32, ints_f64, random_len, random_range, Moved, OpResult, Worker};

pub(crate) fn kernels_any(w: &mut Worker<'_>) -> OpResult {
    match w.rng.below(4) {
        0 => axpy_scale_fill(w),
        1 => reduce_and_dot(w),
        2 => transpose(w),
        _ => sgemm(w),
    }
}

/// `y = a x + y`, `z = b y`, `z[r] = v` with `kernels::{axpy, scale, fill}`.
fn axpy_scale_fill(w: &mut Worker<'_>) -> OpResult {
    let max_n = w.max::<f32>();
    let n = random_len(&mut w.rng, max_n);
    let rng = &mut w.rng;
    let (x, y) = (ints_f32(rng, n, 100), ints_f32(rng, n, 100));
    let (a, b, v) = (
        int(rng, 4) as f32,
        int(rng, 4) as f32,
        int(rng, 1000) as f32,
    );
    let r = random_range(rng, n);
    let expected_y: Vec<f32> = x.iter().zip(&y).map(|(x, y)| a * x + y).collect();
    let mut expected_z: Vec<f32> = expected_y.iter().map(|y| b * y).collect();
    expected_z[r.clone()].fill(v);
    let mut out_y = Host::<f32>::poisoned(&w.dev, rng, n)?;
    let mut out_z = Host::<f32>::poisoned(&w.dev, rng, n)?;
    let stream = &w.streams[rng.below(3)];
    scope(stream, |s| -> Result<(), Failed> {
        let dx = s.upload(&x)?;
        let mut dy = s.upload(&y)?;
        kernels::axpy(s, a, &dx, &mut dy)?;
        let mut dz = s.alloc::<f32>(n)?;
        kernels::scale(s, b, &dy, &mut dz)?;
        kernels::fill(s, &mut dz.slice_mut(r.clone())?, v)?;
        let _download = s.copy_to_host(&dy, &mut out_y[..])?;
        let _download = s.copy_to_host(&dz, &mut out_z[..])?;
        Ok(())
    })?;
    check_eq(&format!("axpy({a}) of {n} f32"), &expected_y, &out_y)?;
    check_eq(
        &format!("scale({b}) of {n} f32, then fill({v}) of {r:?}"),
        &expected_z,
        &out_z,
    )?;
    Ok(Moved::default().up::<f32>(2 * n).down::<f32>(2 * n))
}

/// `kernels::reduce_sum` and `kernels::dot` of `f64` integers (exact in any order).
fn reduce_and_dot(w: &mut Worker<'_>) -> OpResult {
    let max_n = w.max::<f64>();
    let n = random_len(&mut w.rng, max_n);
    let rng = &mut w.rng;
    let (x, y) = (ints_f64(rng, n, 100), ints_f64(rng, n, 100));
    let expected = [
        // Folded from +0.0, as the GPU's sums start (`Iterator::sum` of floats starts
        // from -0.0, which differs bitwise for an empty input).
        x.iter().fold(0.0, |acc, v| acc + v),
        x.iter().zip(&y).fold(0.0, |acc, (x, y)| acc + x * y),
    ];
    let mut out = [f64::POISON; 2];
    let stream = &w.streams[rng.below(3)];
    scope(stream, |s| -> Result<(), Failed> {
        let (dx, dy) = (s.upload(&x)?, s.upload(&y)?);
        let mut results = s.alloc::<f64>(2)?;
        let (mut sum, mut dot) = results.split_at_mut(1)?;
        kernels::reduce_sum(s, &dx, &mut sum)?;
        kernels::dot(s, &dx, &dy, &mut dot)?;
        let _download = s.copy_to_host(&results, &mut out)?;
        Ok(())
    })?;
    check_eq(&format!("reduce_sum and dot of {n} f64"), &expected, &out)?;
    Ok(Moved::default().up::<f64>(2 * n).down::<f64>(2))
}

/// `kernels::transpose` of a random `rows x cols` matrix.
fn transpose(w: &mut Worker<'_>) -> OpResult {
    let max = w.max::<f32>();
    let rng = &mut w.rng;
    let rows = 1 + rng.below(2048.min(max));
    let cols = 1 + rng.below(2048.min(max / rows).max(1));
    let input: Vec<f32> = rng.vec(rows * cols);
    let expected = transposed(&input, rows, cols);
    let mut out = Host::<f32>::poisoned(&w.dev, rng, rows * cols)?;
    let stream = &w.streams[rng.below(3)];
    scope(stream, |s| -> Result<(), Failed> {
        let din = s.upload(&input)?;
        let mut dout = s.alloc::<f32>(rows * cols)?;
        kernels::transpose(s, &din, rows as u32, cols as u32, &mut dout)?;
        let _download = s.copy_to_host(&dout, &mut out[..])?;
        Ok(())
    })?;
    check_eq(&format!("transpose of {rows} x {cols}"), &expected, &out)?;
    Ok(Moved::default()
        .up::<f32>(rows * cols)
        .down::<f32>(rows * cols))
}

/// `kernels::sgemm_tiled` of integer matrices (exact in `f32`), with `beta` 0 on
/// uninitialised `c` (documented not to be read) or 1 on uploaded `c`.
fn sgemm(w: &mut Worker<'_>) -> OpResult {
    let rng = &mut w.rng;
    let (m, n, k) = (1 + rng.below(160), 1 + rng.below(160), 1 + rng.below(160));
    let a = ints_f32(rng, m * k, 50);
    let b = ints_f32(rng, k * n, 50);
    let c = ints_f32(rng, m * n, 50);
    let beta_one = rng.below(2) == 0;
    let mut expected = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f32 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            expected[i * n + j] = dot + if beta_one { c[i * n + j] } else { 0.0 };
        }
    }
    let mut out = Host::<f32>::poisoned(&w.dev, rng, m * n)?;
    let stream = &w.streams[rng.below(3)];
    scope(stream, |s| -> Result<(), Failed> {
        let (da, db) = (s.upload(&a)?, s.upload(&b)?);
        let mut dc = if beta_one {
            s.upload(&c)?
        } else {
            s.alloc::<f32>(m * n)?
        };
        let beta = if beta_one { 1.0 } else { 0.0 };
        let (mm, nn, kk) = (m as u32, n as u32, k as u32);
        kernels::sgemm_tiled(s, mm, nn, kk, 1.0, &da, &db, beta, &mut dc)?;
        let _download = s.copy_to_host(&dc, &mut out[..])?;
        Ok(())
    })?;
    check_eq(
        &format!("sgemm_tiled {m}x{n}x{k}, beta {}", u8::from(beta_one)),
        &expected,
        &out,
    )?;
    let up = m * k + k * n + if beta_one { m * n } else { 0 };
    Ok(Moved::default().up::<f32>(up).down::<f32>(m * n))
}

/// One step of [`pipeline`], planned on the CPU first.
enum Step {
    Upload {
        at: usize,
        data: Vec<f64>,
    },
    Fill {
        range: std::ops::Range<usize>,
        value: f64,
        kernel: bool,
    },
    Zero {
        range: std::ops::Range<usize>,
    },
    Scale {
        a: f64,
    },
    Axpy {
        a: f64,
        data: Vec<f64>,
    },
    Copy {
        from: usize,
        to: usize,
        len: usize,
        mid: usize,
        up: bool,
    },
    Check {
        range: std::ops::Range<usize>,
        expected: Vec<f64>,
    },
}

/// Three to ten random steps on one device buffer of `f64` integers in one scope
/// (uploads into sub-ranges, fills, zeroing, `scale`, `axpy`, device copies between
/// disjoint halves, and downloads checked right after `wait`), then the whole buffer
/// is downloaded and compared with the CPU's copy.
pub(crate) fn pipeline(w: &mut Worker<'_>) -> OpResult {
    let max = w.max::<f64>().max(2) - 2;
    let n = 2 + random_len(&mut w.rng, max);
    let rng = &mut w.rng;
    let init = ints_f64(rng, n, 1000);
    let mut mirror = init.clone();
    let mut steps = Vec::new();
    let mut moved = Moved::default().up::<f64>(n).down::<f64>(n);
    for _ in 0..3 + rng.below(8) {
        let step = match rng.below(7) {
            0 => {
                let range = random_range(rng, n);
                let data = ints_f64(rng, range.len(), 1000);
                mirror[range.clone()].copy_from_slice(&data);
                moved = moved.up::<f64>(data.len());
                Step::Upload {
                    at: range.start,
                    data,
                }
            }
            1 => {
                let range = random_range(rng, n);
                let value = f64::from(int(rng, 1000));
                mirror[range.clone()].fill(value);
                Step::Fill {
                    range,
                    value,
                    kernel: rng.below(2) == 0,
                }
            }
            2 => {
                let range = random_range(rng, n);
                mirror[range.clone()].fill(0.0);
                Step::Zero { range }
            }
            3 => {
                let a = [-2.0, -1.0, 1.0, 2.0][rng.below(4)];
                mirror.iter_mut().for_each(|v| *v *= a);
                moved = moved.device::<f64>(n);
                Step::Scale { a }
            }
            4 => {
                let a = [-1.0, 1.0, 2.0][rng.below(3)];
                let data = ints_f64(rng, n, 1000);
                mirror.iter_mut().zip(&data).for_each(|(m, d)| *m += a * d);
                moved = moved.up::<f64>(n);
                Step::Axpy { a, data }
            }
            5 => {
                let mid = 1 + rng.below(n - 1);
                let len = rng.below(mid.min(n - mid) + 1);
                let from = rng.below(mid - len + 1);
                let to = mid + rng.below(n - mid - len + 1);
                let up = rng.below(2) == 0;
                let (src, dst) = if up { (from, to) } else { (to, from) };
                let copied = mirror[src..src + len].to_vec();
                mirror[dst..dst + len].copy_from_slice(&copied);
                moved = moved.device::<f64>(len);
                Step::Copy {
                    from,
                    to,
                    len,
                    mid,
                    up,
                }
            }
            _ => {
                let range = random_range(rng, n);
                moved = moved.down::<f64>(range.len());
                Step::Check {
                    expected: mirror[range.clone()].to_vec(),
                    range,
                }
            }
        };
        steps.push(step);
    }
    let checks = steps
        .iter()
        .filter(|s| matches!(s, Step::Check { .. }))
        .count();
    let mut check_hosts: Vec<Vec<f64>> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Check { range, .. } => Some(vec![f64::POISON; range.len()]),
            _ => None,
        })
        .collect();
    debug_assert_eq!(checks, check_hosts.len());
    let mut out = Host::<f64>::poisoned(&w.dev, rng, n)?;
    let stream = &w.streams[rng.below(3)];
    scope(stream, |s| -> Result<(), Failed> {
        let mut x = s.upload(&init)?;
        let mut hosts = check_hosts.iter_mut();
        for (i, step) in steps.iter().enumerate() {
            match step {
                Step::Upload { at, data } => {
                    s.copy_to_device(data, &mut x.slice_mut(*at..at + data.len())?)?
                }
                Step::Fill {
                    range,
                    value,
                    kernel: true,
                } => kernels::fill(s, &mut x.slice_mut(range.clone())?, *value)?,
                Step::Fill { range, value, .. } => {
                    s.fill(&mut x.slice_mut(range.clone())?, *value)?
                }
                Step::Zero { range } => s.zero(&mut x.slice_mut(range.clone())?)?,
                Step::Scale { a } => {
                    let mut tmp = s.alloc::<f64>(n)?;
                    kernels::scale(s, *a, &x, &mut tmp)?;
                    s.copy_device(&tmp, &mut x)?;
                }
                Step::Axpy { a, data } => {
                    let d = s.upload(data)?;
                    kernels::axpy(s, *a, &d, &mut x)?;
                }
                Step::Copy {
                    from,
                    to,
                    len,
                    mid,
                    up,
                } => {
                    let (mut lo, mut hi) = x.split_at_mut(*mid)?;
                    let (lo_at, hi_at) = (*from, to - mid);
                    if *up {
                        let src = lo.slice(lo_at..lo_at + len)?;
                        s.copy_device(&src, &mut hi.slice_mut(hi_at..hi_at + len)?)?;
                    } else {
                        let src = hi.slice(hi_at..hi_at + len)?;
                        s.copy_device(&src, &mut lo.slice_mut(lo_at..lo_at + len)?)?;
                    }
                }
                Step::Check { range, expected } => {
                    let host = hosts
                        .next()
                        .ok_or_else(|| Failed::from("pipeline: a check without a buffer"))?;
                    let got = s.copy_to_host(&x.slice(range.clone())?, host)?.wait()?;
                    check_eq(
                        &format!("pipeline of {n} f64, step {i}: download of {range:?}"),
                        expected,
                        got,
                    )?;
                }
            }
        }
        let _download = s.copy_to_host(&x, &mut out[..])?;
        Ok(())
    })?;
    check_eq(
        &format!("pipeline of {n} f64 after {} steps", steps.len()),
        &mirror,
        &out,
    )?;
    Ok(moved)
}
