//! `bench`: this library vs raw `cudarc::driver::result` calls vs cudarc's safe API,
//! measured side by side in one run on one GPU (issues 6, 13, 14 and 17).
//!
//! ```text
//! bench [--quick] [--repeat N] [--case NAME[,NAME...]]... [--json PATH] [--device N] [--kernel-ratio R] [--list]
//! ```
//!
//! Every measurement runs each implementation interleaved with the others, after a
//! warm-up, in `--repeat` rounds (default 5; 2 with `--quick`): round 1 of every
//! implementation, then round 2, and so on. A round's figure is the median of its
//! samples: GPU time from CUDA events where the GPU does the work, host time where the
//! cost of enqueuing is the point. The table gives each implementation's median over the
//! rounds, ours/raw per round (its min, median and max over the rounds), and PASS/MISS
//! against the issues' targets, judged on both the median and the worst round; the JSON
//! file holds every sample of every round, tagged by round.
//!
//! The three implementations:
//! * **ours**: `stream_core` scopes, forks, kernel wrappers, pinned buffers.
//! * **raw**: `cudarc::driver::result` calls in the same pattern (events for
//!   cross-stream ordering, stream-ordered allocation), no safety bookkeeping.
//! * **cudarc**: cudarc's safe API (`CudaStream`, `CudaSlice`, `launch_builder`), on its
//!   default stream ("1s": a context object with no streams of its own, so no event
//!   tracking) and on streams of its own ("2s": a second context object with
//!   `new_stream`s, so every argument is tracked with events).

mod args;
mod bandwidth;
mod cuda;
mod env;
mod error;
mod graph_loop;
mod graphs;
mod half_gemm;
mod json;
mod launch;
mod managed;
mod managed_raw;
mod measurement;
mod memory_bound;
mod nccl;
mod pageable;
mod peer_copy;
mod peers;
mod pipeline;
mod ranks;
mod raw;
mod report;
mod sampling;
mod scope_cost;
mod serve;
mod sgemm;
mod threads;
mod trace_cost;

use crate::args::Command;
use crate::env::Env;
use crate::error::Result;
use crate::report::Report;
use crate::sampling::Config;

/// A case: its name on the command line, what it measures, and its entry point.
#[derive(Debug)]
struct Case {
    name: &'static str,
    what: &'static str,
    run: fn(&Env, &mut Report) -> Result<()>,
}

const CASES: [Case; 16] = [
    Case {
        name: "launch",
        what: "1. launch enqueue cost of a tiny kernel (host time)",
        run: launch::run,
    },
    Case {
        name: "bandwidth",
        what: "2. pinned host-to-device and device-to-host bandwidth (GPU time)",
        run: bandwidth::run,
    },
    Case {
        name: "pageable",
        what: "3. pageable copies both ways: the library's staged path vs pinned DMA, the host memcpy and the driver's path (host time)",
        run: pageable::run,
    },
    Case {
        name: "pipeline",
        what:
            "4. chunked upload/kernel/download on 1, 2, 4 streams vs the overlap bound (GPU time)",
        run: pipeline::run,
    },
    Case {
        name: "threads",
        what: "5. four threads with a stream each vs one thread (host time)",
        run: threads::run,
    },
    Case {
        name: "scope",
        what: "6. scope enter/exit, fork/join, allocation+free (host time)",
        run: scope_cost::run,
    },
    Case {
        name: "sgemm",
        what: "7. tiled and cuBLAS SGEMM GFLOP/s (GPU time), and the enqueue cost of small cuBLAS GEMMs (host time)",
        run: sgemm::run,
    },
    Case {
        name: "managed",
        what: "8. managed memory: explicit pinned copies vs demand paging vs prefetches, end-to-end (host time) and kernel only (GPU time)",
        run: managed::run,
    },
    Case {
        name: "serve",
        what: "9. async server loop (run_owned futures) vs thread-per-stream at the same load; cost of one async operation (host time)",
        run: serve::run,
    },
    Case {
        name: "graphs",
        what: "10. 100 small kernels launched one by one vs replayed from a CUDA graph (host and GPU time); a loop of replays of a short graph, chained or waited each step (host time)",
        run: graphs::run,
    },
    Case {
        name: "nccl",
        what: "11. NCCL all_reduce bus bandwidth 8 B to 1 GiB over every GPU (at most two), a data-parallel step with its all_reduce overlapped on a fork (also replayed as graphs), and the enqueue cost of one small collective: ours vs raw NCCL calls (host time)",
        run: nccl::run,
    },
    Case {
        name: "hgemm",
        what: "12. cuBLAS bf16 and f16 GEMM TFLOP/s with f32 accumulation, 4096^3 and 8192^3 (GPU time): ours vs raw cublasGemmEx",
        run: half_gemm::run,
    },
    Case {
        name: "peer",
        what: "13. copies between two GPUs, 64 MiB to 1 GiB both ways (GPU time): ours (copy_device in a fork onto the other GPU) vs raw cuMemcpyPeerAsync",
        run: peer_copy::run,
    },
    Case {
        name: "trace",
        what: "14. the trace recorder's host cost: launches and forks in untraced and traced scopes vs raw (host time)",
        run: trace_cost::run,
    },
    Case {
        name: "peers",
        what: "15. the same operations through PyTorch and CuPy (where Python imports them), interleaved with ours on the same GPU: launch, copies, synchronisation, fork + join, allocation, graph replay, SGEMM, all_reduce",
        run: peers::run,
    },
    Case {
        name: "membound",
        what: "16. memory-bound kernels: axpy and dot of 64 Mi f32, transpose of 8192x8192 f32 (GPU time, GB/s): ours (the kernels crate) vs raw cuBLAS saxpy, sdot and sgeam, and a device-to-device copy as the ceiling",
        run: memory_bound::run,
    },
];

fn main() {
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(Command::Run(a)) => a,
        Ok(Command::List) => {
            print!("{}", args::case_list());
            return;
        }
        Ok(Command::Help) => {
            println!("{}", args::USAGE);
            return;
        }
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::exit(2);
        }
    };
    let cfg = Config {
        quick: args.quick,
        kernel_ratio: args.kernel_ratio,
        repeat: args.repeat,
    };
    let (env, header) = match Env::open(args.device, cfg) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("bench: {e}");
            if e.is_no_gpu() {
                eprintln!(
                    "bench: the benchmark needs an NVIDIA GPU and its driver; none was found."
                );
            }
            std::process::exit(1);
        }
    };
    let mut report = Report {
        header,
        ..Report::default()
    };
    // BENCH_STAGING_RING=N: this run's staged copies use a ring of N blocks (the other
    // staging settings stay this machine's), to compare ring depths in the pageable
    // case's own rows.
    if let Some(ring) = std::env::var("BENCH_STAGING_RING")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        stream_core::staging::set_staging_config(stream_core::staging::StagingConfig {
            ring_blocks: ring,
            ..stream_core::staging::StagingConfig::for_this_machine()
        });
        report
            .header
            .push(("staging_ring".to_owned(), ring.to_string()));
    }
    // BENCH_STREAMING_STORES=never|downloads|tails|always: which staged copies of this
    // run write with streaming stores (the library's default: tails, i.e. downloads and
    // the last chunks of uploads), to compare the settings in the pageable case's rows.
    let streaming = pageable::streaming_stores_of_this_run().unwrap_or_else(|e| {
        eprintln!("bench: {e}");
        std::process::exit(2);
    });
    if let Some(setting) = streaming {
        stream_core::staging::set_streaming_stores(setting);
        report
            .header
            .push(("streaming_stores".to_owned(), format!("{setting:?}")));
    }
    for (k, v) in &report.header {
        println!("{k}: {v}");
    }
    let start = std::time::Instant::now();
    for case in &args.cases {
        println!(
            "\n== {} ({:.1} s)",
            case.what,
            start.elapsed().as_secs_f64()
        );
        if let Err(e) = (case.run)(&env, &mut report) {
            eprintln!("bench: case {} failed: {e}", case.name);
            report.errors.push((case.name.to_owned(), e.to_string()));
        }
    }
    let total = start.elapsed().as_secs_f64();
    report
        .header
        .push(("run_seconds".to_owned(), format!("{total:.1}")));
    println!("\n{}", report.table());
    println!("total {total:.1} s");
    let mut failed = !report.errors.is_empty();
    match std::fs::write(&args.json, report.json()) {
        Ok(()) => println!("figures written to {}", args.json),
        Err(e) => {
            eprintln!("bench: could not write {}: {e}", args.json);
            failed = true;
        }
    }
    drop(env);
    if failed {
        std::process::exit(1);
    }
}
