//! The all-to-all rows of case 11: the library's `all_to_all` against the same NCCL
//! calls made raw (one group of a send and a receive per peer and rank, NCCL's own
//! recipe, which is also how PyTorch's `all_to_all_single` issues it), both on memory
//! of the device's stream-ordered pool (as a `DeviceVec`'s). One GPU: the
//! scope's method on a communicator of one rank (the block goes to the rank itself);
//! two: each device's `Group::all_to_all` in one `nccl::group` from nested scopes.
//! Bandwidth as nccl-tests' alltoall defines it: algbw = the bytes of a rank's buffer
//! over the time, busbw = algbw × (n−1)/n (with one GPU, where busbw is zero, algbw).

use std::time::Instant;

use stream_core::nccl::{self, Communicator};
use stream_core::{scope, DeviceVec, Stream};

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
        let mut ours = Exchange::new(comms, streams, count)?;
        let mut theirs = raw.buffers(count, true)?;
        let row = Measurement::new()
            .ours("ours", || ours.all_to_all(iters))
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

/// Ours: a send and a receive `DeviceVec` per device, attached to a scope per sample.
struct Exchange<'a> {
    comms: &'a [Communicator],
    streams: &'a [Stream],
    send: Vec<DeviceVec<f32>>,
    recv: Vec<DeviceVec<f32>>,
}

impl<'a> Exchange<'a> {
    fn new(comms: &'a [Communicator], streams: &'a [Stream], count: usize) -> Result<Self> {
        let vecs = || -> Result<Vec<DeviceVec<f32>>> {
            Ok(comms
                .iter()
                .map(|c| c.device().alloc_vec::<f32>(count))
                .collect::<stream_core::Result<_>>()?)
        };
        Ok(Exchange {
            comms,
            streams,
            send: vecs()?,
            recv: vecs()?,
        })
    }

    /// Seconds per all-to-all over `iters`, the scopes' ends included.
    fn all_to_all(&mut self, iters: usize) -> Result<f64> {
        let Exchange {
            comms,
            streams,
            send,
            recv,
        } = self;
        let start = Instant::now();
        let (recv0, recv_rest) = recv.split_at_mut(1);
        scope(&streams[0], |a| {
            let x0 = a.attach_ref(&send[0])?;
            let mut y0 = a.attach(&mut recv0[0])?;
            if comms.len() == 1 {
                for _ in 0..iters {
                    a.all_to_all(&comms[0], &x0, &mut y0)?;
                }
                return Ok(());
            }
            scope(&streams[1], |b| {
                let x1 = b.attach_ref(&send[1])?;
                let mut y1 = b.attach(&mut recv_rest[0])?;
                for _ in 0..iters {
                    nccl::group(|g| {
                        g.all_to_all(a, &comms[0], &x0, &mut y0)?;
                        g.all_to_all(b, &comms[1], &x1, &mut y1)
                    })?;
                }
                Ok::<_, stream_core::Error>(())
            })
        })?;
        Ok(start.elapsed().as_secs_f64() / iters as f64)
    }
}
