//! Data-parallel training of a linear model on every GPU: each rank runs the forward
//! pass (an SGEMM) and the gradient on its share of the batch, the gradients are summed
//! with one NCCL all-reduce per step, and every rank applies the same update. The
//! weights are then checked against the same training on one GPU with the whole batch.
//!
//! Two ways to run it:
//!
//! ```sh
//! cargo run --release --example data_parallel            # one process, one thread per visible GPU
//! torchrun --no-python --nproc-per-node=2 target/release/examples/data_parallel   # one process per GPU
//! ```
//!
//! (`srun` and `mpirun` work like `torchrun`, given rank 0's host and a free port:
//! `mpirun -np 2 --bind-to none -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 target/release/examples/data_parallel`;
//! see `stream_core::nccl::World`.) It needs
//! an NVIDIA GPU and the NCCL library, and says so when either is missing.
//!
//! With `--graph`, each rank captures its training step (three kernels, the all-reduce,
//! the update: `step`, the function the scope runs otherwise) into a CUDA graph once
//! and replays it step after step without the host waiting in between
//! (`Scope::replay_again_with`). Graphs with collectives on more than
//! one rank need NCCL's registration of captured buffers off, in every rank's
//! environment: `NCCL_GRAPH_REGISTER=0 cargo run --release --example data_parallel -- --graph`
//! (the library refuses the capture otherwise, and says so).

use std::time::{Duration, Instant};

use stream_core::nccl::{self, Communicator, Sum, UniqueId, World};
use stream_core::{
    scope, Device, DeviceMemory, DeviceMemoryMut, DeviceVec, Enqueue, Error, Result,
};

/// Input features, outputs, rows of the batch per rank, training steps, learning rate.
const FEATURES: usize = 256;
const OUTPUTS: usize = 128;
const ROWS_PER_RANK: usize = 1024;
const STEPS: usize = 20;
const LEARNING_RATE: f32 = 0.5;

/// How each rank runs its steps: issued one by one from a scope, or replayed from a
/// graph captured once (`--graph`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Steps {
    Issued,
    Replayed,
}

fn main() {
    let steps = match std::env::args().nth(1).as_deref() {
        None => Steps::Issued,
        Some("--graph") => Steps::Replayed,
        Some(other) => {
            eprintln!("data_parallel: unknown argument {other:?}\nusage: data_parallel [--graph]");
            std::process::exit(2);
        }
    };
    if steps == Steps::Replayed {
        println!("data_parallel: each rank captures its step once and replays it (--graph)");
    }
    // Not started by a launcher: drive every visible GPU from this process. A launcher
    // whose variables are incomplete is an error, not a reason to run alone.
    let outcome = match World::launched() {
        Ok(Some(world)) => launched(&world, steps),
        Ok(None) => one_process(steps),
        Err(e) => Err(e),
    };
    match outcome {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("data_parallel: {e}");
            if matches!(e, Error::NoDriver | Error::NoDevice { .. }) {
                eprintln!("data_parallel: this example needs an NVIDIA GPU and its driver; none was found.");
            }
            std::process::exit(1);
        }
    }
}

/// One process per GPU, under a launcher: this is one rank.
fn launched(world: &World, steps: Steps) -> Result<bool> {
    let device = world.device()?;
    let comm = world.communicator(&device)?;
    println!(
        "data_parallel: rank {} of {} ({:?}) on GPU {} ({})",
        world.rank(),
        world.size(),
        world.launcher(),
        device.ordinal(),
        device.name()?
    );
    let (weights, elapsed) = train_rank(&device, &comm, steps)?;
    if world.rank() != 0 {
        return Ok(true);
    }
    check(&device, world.size(), &weights, elapsed)
}

/// One process over every visible GPU: a thread per GPU, one communicator each, joined
/// through one id.
fn one_process(steps: Steps) -> Result<bool> {
    let ranks = Device::count()?;
    if ranks == 0 {
        return Err(Error::NoDevice {
            ordinal: 0,
            count: 0,
        });
    }
    println!(
        "data_parallel: one process, {ranks} GPU(s), NCCL {:?}",
        nccl::version()?
    );
    let id = UniqueId::new()?;
    let results: Vec<Result<(Vec<f32>, StepTimes)>> = std::thread::scope(|threads| {
        let handles: Vec<_> = (0..ranks)
            .map(|rank| {
                threads.spawn(move || {
                    let device = Device::new(rank)?;
                    let comm = Communicator::join(&device, &id, rank, ranks)?;
                    train_rank(&device, &comm, steps)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a rank's thread panicked"))
            .collect()
    });
    let trained: Vec<(Vec<f32>, StepTimes)> = results.into_iter().collect::<Result<_>>()?;
    // The slowest rank's steps: the job's.
    let elapsed = StepTimes {
        first: trained
            .iter()
            .map(|(_, t)| t.first)
            .max()
            .unwrap_or_default(),
        per_step: trained
            .iter()
            .map(|(_, t)| t.per_step)
            .max()
            .unwrap_or_default(),
    };
    let weights: Vec<Vec<f32>> = trained.into_iter().map(|(w, _)| w).collect();
    if weights.iter().any(|w| w != &weights[0]) {
        eprintln!("data_parallel: the ranks' weights differ after the all-reduces");
        return Ok(false);
    }
    check(&Device::new(0)?, ranks, &weights[0], elapsed)
}

/// Rank `comm.rank()`'s training: its rows of the batch, one all-reduce per step.
fn train_rank(device: &Device, comm: &Communicator, steps: Steps) -> Result<(Vec<f32>, StepTimes)> {
    let rows = ROWS_PER_RANK;
    let first_row = comm.rank() * rows;
    let (rows, batch) = (first_row..first_row + rows, comm.size() * rows);
    match steps {
        Steps::Issued => train(device, rows, batch, Some(comm)),
        Steps::Replayed => train_replayed(device, rows, batch, comm),
    }
}

/// [`train`] with the step captured into a graph once and replayed [`STEPS`] times:
/// the capture and the first replay, waited for, timed together as the first step (the
/// kernels load and NCCL connects during the capture, as during `train`'s first step),
/// the other replays chained without a host wait and waited for once. The batch, its
/// transpose and the weights are `DeviceVec`s the graph holds; the forward output and
/// the gradient are its own.
fn train_replayed(
    device: &Device,
    rows: std::ops::Range<usize>,
    batch: usize,
    comm: &Communicator,
) -> Result<(Vec<f32>, StepTimes)> {
    let m = rows.len();
    let (x, target) = batch_rows(rows);
    let (m32, k32) = (m as u32, FEATURES as u32);
    let dx = device.upload_vec(&x)?;
    let dt = device.upload_vec(&target)?;
    let mut xt: DeviceVec<f32> = device.alloc_vec(FEATURES * m)?;
    let mut w = device.upload_vec(&vec![0f32; FEATURES * OUTPUTS])?;
    let stream = device.new_stream()?;
    scope(&stream, |s| {
        let x = s.attach_ref(&dx)?;
        let mut xt = s.attach(&mut xt)?;
        kernels::transpose(s, &x, m32, k32, &mut xt)
    })?;
    let mut times = StepTimes::default();
    {
        let first = Instant::now();
        let held = (&dx, &dt, &xt, &mut w);
        let (mut graph, ()) = device.capture(held, |g, (dx, dt, xt, mut w)| {
            let mut y = g.alloc::<f32>(m * OUTPUTS)?;
            let mut grad = g.alloc::<f32>(FEATURES * OUTPUTS)?;
            let sum = |grad: &mut _| g.all_reduce_in_place(comm, grad, Sum);
            step(g, (&dx, &dt, &xt), batch, &mut w, (&mut y, &mut grad), sum)
        })?;
        scope(&stream, |s| {
            let graph = s.replay_with(&mut graph, &[comm])?.wait()?;
            times.first = first.elapsed();
            let start = Instant::now();
            let mut replay = s.replay_with(graph, &[comm])?;
            for _ in 2..STEPS {
                replay = s.replay_again_with(replay, &[comm])?;
            }
            replay.wait()?;
            times.per_step = start.elapsed() / (STEPS as u32 - 1).max(1);
            Ok::<_, Error>(())
        })?;
    }
    Ok((w.to_host_vec()?, times))
}

/// Trains on `rows` of the global batch of `batch` rows, from zero weights, for
/// [`STEPS`] steps; with a communicator, gradients are summed over the ranks first.
/// Returns the weights (`FEATURES x OUTPUTS`, row-major) and the steps' times (each
/// up to its result on the host).
fn train(
    device: &Device,
    rows: std::ops::Range<usize>,
    batch: usize,
    comm: Option<&Communicator>,
) -> Result<(Vec<f32>, StepTimes)> {
    let m = rows.len();
    let (x, target) = batch_rows(rows);
    let mut weights = vec![0f32; FEATURES * OUTPUTS];
    let stream = device.new_stream()?;
    let (m32, k32) = (m as u32, FEATURES as u32);
    let mut probe = [0f32];
    let mut first_result = Some(&mut probe[..]);
    let mut times = StepTimes::default();
    scope(&stream, |s| {
        let dx = s.upload(&x)?;
        let dt = s.upload(&target)?;
        let mut xt = s.alloc::<f32>(FEATURES * m)?;
        kernels::transpose(s, &dx, m32, k32, &mut xt)?;
        let mut w = s.alloc_zeroed::<f32>(FEATURES * OUTPUTS)?;
        let mut y = s.alloc::<f32>(m * OUTPUTS)?;
        let mut grad = s.alloc::<f32>(FEATURES * OUTPUTS)?;
        let mut start = Instant::now();
        for _ in 0..STEPS {
            let sum = |grad: &mut _| match comm {
                Some(comm) => s.all_reduce_in_place(comm, grad, Sum),
                None => Ok(()),
            };
            step(s, (&dx, &dt, &xt), batch, &mut w, (&mut y, &mut grad), sum)?;
            // The first step loads the kernels and sets up NCCL's connections: timed
            // apart, up to one element of its result on the host.
            if let Some(probe) = first_result.take() {
                s.copy_to_host(&w.slice(..1)?, probe)?.wait()?;
                times.first = start.elapsed();
                start = Instant::now();
            }
        }
        s.copy_to_host(&w, &mut weights)?.wait()?;
        times.per_step = start.elapsed() / (STEPS as u32 - 1).max(1);
        Ok::<_, Error>(())
    })?;
    Ok((weights, times))
}

/// One training step on `s`, the same whether `s` runs it (a scope) or records it into
/// a graph (a capture): forward `y = x w`, residual `y -= target`, the gradient of the
/// mean squared error `grad = x^T y / batch` (`xt` is `x` transposed), `sum` of the
/// gradient over the ranks, and the update `w -= LEARNING_RATE grad`.
fn step<'s, G: DeviceMemoryMut<'s, f32>>(
    s: &'s impl Enqueue<'s>,
    (x, target, xt): (&impl F32s<'s>, &impl F32s<'s>, &impl F32s<'s>),
    batch: usize,
    w: &mut impl DeviceMemoryMut<'s, f32>,
    (y, grad): (&mut impl DeviceMemoryMut<'s, f32>, &mut G),
    sum: impl FnOnce(&mut G) -> Result<()>,
) -> Result<()> {
    let (rows, k, n) = ((x.len() / FEATURES) as u32, FEATURES as u32, OUTPUTS as u32);
    kernels::sgemm_tiled(s, rows, n, k, 1.0, x, w, 0.0, y)?;
    kernels::axpy(s, -1.0, target, y)?;
    kernels::sgemm_tiled(s, k, n, rows, 1.0 / batch as f32, xt, y, 0.0, grad)?;
    sum(grad)?;
    kernels::axpy(s, -LEARNING_RATE, grad, w)
}

/// What [`step`] reads: device memory of `f32`s of the scope or capture `'s`.
trait F32s<'s>: DeviceMemory<'s, f32> {}
impl<'s, M: DeviceMemory<'s, f32>> F32s<'s> for M {}

/// How long a rank's training took: its first step (the kernels' loads and NCCL's
/// connection setup included), and each later one on average.
#[derive(Debug, Clone, Copy, Default)]
struct StepTimes {
    first: Duration,
    per_step: Duration,
}

/// Rows `rows` of the global batch: inputs in [-1, 1) and targets of a fixed linear map
/// plus a little structure, the same whichever rank makes them.
fn batch_rows(rows: std::ops::Range<usize>) -> (Vec<f32>, Vec<f32>) {
    let value = |row: usize, col: usize, salt: u64| {
        let mut h = (row as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (col as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
            ^ salt;
        h ^= h >> 31;
        h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h ^= h >> 29;
        (h >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    };
    let x: Vec<f32> = rows
        .clone()
        .flat_map(|r| (0..FEATURES).map(move |c| value(r, c, 1)))
        .collect();
    let target: Vec<f32> = rows
        .flat_map(|r| (0..OUTPUTS).map(move |c| value(r, c, 2)))
        .collect();
    (x, target)
}

/// Compares `weights` with one GPU's training on the whole batch of `ranks` ranks.
fn check(device: &Device, ranks: usize, weights: &[f32], elapsed: StepTimes) -> Result<bool> {
    let batch = ranks * ROWS_PER_RANK;
    let (reference, _) = train(device, 0..batch, batch, None)?;
    let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = weights
        .iter()
        .zip(&reference)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    let ok = worst <= 1e-4 * scale.max(1e-6) && scale > 0.0;
    println!(
        "data_parallel: {ranks} rank(s), {STEPS} steps of {ROWS_PER_RANK} rows each: the first in {:.1} ms \
         (kernel loads, NCCL's connections), then {:.0} us per step; \
         weights vs one GPU on the whole batch: largest difference {worst:.3e} (largest weight {scale:.3e}): {}",
        elapsed.first.as_secs_f64() * 1e3,
        elapsed.per_step.as_secs_f64() * 1e6,
        if ok { "match" } else { "MISMATCH" }
    );
    Ok(ok)
}
