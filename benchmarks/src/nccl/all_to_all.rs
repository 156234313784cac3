//! The all-to-all rows of case 11: the library's `all_to_all` against the same NCCL
//! calls made raw (one group of a send and a receive per peer and rank, NCCL's own
//! recipe, which is also how PyTorch's `all_to_all_single` issues it), both on memory
//! of the device's stream-ordered pool (as a `DeviceVec`'s). One GPU: the
//! scope's method on a communicator of one rank (the block goes to the rank itself);
//! two: each device's `Group::all_to_all` in one `nccl::group` from nested scopes.
//! Bandwidth as nccl-tests' alltoall defines it: algbw = the bytes of a rank's buffer
//! over the time, busbw = algbw × (n−1)/n (with one GPU, where busbw is zero, algbw).

use stream_core::nccl::Communicator;
use stream_core::Stream;

use super::ours::{Collective, Ours};
use super::raw_ranks::RawRanks;
use crate::env::{size_name, Env, MIB};
use crate::error::Result;
use crate::measurement::Measurement;
use crate::report::{Better, Report, Row, Source};

/// Pushes the all-to-all rows, for buffers of every size of the run.
pub(super) fn rows(
    env: &Env,
    comms: &[Communicator],
    streams: &[Stream],
    raw: &RawRanks,
    rep: &mut Report,
) -> Result<()> {
    let ranks = comms.len();
    let sizes: &[usize] = if env.cfg.quick {
        &[MIB, 64 * MIB]
    } else {
        &[32 << 10, MIB, 8 * MIB, 64 * MIB, 256 * MIB]
    };
    let (factor, unit) = if ranks > 1 {
        ((ranks - 1) as f64 / ranks as f64, "GB/s busbw")
    } else {
        (1.0, "GB/s algbw")
    };
    for &bytes in sizes {
        let count = bytes / 4;
        let iters = if bytes >= 64 * MIB { 5 } else { 20 };
        let (warmup, samples) = if bytes >= 256 * MIB { (1, 5) } else { (2, 11) };
        let mut ours = Ours::new(comms, streams, count)?;
        let mut theirs = raw.buffers(count, true)?;
        let row = Measurement::new()
            .ours("ours", || ours.run(Collective::AllToAll, iters))
            .raw("raw ncclSend/ncclRecv group", || {
                raw.all_to_all(&mut theirs, iters)
            })
            .into_row(
                env.cfg.plan(warmup, samples),
                Row::new(
                    "nccl",
                    format!(
                        "all_to_all f32, {} per rank, {ranks} GPU(s)",
                        size_name(bytes)
                    ),
                    unit,
                    Better::Higher,
                ),
            )?
            .in_unit(|t| bytes as f64 / t / 1e9 * factor);
        rep.push(if bytes >= MIB {
            row.check_vs_raw(0.98, Source::Goal)
        } else {
            row
        });
        raw.free(theirs)?;
    }
    Ok(())
}
