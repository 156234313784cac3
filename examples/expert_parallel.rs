//! Expert parallelism, the exchange of a mixture-of-experts layer: each GPU holds one
//! expert (a `DIM x DIM` linear map) and a batch of tokens, each token routed to one
//! expert. A step exchanges how many tokens each rank sends each other rank
//! (`all_to_all` of the counts), sends the tokens to their experts (`all_to_all_v`),
//! applies each expert to the tokens it received (an SGEMM), and sends the results back
//! (`all_to_all_v` with the counts swapped). Every rank then checks its tokens' results
//! against the CPU.
//!
//! ```sh
//! cargo run --release --example expert_parallel            # one process, one thread per visible GPU
//! torchrun --no-python --nproc-per-node=2 target/release/examples/expert_parallel   # one process per GPU
//! ```
//!
//! It needs an NVIDIA GPU and the NCCL library, and says so when either is missing.

use std::time::{Duration, Instant};

use stream_core::nccl::Communicator;
use stream_core::{scope, Device, DeviceVec, Error, Result, Stream};

/// Runs each rank, under a launcher or on a thread per GPU (shared with the other
/// several-GPU example).
mod ranks;

/// Elements per token, tokens per rank, steps.
const DIM: usize = 64;
const TOKENS: usize = 4096;
const STEPS: usize = 40;

fn main() {
    ranks::run("expert_parallel", |device, comm| {
        Ok(report(comm, &run_rank(device, comm)?))
    });
}

/// What a rank saw: its tokens' results against the CPU, and the steps' times.
struct Outcome {
    sent: Vec<usize>,
    received: usize,
    worst: f32,
    scale: f32,
    first: Duration,
    /// The median of the later steps: a step waits on the host for the counts, and the
    /// mean of nine steps moved between 400 and 900 us across runs of one build on two
    /// H200s (`benchmarks/results/2026-11-27-h200x2-expert-parallel-ab.txt`).
    per_step: Duration,
}

/// Prints the rank's line; `true` when its results match the CPU.
fn report(comm: &Communicator, o: &Outcome) -> bool {
    let ok = o.worst <= 1e-5 * o.scale.max(1e-6) && o.scale > 0.0;
    println!(
        "expert_parallel: rank {} of {}: sent {:?} tokens to the experts, received {}; \
         the first step in {:.1} ms, then {:.0} us per step (median); results vs the CPU: largest \
         difference {:.3e} (largest value {:.3e}): {}",
        comm.rank(),
        comm.size(),
        o.sent,
        o.received,
        o.first.as_secs_f64() * 1e3,
        o.per_step.as_secs_f64() * 1e6,
        o.worst,
        o.scale,
        if ok { "match" } else { "MISMATCH" }
    );
    ok
}

/// Rank `comm.rank()`'s part: its tokens, sorted by the expert (rank) they go to, through
/// [`STEPS`] steps, and the last step's results checked against the CPU.
fn run_rank(device: &Device, comm: &Communicator) -> Result<Outcome> {
    let (rank, ranks) = (comm.rank(), comm.size());
    let tokens = tokens_of(rank);
    let expert_of: Vec<usize> = (0..TOKENS).map(|t| route(rank, t, ranks)).collect();
    // Tokens in the order of their experts: the send buffer is contiguous per rank.
    let mut order: Vec<usize> = (0..TOKENS).collect();
    order.sort_by_key(|&t| expert_of[t]);
    let sorted: Vec<f32> = order
        .iter()
        .flat_map(|&t| tokens[t * DIM..(t + 1) * DIM].iter().copied())
        .collect();
    let mut sent = vec![0usize; ranks];
    for &e in &expert_of {
        sent[e] += 1;
    }
    // The expert's weights stay on the GPU for every step: uploaded once.
    let weights = device.upload_vec(&expert_weights(rank))?;
    let stream = device.new_stream()?;
    // The tokens and their results cross the bus every step: pinned buffers, made once,
    // so each copy is one DMA (from pageable memory the step took twice as long).
    let mut results = device.alloc_pinned::<f32>(TOKENS * DIM)?;
    let mut sorted_pinned = device.alloc_pinned::<f32>(sorted.len())?;
    sorted_pinned.copy_from_slice(&sorted);
    let mut received = 0;
    let mut steps = Vec::with_capacity(STEPS);
    for _ in 0..STEPS {
        let start = Instant::now();
        received = step_once(&stream, comm, &sorted_pinned, &sent, &weights, &mut results)?;
        steps.push(start.elapsed());
    }
    let first = steps[0];
    let mut later = steps[1..].to_vec();
    later.sort();
    let per_step = later.get(later.len() / 2).copied().unwrap_or(first);
    // Back in the tokens' own order, against the CPU's x W_e.
    let (mut worst, mut scale) = (0f32, 0f32);
    for (i, &t) in order.iter().enumerate() {
        let want = apply(
            &expert_weights(expert_of[t]),
            &tokens[t * DIM..(t + 1) * DIM],
        );
        for (got, want) in results[i * DIM..(i + 1) * DIM].iter().zip(&want) {
            worst = worst.max((got - want).abs());
            scale = scale.max(want.abs());
        }
    }
    Ok(Outcome {
        sent,
        received,
        worst,
        scale,
        first,
        per_step,
    })
}

/// One step: counts, dispatch, the expert, combine. `results` receives this rank's
/// tokens' results, in the order of `sorted`; returns how many tokens this rank's expert
/// processed.
fn step_once(
    stream: &Stream,
    comm: &Communicator,
    sorted: &[f32],
    sent: &[usize],
    weights: &DeviceVec<f32>,
    results: &mut [f32],
) -> Result<usize> {
    let ranks = comm.size();
    let send_counts: Vec<u64> = sent.iter().map(|&n| n as u64).collect();
    let mut recv_counts = vec![0u64; ranks];
    let send_elems: Vec<usize> = sent.iter().map(|n| n * DIM).collect();
    let mut received = 0;
    scope(stream, |s| {
        // How many tokens each rank sends this one: one count per rank, both ways.
        let counts = s.upload(&send_counts)?;
        let mut incoming = s.alloc::<u64>(ranks)?;
        s.all_to_all(comm, &counts, &mut incoming)?;
        let incoming = s.copy_to_host(&incoming, &mut recv_counts)?.wait()?;
        let recv_elems: Vec<usize> = incoming.iter().map(|&n| n as usize * DIM).collect();
        received = incoming.iter().sum::<u64>() as usize;

        // Dispatch: this rank's tokens to their experts.
        let x = s.upload(sorted)?;
        let mut mine = s.alloc::<f32>(received * DIM)?;
        s.all_to_all_v(comm, &x, &send_elems, &mut mine, &recv_elems)?;

        // The expert: y = x W on the tokens it received (none is a valid share).
        let w = s.attach_ref(weights)?;
        let mut y = s.alloc::<f32>(received * DIM)?;
        if received > 0 {
            let (m, n) = (received as u32, DIM as u32);
            kernels::sgemm_tiled(s, m, n, n, 1.0, &mine, &w, 0.0, &mut y)?;
        }

        // Combine: the results back to the tokens' ranks, in the order they were sent.
        let mut back = s.alloc::<f32>(TOKENS * DIM)?;
        s.all_to_all_v(comm, &y, &recv_elems, &mut back, &send_elems)?;
        s.copy_to_host(&back, results)?.wait()?;
        Ok::<_, Error>(())
    })?;
    Ok(received)
}

/// The expert (rank) of token `t` of rank `rank`: uneven on purpose, so the counts
/// differ per pair of ranks.
fn route(rank: usize, t: usize, ranks: usize) -> usize {
    let h = hash(rank as u64 * 0x1_0000 + t as u64);
    // Half the tokens go to expert `rank + 1`, the rest anywhere.
    if h & 1 == 0 {
        (rank + 1) % ranks
    } else {
        (h >> 8) as usize % ranks
    }
}

/// Rank `rank`'s tokens, `TOKENS x DIM`, values in [-1, 1).
fn tokens_of(rank: usize) -> Vec<f32> {
    (0..TOKENS * DIM)
        .map(|i| unit(hash((rank as u64) << 40 | i as u64)))
        .collect()
}

/// Expert `e`'s weights, `DIM x DIM` row-major, small values in [-1/8, 1/8).
fn expert_weights(e: usize) -> Vec<f32> {
    (0..DIM * DIM)
        .map(|i| unit(hash(0xE0E0_0000_0000 + ((e as u64) << 20) + i as u64)) / 8.0)
        .collect()
}

/// `x W` for one token on the CPU (f64 sums, rounded once).
fn apply(w: &[f32], x: &[f32]) -> Vec<f32> {
    (0..DIM)
        .map(|j| {
            (0..DIM)
                .map(|k| x[k] as f64 * w[k * DIM + j] as f64)
                .sum::<f64>() as f32
        })
        .collect()
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
