//! Kernels: typed, safe launches of the `kernels` crate, each checked against the CPU,
//! then the tiled SGEMM and cuBLAS's SGEMM timed side by side at 4096^3.
//!
//! Run with `cargo run --release --example kernels` (needs an NVIDIA GPU); `-- --size N`
//! times N^3 instead of 4096^3 (the sanitizers run it with a small N).

use stream_core::{scope, Device, Error, GpuTimer, Stream};

/// The timed SGEMM's side, unless `--size N` says otherwise.
const SIZE: usize = 4096;

fn main() {
    let size = match size_argument(std::env::args().skip(1)) {
        Ok(size) => size,
        Err(why) => {
            eprintln!(
                "kernels: {why}\nusage: kernels [--size N]   (1 <= N <= 16384, default {SIZE})"
            );
            std::process::exit(2);
        }
    };
    if let Err(e) = run(size) {
        eprintln!("kernels: {e}");
        if matches!(e, Error::NoDriver | Error::NoDevice { .. }) {
            eprintln!("kernels: this example needs an NVIDIA GPU and its driver; none was found.");
        }
        std::process::exit(1);
    }
}

/// The `--size N` argument, or `SIZE` without one.
fn size_argument(mut args: impl Iterator<Item = String>) -> Result<usize, String> {
    let mut size = SIZE;
    while let Some(arg) = args.next() {
        if arg != "--size" {
            return Err(format!("unknown argument {arg:?}"));
        }
        size = args
            .next()
            .and_then(|n| n.parse().ok())
            .filter(|n| (1..=16384).contains(n))
            .ok_or("--size needs a number from 1 to 16384")?;
    }
    Ok(size)
}

fn run(size: usize) -> Result<(), Error> {
    let dev = Device::new(0)?;
    let stream = dev.new_stream()?;
    println!(
        "device 0: {} (compute capability {:?})",
        dev.name()?,
        dev.compute_capability()
    );
    let mut blas = kernels::Cublas::new(&dev)?;

    // Correctness at a shape that is not a multiple of the 128x128 tile.
    let (m, n, k) = (515, 257, 129);
    let a = pseudo_random(m * k, 1);
    let b = pseudo_random(k * n, 2);
    let mut tiled = vec![f32::NAN; m * n];
    let mut cublas = vec![f32::NAN; m * n];
    scope(&stream, |s| {
        let (da, db) = (s.upload(&a)?, s.upload(&b)?);
        let mut dc = s.alloc::<f32>(m * n)?;
        kernels::sgemm_tiled(s, m as u32, n as u32, k as u32, 1.0, &da, &db, 0.0, &mut dc)?;
        s.copy_to_host(&dc, &mut tiled)?.wait()?;
        blas.sgemm(s, m as u32, n as u32, k as u32, 1.0, &da, &db, 0.0, &mut dc)?;
        s.copy_to_host(&dc, &mut cublas)?.wait()?;
        Ok::<_, Error>(())
    })?;
    let reference = cpu_sgemm(&a, &b, m, n, k);
    println!(
        "sgemm {m}x{n}x{k}: max relative error tiled {:.2e}, cuBLAS {:.2e}",
        max_relative_error(&tiled, &reference),
        max_relative_error(&cublas, &reference)
    );

    // Throughput at size^3, same run, same buffers.
    let a = pseudo_random(size * size, 3);
    let b = pseudo_random(size * size, 4);
    let tiled_s = time_sgemm(&stream, size, &a, &b, |s, da, db, dc| {
        kernels::sgemm_tiled(
            s,
            size as u32,
            size as u32,
            size as u32,
            1.0,
            da,
            db,
            0.0,
            dc,
        )
    })?;
    let cublas_s = time_sgemm(&stream, size, &a, &b, |s, da, db, dc| {
        blas.sgemm(
            s,
            size as u32,
            size as u32,
            size as u32,
            1.0,
            da,
            db,
            0.0,
            dc,
        )
    })?;
    let flops = 2.0 * (size as f64).powi(3);
    println!(
        "sgemm {size}^3: tiled {:.0} GFLOP/s, cuBLAS {:.0} GFLOP/s (tiled = {:.0}% of cuBLAS)",
        flops / tiled_s / 1e9,
        flops / cublas_s / 1e9,
        100.0 * cublas_s / tiled_s
    );
    Ok(())
}

type Buffer<'s> = stream_core::DeviceBuffer<'s, f32>;

/// Median seconds per SGEMM over 7 timed groups of 5 launches each, after a warm-up
/// group, measured on the GPU's clock with a `GpuTimer`.
fn time_sgemm(
    stream: &Stream,
    size: usize,
    a: &[f32],
    b: &[f32],
    mut launch: impl for<'s> FnMut(
        &'s stream_core::Scope<'s, '_>,
        &Buffer<'s>,
        &Buffer<'s>,
        &mut Buffer<'s>,
    ) -> Result<(), Error>,
) -> Result<f64, Error> {
    const LAUNCHES: usize = 5;
    let timer = GpuTimer::new(stream.device())?;
    let mut times = Vec::new();
    scope(stream, |s| {
        let (da, db) = (s.upload(a)?, s.upload(b)?);
        let mut dc = s.alloc::<f32>(size * size)?;
        for round in 0..8 {
            // A nested scope on the same stream: the start, the launches and the stop run
            // in that order, and its exit synchronises, so the stop has completed after it.
            scope(stream, |t| {
                timer.start(t)?;
                for _ in 0..LAUNCHES {
                    launch(s, &da, &db, &mut dc)?;
                }
                timer.stop(t)
            })?;
            if round > 0 {
                times.push(timer.elapsed()?.as_secs_f64() / LAUNCHES as f64);
            }
        }
        Ok::<_, Error>(())
    })?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
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

fn cpu_sgemm(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let aip = f64::from(a[i * k + p]);
            for j in 0..n {
                c[i * n + j] += aip * f64::from(b[p * n + j]);
            }
        }
    }
    c
}

fn max_relative_error(got: &[f32], reference: &[f64]) -> f64 {
    let scale = reference
        .iter()
        .fold(0f64, |m, v| m.max(v.abs()))
        .max(f64::MIN_POSITIVE);
    got.iter()
        .zip(reference)
        .map(|(g, r)| (f64::from(*g) - r).abs() / scale)
        .fold(0.0, f64::max)
}
