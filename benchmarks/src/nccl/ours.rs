//! The library's side of the NCCL case's bandwidth rows: a send and a receive
//! `DeviceVec` per device, attached to a scope per sample; on one GPU the scope's own
//! collective, on two one `nccl::group` per collective pair from nested scopes.

use std::time::Instant;

use stream_core::nccl::{self, Communicator, Group, Sum};
use stream_core::{scope, DeviceMemory, DeviceMemoryMut, DeviceVec, Scope, Stream};

use crate::error::Result;

/// The collectives the rows measure, out of place on `f32`.
#[derive(Debug, Clone, Copy)]
pub(super) enum Collective {
    /// A sum.
    AllReduce,
    /// Equal blocks.
    AllToAll,
}

impl Collective {
    /// Issues this collective on scope `s` alone.
    fn alone<'s>(
        self,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        x: &impl DeviceMemory<'s, f32>,
        y: &mut impl DeviceMemoryMut<'s, f32>,
    ) -> stream_core::Result<()> {
        match self {
            Collective::AllReduce => s.all_reduce(comm, x, y, Sum),
            Collective::AllToAll => s.all_to_all(comm, x, y),
        }
    }

    /// Issues this collective on scope `s` in the open group `g`.
    fn grouped<'g, 's: 'g>(
        self,
        g: &'g Group<'g, '_>,
        s: &'s Scope<'s, '_>,
        comm: &'s Communicator,
        x: &'g impl DeviceMemory<'s, f32>,
        y: &'g mut impl DeviceMemoryMut<'s, f32>,
    ) -> stream_core::Result<()> {
        match self {
            Collective::AllReduce => g.all_reduce(s, comm, x, y, Sum),
            Collective::AllToAll => g.all_to_all(s, comm, x, y),
        }
    }
}

/// A send and a receive buffer of `count` `f32`s per communicator's device.
pub(super) struct Ours<'a> {
    comms: &'a [Communicator],
    streams: &'a [Stream],
    send: Vec<DeviceVec<f32>>,
    recv: Vec<DeviceVec<f32>>,
}

impl<'a> Ours<'a> {
    pub(super) fn new(
        comms: &'a [Communicator],
        streams: &'a [Stream],
        count: usize,
    ) -> Result<Self> {
        let vecs = || -> Result<Vec<DeviceVec<f32>>> {
            Ok(comms
                .iter()
                .map(|c| c.device().alloc_vec::<f32>(count))
                .collect::<stream_core::Result<_>>()?)
        };
        Ok(Ours {
            comms,
            streams,
            send: vecs()?,
            recv: vecs()?,
        })
    }

    /// Seconds per `collective` over `iters` of them, the scopes' ends included (one or
    /// two GPUs).
    pub(super) fn run(&mut self, collective: Collective, iters: usize) -> Result<f64> {
        let Ours {
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
                    collective.alone(a, &comms[0], &x0, &mut y0)?;
                }
                return Ok(());
            }
            scope(&streams[1], |b| {
                let x1 = b.attach_ref(&send[1])?;
                let mut y1 = b.attach(&mut recv_rest[0])?;
                for _ in 0..iters {
                    nccl::group(|g| {
                        collective.grouped(g, a, &comms[0], &x0, &mut y0)?;
                        collective.grouped(g, b, &comms[1], &x1, &mut y1)
                    })?;
                }
                Ok::<_, stream_core::Error>(())
            })
        })?;
        Ok(start.elapsed().as_secs_f64() / iters as f64)
    }
}
