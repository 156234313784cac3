//! Pipeline parallelism, the forward pass of a model cut into stages: each GPU holds one
//! layer (a `DIM x DIM` linear map) and the batch goes through the GPUs in turn, in
//! micro-batches. A stage receives a micro-batch's activations from the stage before
//! (`recv`), applies its layer (a cuBLAS SGEMM) and sends the result on (`send`), all on
//! its scope's stream, so that stage 1 works on micro-batch `i` while stage 0 already
//! works on `i + 1`. Every stage times a pass of the batch in [`MICRO`] micro-batches and
//! as one piece; the last stage checks rows of each result against the CPU. Each stage
//! launches its kernels once before its first collective ([`warm_up`]): in one process,
//! a kernel's first launch can otherwise stop the pipeline for good.
//!
//! ```sh
//! cargo run --release --example pipeline_parallel      # one process, one thread per visible GPU
//! torchrun --no-python --nproc-per-node=2 target/release/examples/pipeline_parallel   # one process per GPU
//! ```
//!
//! It needs an NVIDIA GPU and the NCCL library, and says so when either is missing. On
//! one GPU the one stage is the whole model (and the passes differ only in how many
//! SGEMMs they take).

use std::time::{Duration, Instant};

use kernels::Cublas;
use stream_core::nccl::Communicator;
use stream_core::{scope, Device, DeviceBuffer, DeviceMemory, Error, Result, Scope};

/// Runs each rank, under a launcher or on a thread per GPU (shared with the other
/// several-GPU example).
mod ranks;

/// Elements per row (a layer is `DIM x DIM`), rows in the batch, micro-batches a pass
/// cuts it into, timed passes of each kind.
const DIM: usize = 2048;
const ROWS: usize = 4096;
const MICRO: usize = 8;
const ROUNDS: usize = 9;

/// The rows the last stage checks against the CPU: the first and last of micro-batches,
/// and one inside.
const CHECKED_ROWS: [usize; 6] = [0, 511, 512, 1337, 2048, ROWS - 1];

fn main() {
    ranks::run("pipeline_parallel", |device, comm| {
        Ok(report(comm, &run_stage(device, comm)?))
    });
}

/// How many micro-batches each kind of pass cuts the batch into: one piece, then
/// [`MICRO`].
const PASSES: [usize; 2] = [1, MICRO];

/// What a stage measured (the median pass of each of [`PASSES`]), and at the last
/// stage, its check: the largest difference from the CPU over both passes' results,
/// and the largest value.
struct Outcome {
    times: [Duration; 2],
    check: Option<(f32, f32)>,
}

/// Prints the stage's line; `true` unless it is the last stage and its results differ
/// from the CPU's. The last stage's times are the batch's: an earlier stage's part ends
/// with its last send, which waits for the next stage to receive it.
fn report(comm: &Communicator, o: &Outcome) -> bool {
    let [whole, pipelined] = o.times.map(|d| d.as_secs_f64() * 1e6);
    let (stage, stages) = (comm.rank(), comm.size());
    let Some((worst, scale)) = o.check else {
        println!(
            "pipeline_parallel: stage {stage} of {stages}: its part of a pass done after \
             {whole:.0} us as one piece, {pipelined:.0} us in {MICRO} micro-batches (median \
             of {ROUNDS})"
        );
        return true;
    };
    let ok = scale > 0.0 && worst <= 1e-4 * scale;
    println!(
        "pipeline_parallel: stage {stage} of {stages} (the last): {ROWS} rows through {stages} \
         {DIM}x{DIM} layers in {whole:.0} us as one piece, {pipelined:.0} us in {MICRO} \
         micro-batches: {:.2}x (median of {ROUNDS}); {} rows of each vs the CPU: largest \
         difference {worst:.3e} (largest value {scale:.3e}): {}",
        whole / pipelined.max(1e-6),
        CHECKED_ROWS.len(),
        if ok { "match" } else { "MISMATCH" }
    );
    ok
}

/// Stage `comm.rank()`: its layer, the batch at the first stage, [`ROUNDS`] passes of
/// each of [`PASSES`] after one of each to warm up (NCCL's connections), each started
/// together on every stage (`barrier`) and timed until this stage's part of it is done.
/// Before the last round's passes every stage poisons what they write (a part a pass
/// left alone would still hold the same values from the pass before), and the last
/// stage checks each one's result.
fn run_stage(device: &Device, comm: &Communicator) -> Result<Outcome> {
    let (stage, stages) = (comm.rank(), comm.size());
    let last = stage + 1 == stages;
    let weights = device.upload_vec(&layer(stage))?;
    // The batch enters at the first stage and leaves at the last: pinned memory, so
    // each copy is one DMA (one unused element at the other stages).
    let mut batch = device.alloc_pinned::<f32>(if stage == 0 { ROWS * DIM } else { 1 })?;
    if stage == 0 {
        batch.copy_from_slice(&batch_values());
    }
    let mut result = device.alloc_pinned::<f32>(if last { ROWS * DIM } else { 1 })?;
    let mut result = &mut result[..];
    let stream = device.new_stream()?;
    let mut blas = Cublas::new(device)?;
    let mut times: [Vec<Duration>; 2] = Default::default();
    let mut check: Option<(f32, f32)> = None;
    let mut probe = [0f32];
    let mut probe = &mut probe[..];
    scope(&stream, |s| {
        let w = s.attach_ref(&weights)?;
        // The stage's input: the batch at the first stage, what it receives elsewhere.
        let mut input = match stage {
            0 => s.upload(&batch)?,
            _ => s.alloc_zeroed::<f32>(ROWS * DIM)?,
        };
        let mut output = s.alloc::<f32>(ROWS * DIM)?;
        warm_up(s, &mut blas, &w, &input, &mut output)?;
        for round in 0..=ROUNDS {
            let checked = round == ROUNDS;
            for (kind, micro) in PASSES.into_iter().enumerate() {
                if checked {
                    s.fill(&mut output, f32::NAN)?;
                    if stage > 0 {
                        s.fill(&mut input, f32::NAN)?;
                    }
                }
                comm.barrier()?;
                let start = Instant::now();
                pass(s, &mut blas, comm, &w, &mut input, &mut output, micro)?;
                // The pass's end on this stage: its stream got past its last call (the
                // wait hands `probe` back for the next pass).
                probe = s.copy_to_host(&output.slice(..1)?, probe)?.wait()?;
                if round > 0 {
                    times[kind].push(start.elapsed());
                }
                if checked && last {
                    result = s.copy_to_host(&output, result)?.wait()?;
                    let (worst, scale) = compare(result, stages);
                    let (w0, s0) = check.unwrap_or((0.0, 0.0));
                    check = Some((w0.max(worst), s0.max(scale)));
                }
            }
        }
        Ok::<_, Error>(())
    })?;
    Ok(Outcome {
        times: times.map(median),
        check,
    })
}

/// Launches every kernel of the passes once, before this stage's first collective.
///
/// CUDA loads a kernel at its first launch (lazy loading, its default since 12.2), and
/// loading may wait for the GPU to be idle. In one process driving several GPUs, a GPU
/// busy with a receive that waits for another GPU's send, whose thread is loading a
/// kernel of its own, never gets idle: without this warm-up, 4 of 9 runs of this
/// example in one process on two H200s hung at the first pass of a new SGEMM shape.
/// (`CUDA_MODULE_LOADING=EAGER` does the same for every kernel of the process; one
/// process per GPU does not need it.)
fn warm_up<'s>(
    s: &'s Scope<'s, '_>,
    blas: &mut Cublas,
    w: &impl DeviceMemory<'s, f32>,
    input: &DeviceBuffer<'s, f32>,
    output: &mut DeviceBuffer<'s, f32>,
) -> Result<()> {
    let n = DIM as u32;
    for micro in [MICRO, 1] {
        let rows = ROWS / micro;
        let (x, mut y) = (input.slice(..rows * DIM)?, output.slice_mut(..rows * DIM)?);
        blas.sgemm(s, rows as u32, n, n, 1.0, &x, w, 0.0, &mut y)?;
    }
    Ok(())
}

/// One pass of the batch through this stage in `micro` micro-batches: for each, receive
/// it from the stage before (but at the first stage), apply the layer, send the result
/// to the stage after (but at the last). All on `s`'s stream, so stream order alone, with
/// no host wait, keeps the SGEMM from reading a part before its receive has filled it,
/// and the next pass from writing a part before its send has read it.
fn pass<'s>(
    s: &'s Scope<'s, '_>,
    blas: &mut Cublas,
    comm: &'s Communicator,
    w: &impl DeviceMemory<'s, f32>,
    input: &mut DeviceBuffer<'s, f32>,
    output: &mut DeviceBuffer<'s, f32>,
    micro: usize,
) -> Result<()> {
    let (stage, stages) = (comm.rank(), comm.size());
    let rows = ROWS / micro;
    let n = DIM as u32;
    for i in 0..micro {
        let part = i * rows * DIM..(i + 1) * rows * DIM;
        if stage > 0 {
            s.recv(comm, &mut input.slice_mut(part.clone())?, stage - 1)?;
        }
        let mut out = output.slice_mut(part.clone())?;
        let x = input.slice(part)?;
        blas.sgemm(s, rows as u32, n, n, 1.0, &x, w, 0.0, &mut out)?;
        if stage + 1 < stages {
            s.send(comm, &out, stage + 1)?;
        }
    }
    Ok(())
}

/// The largest difference between [`CHECKED_ROWS`] of `result` and the CPU's pass of
/// those rows through `stages` layers, and the largest value among them.
fn compare(result: &[f32], stages: usize) -> (f32, f32) {
    let layers: Vec<Vec<f32>> = (0..stages).map(layer).collect();
    let batch = batch_values();
    let (mut worst, mut scale) = (0f32, 0f32);
    for &row in &CHECKED_ROWS {
        let mut x: Vec<f64> = batch[row * DIM..(row + 1) * DIM]
            .iter()
            .map(|&v| v as f64)
            .collect();
        for w in &layers {
            x = (0..DIM)
                .map(|j| (0..DIM).map(|k| x[k] * w[k * DIM + j] as f64).sum())
                .collect();
        }
        for (got, want) in result[row * DIM..(row + 1) * DIM].iter().zip(&x) {
            // A value no pass wrote is still NaN: infinitely wrong (`max` skips NaN).
            let gap = (got - *want as f32).abs();
            worst = worst.max(if gap.is_finite() { gap } else { f32::INFINITY });
            scale = scale.max(want.abs() as f32);
        }
    }
    (worst, scale)
}

/// Stage `stage`'s layer, `DIM x DIM` row-major, scaled so that a row keeps about its
/// size through any number of layers.
fn layer(stage: usize) -> Vec<f32> {
    let scale = (3.0 / DIM as f32).sqrt();
    (0..DIM * DIM)
        .map(|i| scale * unit(hash(((stage as u64 + 1) << 40) | i as u64)))
        .collect()
}

/// The batch, `ROWS x DIM`, values in [-1, 1).
fn batch_values() -> Vec<f32> {
    (0..ROWS * DIM).map(|i| unit(hash(i as u64))).collect()
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

fn hash(mut h: u64) -> u64 {
    h = h.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^= h >> 31;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^ (h >> 29)
}

/// A hash as a value in [-1, 1).
fn unit(h: u64) -> f32 {
    (h >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}
