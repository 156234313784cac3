//! Data-parallel training of a two-layer linear model on every GPU, as PyTorch's DDP
//! runs it: each rank runs the forward pass (two SGEMMs) and the backward pass on its
//! share of the batch, the gradients are summed over the ranks with NCCL all-reduces,
//! and every rank applies the same update. The second layer's gradient is ready first;
//! its all-reduce runs on a fork of the most urgent stream priority while the parent
//! stream computes the first layer's gradient (the overlap DDP's gradient buckets give),
//! then the first layer's gradient is summed and both layers are updated. The weights
//! are then checked against the same training on one GPU with the whole batch.
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
//! an NVIDIA GPU and the NCCL and cuBLAS libraries (its GEMMs are cuBLAS's, as in
//! PyTorch), and says so when one is missing.
//!
//! With `--graph`, each rank captures its training step (`forward`,
//! `backward_first_layer` and `update`, the functions the scope runs otherwise; its fork
//! a branch of the capture that keeps its priority, `Capture::fork_with_priority`) into
//! a CUDA graph once
//! and replays it step after step without the host waiting in between
//! (`Scope::replay_again_with`). Graphs with collectives on more than
//! one rank need NCCL's registration of captured buffers off, in every rank's
//! environment: `NCCL_GRAPH_REGISTER=0 cargo run --release --example data_parallel -- --graph`
//! (the library refuses the capture otherwise, and says so).

use std::time::{Duration, Instant};

use kernels::Cublas;
use kernels::Op::{N, T};
use stream_core::nccl::{self, Communicator, Sum, UniqueId, World};
use stream_core::{scope, Device, DeviceMemory, DeviceMemoryMut, Enqueue, Error, Result};

/// Input features, hidden units, outputs, rows of the batch per rank, training steps,
/// learning rate.
const FEATURES: usize = 256;
const HIDDEN: usize = 256;
const OUTPUTS: usize = 128;
const ROWS_PER_RANK: usize = 1024;
const STEPS: usize = 100;
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
    let results: Vec<Result<(Weights, StepTimes)>> = std::thread::scope(|threads| {
        let handles: Vec<_> = (0..ranks)
            .map(|rank| {
                threads.spawn(move || {
                    let device = Device::new(rank)?;
                    // Every kernel of the step launched once on this GPU before its
                    // first collective: in one process, a kernel's first launch can
                    // otherwise wait for good (CUDA's lazy loading; the `nccl` module
                    // docs, "One process driving several GPUs"). Training this rank's
                    // rows alone launches exactly the step's kernels.
                    let rows = rank * ROWS_PER_RANK..(rank + 1) * ROWS_PER_RANK;
                    train(&device, rows, ranks * ROWS_PER_RANK, None)?;
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
    let trained: Vec<(Weights, StepTimes)> = results.into_iter().collect::<Result<_>>()?;
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
    let weights: Vec<Weights> = trained.into_iter().map(|(w, _)| w).collect();
    if weights.iter().any(|w| w != &weights[0]) {
        eprintln!("data_parallel: the ranks' weights differ after the all-reduces");
        return Ok(false);
    }
    check(&Device::new(0)?, ranks, &weights[0], elapsed)
}

/// Rank `comm.rank()`'s training: its rows of the batch, one all-reduce per step.
fn train_rank(device: &Device, comm: &Communicator, steps: Steps) -> Result<(Weights, StepTimes)> {
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
/// targets and the weights are `DeviceVec`s the graph holds; the activations and the
/// gradients are its own.
fn train_replayed(
    device: &Device,
    rows: std::ops::Range<usize>,
    batch: usize,
    comm: &Communicator,
) -> Result<(Weights, StepTimes)> {
    let m = rows.len();
    let (x, target) = batch_rows(rows);
    let dx = device.upload_vec(&x)?;
    let dt = device.upload_vec(&target)?;
    let initial = Weights::initial();
    let mut w1 = device.upload_vec(&initial.first)?;
    let mut w2 = device.upload_vec(&initial.second)?;
    let stream = device.new_stream()?;
    let urgent = *device.stream_priorities()?.start();
    let mut blas = Cublas::new(device)?;
    let mut times = StepTimes::default();
    {
        let first = Instant::now();
        let held = (&dx, &dt, &mut w1, &mut w2);
        let (mut graph, ()) = device.capture(held, |g, (dx, dt, mut w1, mut w2)| {
            let (mut act, [mut grad1, mut grad2]) = Activations::alloc(m, |n| g.alloc(n))?;
            forward(
                g,
                &mut blas,
                (&dx, &dt, batch),
                (&w1, &w2),
                &mut act,
                &mut grad2,
            )?;
            // The second layer's gradient is summed on a branch of the most urgent
            // priority while the first layer's is recorded on `g`.
            g.fork_with_priority(urgent, &mut grad2, |c, mut grad2| {
                c.all_reduce_in_place(comm, &mut grad2, Sum)?;
                backward_first_layer(g, &mut blas, &dx, batch, &w2, &mut act, &mut grad1)
            })?;
            g.all_reduce_in_place(comm, &mut grad1, Sum)?;
            update(g, (&mut w1, &mut w2), (&grad1, &grad2))
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
    let weights = Weights {
        first: w1.to_host_vec()?,
        second: w2.to_host_vec()?,
    };
    Ok((weights, times))
}

/// Trains on `rows` of the global batch of `batch` rows, from [`Weights::initial`], for
/// [`STEPS`] steps; with a communicator, gradients are summed over the ranks first (the
/// second layer's on a fork of the most urgent priority, beside the first layer's
/// backward pass). Returns the weights and the steps' times (each up to its result on
/// the host).
fn train(
    device: &Device,
    rows: std::ops::Range<usize>,
    batch: usize,
    comm: Option<&Communicator>,
) -> Result<(Weights, StepTimes)> {
    let m = rows.len();
    let (x, target) = batch_rows(rows);
    let initial = Weights::initial();
    let mut weights = initial.clone();
    let stream = device.new_stream()?;
    let urgent = device.new_stream_with_priority(*device.stream_priorities()?.start())?;
    let mut blas = Cublas::new(device)?;
    let mut probe = [0f32];
    let mut first_result = Some(&mut probe[..]);
    let mut times = StepTimes::default();
    scope(&stream, |s| {
        let dx = s.upload(&x)?;
        let dt = s.upload(&target)?;
        let mut w1 = s.upload(&initial.first)?;
        let mut w2 = s.upload(&initial.second)?;
        let (mut act, [mut grad1, mut grad2]) = Activations::alloc(m, |n| s.alloc(n))?;
        let mut start = Instant::now();
        for _ in 0..STEPS {
            forward(
                s,
                &mut blas,
                (&dx, &dt, batch),
                (&w1, &w2),
                &mut act,
                &mut grad2,
            )?;
            match comm {
                // The second layer's gradient is lent to a fork on the urgent stream,
                // which sums it while the first layer's is computed on this scope's
                // stream; nothing here can touch it until the fork has joined.
                Some(comm) => {
                    s.fork(&urgent, (&mut grad2,), |c, (mut grad2,)| {
                        c.all_reduce_in_place(comm, &mut grad2, Sum)?;
                        backward_first_layer(s, &mut blas, &dx, batch, &w2, &mut act, &mut grad1)
                    })?;
                    s.all_reduce_in_place(comm, &mut grad1, Sum)?;
                }
                None => backward_first_layer(s, &mut blas, &dx, batch, &w2, &mut act, &mut grad1)?,
            }
            update(s, (&mut w1, &mut w2), (&grad1, &grad2))?;
            // The first step sets up NCCL's connections and loads the kernels (unless
            // an earlier training on this device did): timed apart, up to one element
            // of its result on the host.
            if let Some(probe) = first_result.take() {
                s.copy_to_host(&w1.slice(..1)?, probe)?.wait()?;
                times.first = start.elapsed();
                start = Instant::now();
            }
        }
        s.copy_to_host(&w1, &mut weights.first)?.wait()?;
        s.copy_to_host(&w2, &mut weights.second)?.wait()?;
        times.per_step = start.elapsed() / (STEPS as u32 - 1).max(1);
        Ok::<_, Error>(())
    })?;
    Ok((weights, times))
}

/// The model's weights, row-major: `first` is `FEATURES x HIDDEN`, `second` is
/// `HIDDEN x OUTPUTS`.
#[derive(Debug, Clone, PartialEq)]
struct Weights {
    first: Vec<f32>,
    second: Vec<f32>,
}

impl Weights {
    /// Small pseudo-random weights, the same on every rank (a two-layer linear model
    /// started from zeros would never move: each layer's gradient is the other's times
    /// something).
    fn initial() -> Weights {
        let layer = |rows: usize, cols: usize, salt: u64| -> Vec<f32> {
            let scale = 1.0 / (rows as f32).sqrt();
            (0..rows * cols)
                .map(|i| scale * unit(i / cols, i % cols, salt))
                .collect()
        };
        Weights {
            first: layer(FEATURES, HIDDEN, 3),
            second: layer(HIDDEN, OUTPUTS, 4),
        }
    }

    /// Every weight, the first layer's then the second's.
    fn values(&self) -> impl Iterator<Item = &f32> {
        self.first.iter().chain(&self.second)
    }
}

/// A rank's intermediate results in a step: the hidden activations `h = x w1`, the
/// output `y = h w2` (then its residual), and the hidden layer's gradient `dh`.
struct Activations<M> {
    h: M,
    y: M,
    dh: M,
}

impl<M> Activations<M> {
    /// The activations of a step on `m` rows and the two gradients (the first layer's,
    /// the second's), each from `alloc` (a scope's or a capture's).
    fn alloc(m: usize, mut alloc: impl FnMut(usize) -> Result<M>) -> Result<(Self, [M; 2])> {
        let act = Activations {
            h: alloc(m * HIDDEN)?,
            y: alloc(m * OUTPUTS)?,
            dh: alloc(m * HIDDEN)?,
        };
        let grads = [alloc(FEATURES * HIDDEN)?, alloc(HIDDEN * OUTPUTS)?];
        Ok((act, grads))
    }
}

// A training step is `forward`, the sum of the second layer's gradient over the ranks
// beside `backward_first_layer`, the sum of the first layer's, then `update`: each the
// same whether `s` runs it (a scope) or records it into a graph (a capture).

/// The forward pass and the second layer's gradient, for the mean squared error:
/// `h = x w1`, `y = h w2`, the residual `y -= target`, `grad2 = h^T y / batch`.
fn forward<'s, M: DeviceMemoryMut<'s, f32>>(
    s: &'s impl Enqueue<'s>,
    blas: &mut Cublas,
    (x, target, batch): (&impl F32s<'s>, &impl F32s<'s>, usize),
    (w1, w2): (&impl F32s<'s>, &impl F32s<'s>),
    act: &mut Activations<M>,
    grad2: &mut impl DeviceMemoryMut<'s, f32>,
) -> Result<()> {
    let rows = (x.len() / FEATURES) as u32;
    let (f, h, o) = (FEATURES as u32, HIDDEN as u32, OUTPUTS as u32);
    blas.sgemm(s, rows, h, f, 1.0, x, w1, 0.0, &mut act.h)?;
    blas.sgemm(s, rows, o, h, 1.0, &act.h, w2, 0.0, &mut act.y)?;
    kernels::axpy(s, -1.0, target, &mut act.y)?;
    // `h^T y`: `h` read transposed in place (`Op::T`), as cuBLAS and the tiled kernel can.
    let scale = 1.0 / batch as f32;
    blas.sgemm_op(s, T, N, h, o, rows, scale, &act.h, &act.y, 0.0, grad2)
}

/// The first layer's gradient: `dh = y w2^T`, `grad1 = x^T dh / batch` (`act.y` is the
/// residual [`forward`] left).
fn backward_first_layer<'s, M: DeviceMemoryMut<'s, f32>>(
    s: &'s impl Enqueue<'s>,
    blas: &mut Cublas,
    x: &impl F32s<'s>,
    batch: usize,
    w2: &impl F32s<'s>,
    act: &mut Activations<M>,
    grad1: &mut impl DeviceMemoryMut<'s, f32>,
) -> Result<()> {
    let rows = (x.len() / FEATURES) as u32;
    let (f, h, o) = (FEATURES as u32, HIDDEN as u32, OUTPUTS as u32);
    let scale = 1.0 / batch as f32;
    blas.sgemm_op(s, N, T, rows, h, o, 1.0, &act.y, w2, 0.0, &mut act.dh)?;
    blas.sgemm_op(s, T, N, f, h, rows, scale, x, &act.dh, 0.0, grad1)
}

/// The updates `w -= LEARNING_RATE grad` of both layers.
fn update<'s>(
    s: &'s impl Enqueue<'s>,
    (w1, w2): (
        &mut impl DeviceMemoryMut<'s, f32>,
        &mut impl DeviceMemoryMut<'s, f32>,
    ),
    (grad1, grad2): (&impl F32s<'s>, &impl F32s<'s>),
) -> Result<()> {
    kernels::axpy(s, -LEARNING_RATE, grad1, w1)?;
    kernels::axpy(s, -LEARNING_RATE, grad2, w2)
}

/// What a step reads: device memory of `f32`s of the scope or capture `'s`.
trait F32s<'s>: DeviceMemory<'s, f32> {}
impl<'s, M: DeviceMemory<'s, f32>> F32s<'s> for M {}

/// How long a rank's training took: its first step (the kernels' loads and NCCL's
/// connection setup included), and each later one on average.
#[derive(Debug, Clone, Copy, Default)]
struct StepTimes {
    first: Duration,
    per_step: Duration,
}

/// A value in [-1, 1) for position (`row`, `col`) of the array `salt` names: the same on
/// every rank.
fn unit(row: usize, col: usize, salt: u64) -> f32 {
    let mut h = (row as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (col as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ salt;
    h ^= h >> 31;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 29;
    (h >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// Rows `rows` of the global batch: inputs in [-1, 1) and targets, the same whichever
/// rank makes them.
fn batch_rows(rows: std::ops::Range<usize>) -> (Vec<f32>, Vec<f32>) {
    let x: Vec<f32> = rows
        .clone()
        .flat_map(|r| (0..FEATURES).map(move |c| unit(r, c, 1)))
        .collect();
    let target: Vec<f32> = rows
        .flat_map(|r| (0..OUTPUTS).map(move |c| unit(r, c, 2)))
        .collect();
    (x, target)
}

/// Compares `weights` with one GPU's training on the whole batch of `ranks` ranks: the
/// largest difference must be a small part of the largest change training made to a
/// weight (the weights themselves are mostly their initial values), and every weight
/// finite.
fn check(device: &Device, ranks: usize, weights: &Weights, elapsed: StepTimes) -> Result<bool> {
    let batch = ranks * ROWS_PER_RANK;
    let (reference, _) = train(device, 0..batch, batch, None)?;
    let largest_gap = |a: &Weights, b: &Weights| {
        a.values()
            .zip(b.values())
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
    };
    let change = largest_gap(&reference, &Weights::initial());
    let worst = largest_gap(weights, &reference);
    let finite = weights
        .values()
        .chain(reference.values())
        .all(|v| v.is_finite());
    let ok = finite && change > 0.0 && worst <= 1e-4 * change;
    println!(
        "data_parallel: {ranks} rank(s), {STEPS} steps of {ROWS_PER_RANK} rows each: the first in {:.1} ms \
         (NCCL's connections, and under a launcher the kernels' loads), then {:.0} us per step; \
         weights vs one GPU on the whole batch: largest difference {worst:.3e} (largest change in training {change:.3e}): {}",
        elapsed.first.as_secs_f64() * 1e3,
        elapsed.per_step.as_secs_f64() * 1e6,
        if ok { "match" } else { "MISMATCH" }
    );
    Ok(ok)
}
