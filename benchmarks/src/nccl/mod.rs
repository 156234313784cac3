//! Case 11: NCCL all-reduce through this library's collectives vs raw `ncclAllReduce`
//! calls, in one process over every visible GPU (at most two): bus bandwidth from 8 B
//! to 1 GiB (nccl-tests' definition, busbw = algbw × 2(n−1)/n; with one GPU, where it
//! is zero by definition, the rows show algbw), the same for all-to-all against raw
//! grouped sends and receives (`all_to_all.rs`), a step of small all-reduces replayed
//! as a CUDA graph against raw NCCL's captured and eager (`graph_step.rs`; on two GPUs
//! of one thread too, `sibling_graphs.rs`, with `NCCL_GRAPH_REGISTER=0`), a
//! data-parallel step whose gradient all-reduce runs on a fork beside the next kernel
//! against raw streams and events (`overlap.rs`), and the host cost of enqueuing one
//! small collective, and of a barrier, on a communicator of one rank (`enqueue.rs`).
//!
//! Both sides use communicators made with `ncclCommInitAll` over the same devices, their
//! own device memory of the same size, out-of-place sums of `f32`, and on two GPUs one
//! NCCL group per all-reduce pair (ours `nccl::group` from nested scopes). A sample is
//! the host time of `iters` all-reduces enqueued and their streams synchronised, per
//! all-reduce, as nccl-tests times them.
#![allow(unsafe_code)]

mod all_to_all;
mod enqueue;
mod graph_step;
mod ours;
mod overlap;
mod overlap_graphs;
mod raw_ranks;
mod sibling_graphs;

use stream_core::nccl::{self, Communicator};
use stream_core::{Device, Stream};

use crate::env::{size_name, Env, MIB};
use crate::error::Result;
use crate::measurement::Measurement;
use crate::report::{Better, Report, Row, Source};
use ours::{Collective, Ours};
use raw_ranks::RawRanks;

/// Runs case 11.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    if !nccl::is_available() {
        println!("nccl: the NCCL library is not installed on this machine: no rows");
        return Ok(());
    }
    let ranks = Device::count()?.min(2);
    let devices: Vec<Device> = (0..ranks)
        .map(|r| {
            if r == env.dev.ordinal() {
                Ok(env.dev.clone())
            } else {
                Device::new(r)
            }
        })
        .collect::<stream_core::Result<_>>()?;
    println!("nccl: {ranks} rank(s), NCCL {:?}", nccl::version()?);
    let sizes: &[usize] = if env.cfg.quick {
        &[8, MIB, 64 * MIB]
    } else {
        &[
            8,
            64,
            512,
            4096,
            32 << 10,
            256 << 10,
            MIB,
            8 * MIB,
            64 * MIB,
            256 * MIB,
            1024 * MIB,
        ]
    };
    let comms = Communicator::for_devices(&devices)?;
    let streams: Vec<Stream> = devices
        .iter()
        .map(Device::new_stream)
        .collect::<stream_core::Result<_>>()?;
    let raw = RawRanks::new(&devices)?;
    for &bytes in sizes {
        let count = bytes / 4;
        let iters = if bytes >= 64 * MIB {
            5
        } else if bytes >= MIB {
            20
        } else {
            100
        };
        let mut ours = Ours::new(&comms, &streams, count)?;
        let mut theirs = raw.buffers(count, false)?;
        let factor = if ranks > 1 {
            2.0 * (ranks - 1) as f64 / ranks as f64
        } else {
            1.0
        };
        let (warmup, samples) = if bytes >= 256 * MIB { (1, 5) } else { (2, 11) };
        let bandwidth_row = |name: String| {
            let unit = if ranks > 1 {
                "GB/s busbw"
            } else {
                "GB/s algbw"
            };
            Row::new("nccl", name, unit, Better::Higher)
        };
        let row = Measurement::new()
            .ours("ours", || ours.run(Collective::AllReduce, iters))
            .raw("raw ncclAllReduce", || raw.all_reduce(&mut theirs, iters))
            .into_row(
                env.cfg.plan(warmup, samples),
                bandwidth_row(format!(
                    "all_reduce f32 sum, {}, {ranks} GPU(s)",
                    size_name(bytes)
                )),
            )?
            .in_unit(|t| bytes as f64 / t / 1e9 * factor);
        rep.push(if bytes >= MIB {
            row.check_vs_raw(0.98, Source::Issue)
        } else {
            row
        });
        raw.free(theirs)?;
        if [8, 32 << 10, MIB, 64 * MIB].contains(&bytes) {
            // The library's buffers come from the stream-ordered pool: the same raw calls
            // on pool memory tell NCCL's cost on such memory from the library's own.
            let mut pooled = raw.buffers(count, true)?;
            let row = Measurement::new()
                .ours("ours", || ours.run(Collective::AllReduce, iters))
                .raw("raw ncclAllReduce, pool memory", || {
                    raw.all_reduce(&mut pooled, iters)
                })
                .into_row(
                    env.cfg.plan(warmup, samples),
                    bandwidth_row(format!(
                        "all_reduce f32 sum, {}, {ranks} GPU(s), raw on pool memory",
                        size_name(bytes)
                    )),
                )?
                .in_unit(|t| bytes as f64 / t / 1e9 * factor);
            rep.push(row);
            raw.free(pooled)?;
        }
    }
    all_to_all::rows(env, &comms, &streams, &raw, rep)?;
    overlap::rows(env, &devices, &comms, &streams, &raw, rep)?;
    graph_step::rows(env, &devices[0], rep)?;
    sibling_graphs::rows(env, &devices, &comms, &streams, &raw, rep)?;
    enqueue::rows(env, &devices[0], rep)
}

/// Whether NCCL may record collectives of several ranks into graphs here: only with
/// `NCCL_GRAPH_REGISTER=0` in the environment (see `sibling_graphs.rs`); otherwise says
/// that `what` has no row.
fn graph_register_off(what: &str) -> bool {
    let off = std::env::var_os("NCCL_GRAPH_REGISTER").is_some_and(|v| v == "0");
    if !off {
        println!(
            "nccl: {what} replayed as graphs on 2 GPUs of one thread needs \
             NCCL_GRAPH_REGISTER=0 in the environment: no row"
        );
    }
    off
}
