//! Case 15: the peers in the same table. Where Python can import PyTorch (and CuPy),
//! the same measurements made through them, in the same run on the same GPU: a Python
//! process per framework (`benchmarks/peers/peer_server.py`) answers one sample per
//! request, so its samples interleave with ours round by round, exactly as raw calls'
//! do in the other cases. A row's `raw` column is the peer its name ends with, and
//! ours/raw is ours/PyTorch or ours/CuPy.
//!
//! Without Python, or without a framework, its rows are absent and a note says why;
//! a measurement one framework cannot make here (CuPy without NCCL, say) is a note too.
//! `BENCH_PYTHON` names the interpreter (default `python3`).

mod ours;
mod peer_process;

use crate::env::Env;
use crate::error::Result;
use crate::measurement::Measurement;
use crate::report::{Better, Report, Row};
use ours::Ours;
use peer_process::{Answer, PeerProcess, Started};

/// One measurement both sides make: the key the peer knows it by, what it is, its unit.
struct Peered {
    key: &'static str,
    what: &'static str,
    unit: &'static str,
    better: Better,
    /// Also in a `--quick` run.
    quick: bool,
}

const fn peered(
    key: &'static str,
    what: &'static str,
    unit: &'static str,
    better: Better,
    quick: bool,
) -> Peered {
    Peered {
        key,
        what,
        unit,
        better,
        quick,
    }
}

/// Every measurement, in table order.
const MEASUREMENTS: [Peered; 19] = [
    peered(
        "launch",
        "launch a tiny kernel (fill one element), batches of 256",
        "ns/launch",
        Better::Lower,
        true,
    ),
    peered(
        "sync_idle",
        "wait for an idle stream (ours: scope enter + exit; peer: synchronize)",
        "ns",
        Better::Lower,
        true,
    ),
    peered(
        "fork_join",
        "order a second stream after the first and back (ours: fork + join)",
        "ns",
        Better::Lower,
        true,
    ),
    peered(
        "alloc_free",
        "allocate + free 1 MiB of device memory",
        "ns",
        Better::Lower,
        true,
    ),
    peered(
        "pinned_upload_64",
        "upload 64 MiB from pinned memory, until landed",
        "GB/s",
        Better::Higher,
        true,
    ),
    peered(
        "pinned_download_64",
        "download 64 MiB into pinned memory, until landed",
        "GB/s",
        Better::Higher,
        true,
    ),
    peered(
        "pageable_upload_64",
        "upload 64 MiB from pageable memory, until landed",
        "GB/s",
        Better::Higher,
        true,
    ),
    peered(
        "pageable_download_64",
        "download 64 MiB into pageable memory, until landed",
        "GB/s",
        Better::Higher,
        true,
    ),
    peered(
        "pageable_upload_1024",
        "upload 1 GiB from pageable memory, until landed",
        "GB/s",
        Better::Higher,
        false,
    ),
    peered(
        "pageable_download_1024",
        "download 1 GiB into pageable memory, until landed",
        "GB/s",
        Better::Higher,
        false,
    ),
    peered(
        "graph_replay",
        "replay a graph of 100 tiny kernels, 10 replays (host time of the calls, per kernel)",
        "ns/kernel",
        Better::Lower,
        true,
    ),
    peered(
        "graph_loop",
        "50 replays of a graph of 4 tiny kernels back to back, one wait (host time per replay, until done)",
        "us",
        Better::Lower,
        true,
    ),
    peered(
        "graph_all_gathers",
        "replay a graph of 32 all_gathers of 64 KiB f32, one rank (a copy each), 10 replays (host time of the calls, per replay)",
        "us",
        Better::Lower,
        true,
    ),
    peered(
        "sgemm",
        "cuBLAS SGEMM 4096^3, 3 calls until done (no TF32)",
        "GFLOP/s",
        Better::Higher,
        true,
    ),
    peered(
        "kernel_axpy",
        "axpy of 64 Mi f32 (y += a x), 5 calls until done",
        "GB/s",
        Better::Higher,
        true,
    ),
    peered(
        "kernel_dot",
        "dot of 64 Mi f32, 5 calls until done",
        "GB/s",
        Better::Higher,
        true,
    ),
    peered(
        "kernel_transpose",
        "transpose of 8192x8192 f32 into another matrix, 5 calls until done",
        "GB/s",
        Better::Higher,
        true,
    ),
    peered(
        "barrier",
        "barrier, one rank: host time each (CuPy has none: allReduce of one f32, synchronised)",
        "us",
        Better::Lower,
        true,
    ),
    peered(
        "all_reduce_64",
        "all_reduce 64 MiB f32 in place, one rank (no data moves): host time per call, 5 calls until done",
        "us",
        Better::Lower,
        true,
    ),
];

/// The frameworks, as the peer script and the table name them.
const FRAMEWORKS: [(&str, &str); 2] = [("torch", "PyTorch"), ("cupy", "CuPy")];

/// Runs case 15.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    let python = std::env::var("BENCH_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let cfg = env.cfg;
    let mut graph_buf = env.dev.alloc_vec::<f32>(1)?;
    let mut loop_buf = env.dev.alloc_vec::<f32>(1)?;
    let gather_in = env.dev.alloc_vec::<f32>(ours::GRAPH_ALL_GATHER_ELEMENTS)?;
    let mut gather_out = env.dev.alloc_vec::<f32>(ours::GRAPH_ALL_GATHER_ELEMENTS)?;
    let mut ours = Ours::new(
        &env.dev,
        &mut graph_buf,
        &mut loop_buf,
        (&gather_in, &mut gather_out),
    )?;
    for (framework, name) in FRAMEWORKS {
        let mut peer =
            match PeerProcess::start(&python, framework, env.dev.ordinal(), ours::LOOP_SIZES)? {
                Started::Ready(peer, version) => {
                    println!("peers: {name} {version} ({python})");
                    rep.note(format!("peers: {name} {version}, through {python}"));
                    peer
                }
                Started::Absent(why) => {
                    println!("peers: {name} absent: {why}");
                    rep.note(format!("peers: no {name} rows: {why}"));
                    continue;
                }
            };
        for m in MEASUREMENTS.iter().filter(|m| m.quick || !cfg.quick) {
            // One probe first: it is also the peer's first use of the operation (its
            // compilation, its allocator's first block), before the plan's warm-up.
            // A peer's failure (its framework raising, say) leaves its row out with a
            // note: it says nothing about this library, and the other rows still run.
            let why = match peer.sample(m.key) {
                Ok(Answer::Figure(_)) => None,
                Ok(Answer::Absent(why)) => Some(why),
                Err(e) => Some(format!("the peer failed: {e}")),
            };
            if let Some(why) = why {
                println!("peers: {name}: no row for {}: {why}", m.key);
                rep.note(format!("peers: {name}: no row for \"{}\": {why}", m.what));
                continue;
            }
            let samples = if m.key.contains("1024") { 5 } else { 15 };
            let row = Measurement::new()
                .ours("ours", || ours.sample(m.key))
                .raw(name, || peer.figure(m.key))
                .into_row(
                    cfg.plan(2, cfg.pick(samples, 3)),
                    Row::new("peers", format!("{} vs {name}", m.what), m.unit, m.better),
                )?;
            rep.push(row);
        }
    }
    rep.note(
        "peers: the raw column of a peers row is the framework its name ends with (a Python \
         process of its own on the same GPU, its samples interleaved with ours); ours/raw is \
         ours/PyTorch or ours/CuPy. Copies, SGEMM, the kernels and all_reduce are host time \
         until the result is usable; the rest host time per operation",
    );
    Ok(())
}
