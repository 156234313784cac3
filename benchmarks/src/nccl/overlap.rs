//! The overlap rows of case 11: a data-parallel training step as DDP runs it. A kernel
//! makes a gradient; that gradient is summed over the ranks on a second stream while
//! the next kernel (the rest of the backward pass) runs on the first; the first stream
//! then waits for the sum. Ours: the all-reduce on a fork's child (`Scope::fork`, the
//! gradient lent to it, so nothing on the parent can touch it before the join), both
//! ranks' in one `nccl::group` on two GPUs; raw: a second stream per rank ordered by
//! events around `ncclAllReduce`, as PyTorch's DDP orders its communication stream.
//! The second stream is measured at the default priority and at the device's most
//! urgent one (PyTorch's `TORCH_NCCL_HIGH_PRIORITY=1`, Megatron's communication
//! streams): a kernel that fills the GPU otherwise keeps NCCL's blocks waiting.
//!
//! The same step with the all-reduce on the kernels' own stream (serial) is measured
//! beside them, and the overlap's gain is the ratio of ours. The kernel (`work_f32`
//! over as many elements as the gradient) is given as many iterations as make it last
//! about as long as the all-reduce on this machine, measured first on the raw side:
//! where the overlap matters most, and where a hidden synchronisation would show.
//! PyTorch's form of the same step, to run beside it under `torchrun`:
//! `benchmarks/peers/torch_overlap.py` (give it the iterations this case prints).

use std::time::Instant;

use cudarc::driver::{result, sys};
use cudarc::nccl::{result as nccl_result, sys as nccl_sys};
use stream_core::nccl::{self, Communicator, Sum};
use stream_core::{
    scope, Device, DeviceMemory, DeviceMemoryMut, DeviceVec, Enqueue, Error as CoreError, Stream,
};

use super::raw_ranks::RawRanks;
use crate::cuda::{self, work_config};
use crate::env::{size_name, Env, MIB};
use crate::error::{Context, Error, Result};
use crate::measurement::Measurement;
use crate::raw::{arg, order, RawDeviceMem, RawEvent, RawModule, RawStream};
use crate::report::{Better, Report, Row, Source};
use crate::sampling::per_round_ratio;

/// The kernel's iterations per element when its time is measured for the calibration
/// (enough that its arithmetic, not its memory traffic, sets its time).
const PROBE_ITERS: u32 = 512;

/// Where each step issues its all-reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// On a second stream, beside the next kernel; `urgent`: a stream of the device's
    /// most urgent priority, else of the default one.
    Overlapped { urgent: bool },
    /// On the kernels' own stream, between them.
    Serial,
}

impl Placement {
    /// Which of a rank's two second streams it uses (0: default priority, 1: urgent).
    fn side(self) -> usize {
        usize::from(self == Placement::Overlapped { urgent: true })
    }
}

/// Pushes the overlap rows, for gradients of every size of the run.
pub(super) fn rows(
    env: &Env,
    devices: &[Device],
    comms: &[Communicator],
    streams: &[Stream],
    raw: &RawRanks,
    rep: &mut Report,
) -> Result<()> {
    let ranks = comms.len();
    let sizes: &[usize] = if env.cfg.quick {
        &[64 * MIB]
    } else {
        &[8 * MIB, 64 * MIB, 256 * MIB]
    };
    // Per rank, a second stream of the default priority and one of the most urgent.
    let side: Vec<[Stream; 2]> = devices
        .iter()
        .map(|d| {
            let urgent = *d.stream_priorities()?.start();
            Ok([d.new_stream()?, d.new_stream_with_priority(urgent)?])
        })
        .collect::<stream_core::Result<_>>()?;
    // `work_f32` for the raw side, compiled once for every size.
    let cubin = cuda::compile_cubin(cuda::SOURCE, devices[0].compute_capability())
        .context("compiling work_f32 for the raw side")?;
    for &bytes in sizes {
        let count = bytes / 4;
        let theirs = RawStep::new(raw, &cubin, devices.len(), count)?;
        // The calibration: one kernel of PROBE_ITERS iterations against one all-reduce.
        theirs.kernel_alone(raw, PROBE_ITERS, 2)?;
        let kernel = theirs.kernel_alone(raw, PROBE_ITERS, 5)?;
        let all_reduce = theirs.all_reduce_alone(raw, 10)?;
        let work_iters = (f64::from(PROBE_ITERS) * all_reduce / kernel)
            .round()
            .clamp(4.0, 16_384.0) as u32;
        rep.figure(
            "nccl",
            format!(
                "overlap, {}: the all_reduce alone (raw), one kernel of {work_iters} iterations per element is as long",
                size_name(bytes)
            ),
            all_reduce * 1e6,
            "us",
        );
        let mut ours = OursStep::new(comms, streams, &side, count)?;
        let iters = if bytes >= 256 * MIB { 5 } else { 20 };
        let plan = match bytes >= 256 * MIB {
            true => env.cfg.plan(1, 5),
            false => env.cfg.plan(2, 11),
        };
        let mut measure = |placement: Placement, ours_label, raw_label, what: &str| {
            Measurement::new()
                .ours(ours_label, || ours.run(placement, work_iters, iters))
                .raw(raw_label, || theirs.run(raw, placement, work_iters, iters))
                .into_row(
                    plan,
                    Row::new(
                        "nccl",
                        format!(
                            "data-parallel step, {} gradient all_reduce {what}, {ranks} GPU(s)",
                            size_name(bytes)
                        ),
                        "us/step",
                        Better::Lower,
                    ),
                )
                .map(|row| row.in_unit(|t| t * 1e6))
        };
        let serial = measure(
            Placement::Serial,
            "ours, one stream",
            "raw, one stream",
            "between the kernels",
        )?;
        for urgent in [false, true] {
            let overlapped = measure(
                Placement::Overlapped { urgent },
                "ours, on a fork",
                "raw, second stream and events",
                match urgent {
                    false => "beside the next kernel",
                    true => "on an urgent stream beside the next kernel",
                },
            )?;
            if let (Some(o), Some(s)) = (&overlapped.ours, &serial.ours) {
                if let Some(gain) = per_round_ratio(&s.figures(), &o.figures()) {
                    let stream = if urgent { ", urgent stream" } else { "" };
                    rep.figure_per_round(
                        "nccl",
                        format!(
                            "overlap, {}{stream}: ours, serial step / overlapped step",
                            size_name(bytes)
                        ),
                        gain,
                        "x",
                    );
                }
            }
            rep.push(overlapped.check_vs_raw(1.02, Source::Goal));
        }
        rep.push(serial.check_vs_raw(1.02, Source::Goal));
        let graphs = super::overlap_graphs::Step {
            work_iters,
            iters,
            plan,
        };
        super::overlap_graphs::rows(graphs, &mut ours, &theirs, raw, rep)?;
        theirs.free(raw)?;
    }
    Ok(())
}

/// The kernel of every step: `y = work(x)`, `iters` iterations per element.
pub(super) fn work<'s>(
    s: &'s impl Enqueue<'s>,
    iters: u32,
    x: &impl DeviceMemory<'s, f32>,
    y: &mut impl DeviceMemoryMut<'s, f32>,
) -> stream_core::Result<()> {
    cuda::work_f32(s, work_config(x.len()), iters, x, y)
}

/// The library's side: an input, a gradient and a next layer's output per rank, and a
/// second stream per rank for the forks (the graph row captures the same buffers).
pub(super) struct OursStep<'a> {
    pub(super) comms: &'a [Communicator],
    pub(super) streams: &'a [Stream],
    side: &'a [[Stream; 2]],
    pub(super) x: Vec<DeviceVec<f32>>,
    pub(super) grad: Vec<DeviceVec<f32>>,
    pub(super) next: Vec<DeviceVec<f32>>,
}

impl<'a> OursStep<'a> {
    fn new(
        comms: &'a [Communicator],
        streams: &'a [Stream],
        side: &'a [[Stream; 2]],
        count: usize,
    ) -> Result<Self> {
        let vecs = |value: f32| -> Result<Vec<DeviceVec<f32>>> {
            Ok(comms
                .iter()
                .map(|c| c.device().upload_vec(&vec![value; count]))
                .collect::<stream_core::Result<_>>()?)
        };
        Ok(OursStep {
            comms,
            streams,
            side,
            x: vecs(0.5)?,
            grad: vecs(0.0)?,
            next: vecs(0.0)?,
        })
    }

    /// Seconds per step over `iters` steps, the scopes' ends included (one or two GPUs).
    fn run(&mut self, placement: Placement, work_iters: u32, iters: usize) -> Result<f64> {
        let OursStep {
            comms,
            streams,
            side,
            x,
            grad,
            next,
        } = self;
        let start = Instant::now();
        let (grad0, grad_rest) = grad.split_at_mut(1);
        let (next0, next_rest) = next.split_at_mut(1);
        scope(&streams[0], |a| {
            let x0 = a.attach_ref(&x[0])?;
            let mut g0 = a.attach(&mut grad0[0])?;
            let mut n0 = a.attach(&mut next0[0])?;
            if comms.len() == 1 {
                for _ in 0..iters {
                    work(a, work_iters, &x0, &mut g0)?;
                    match placement {
                        Placement::Overlapped { .. } => {
                            a.fork(&side[0][placement.side()], (&mut g0,), |c, (mut g0,)| {
                                c.all_reduce_in_place(&comms[0], &mut g0, Sum)?;
                                work(a, work_iters, &x0, &mut n0)
                            })?
                        }
                        Placement::Serial => {
                            a.all_reduce_in_place(&comms[0], &mut g0, Sum)?;
                            work(a, work_iters, &x0, &mut n0)?;
                        }
                    }
                }
                return Ok(());
            }
            scope(&streams[1], |b| {
                let x1 = b.attach_ref(&x[1])?;
                let mut g1 = b.attach(&mut grad_rest[0])?;
                let mut n1 = b.attach(&mut next_rest[0])?;
                for _ in 0..iters {
                    work(a, work_iters, &x0, &mut g0)?;
                    work(b, work_iters, &x1, &mut g1)?;
                    match placement {
                        Placement::Overlapped { .. } => {
                            let which = placement.side();
                            a.fork(&side[0][which], (&mut g0,), |ca, (mut g0,)| {
                                b.fork(&side[1][which], (&mut g1,), |cb, (mut g1,)| {
                                    nccl::group(|g| {
                                        g.all_reduce_in_place(ca, &comms[0], &mut g0, Sum)?;
                                        g.all_reduce_in_place(cb, &comms[1], &mut g1, Sum)
                                    })?;
                                    work(a, work_iters, &x0, &mut n0)?;
                                    work(b, work_iters, &x1, &mut n1)
                                })
                            })?;
                        }
                        Placement::Serial => {
                            nccl::group(|g| {
                                g.all_reduce_in_place(a, &comms[0], &mut g0, Sum)?;
                                g.all_reduce_in_place(b, &comms[1], &mut g1, Sum)
                            })?;
                            work(a, work_iters, &x0, &mut n0)?;
                            work(b, work_iters, &x1, &mut n1)?;
                        }
                    }
                }
                Ok::<_, CoreError>(())
            })
        })?;
        Ok(start.elapsed().as_secs_f64() / iters as f64)
    }
}

/// The raw side, on `RawRanks`' contexts, streams and communicators: per rank a second
/// stream, the two events that order it, `work_f32` loaded in the rank's context, and
/// the three buffers.
pub(super) struct RawStep {
    count: usize,
    /// Per rank, a stream of the default priority and one of the most urgent.
    pub(super) side: Vec<[RawStream; 2]>,
    pub(super) fork: Vec<RawEvent>,
    pub(super) join: Vec<RawEvent>,
    work: Vec<sys::CUfunction>,
    modules: Vec<RawModule>,
    x: Vec<RawDeviceMem>,
    pub(super) grad: Vec<RawDeviceMem>,
    pub(super) next: Vec<RawDeviceMem>,
}

impl RawStep {
    /// The step's raw resources on each of `ranks` ranks, `work_f32` loaded from `cubin`.
    fn new(raw: &RawRanks, cubin: &[u8], ranks: usize, count: usize) -> Result<Self> {
        let mut step = RawStep {
            count,
            side: Vec::new(),
            fork: Vec::new(),
            join: Vec::new(),
            work: Vec::new(),
            modules: Vec::new(),
            x: Vec::new(),
            grad: Vec::new(),
            next: Vec::new(),
        };
        let bytes = count.max(1) * 4;
        for rank in 0..ranks {
            raw.bind(rank)?;
            let module = RawModule::load(cubin)?;
            step.work.push(module.function("work_f32")?);
            step.modules.push(module);
            let (mut least, mut greatest) = (0, 0);
            // SAFETY: two live out-pointers; the rank's context is bound.
            unsafe { sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) }
                .result()
                .context("cuCtxGetStreamPriorityRange")?;
            step.side
                .push([RawStream::new()?, RawStream::with_priority(greatest)?]);
            step.fork.push(RawEvent::new()?);
            step.join.push(RawEvent::new()?);
            step.x.push(RawDeviceMem::new(bytes)?);
            step.grad.push(RawDeviceMem::new(bytes)?);
            step.next.push(RawDeviceMem::new(bytes)?);
            // The input's bytes as the library's (0.5 everywhere): the same work per element.
            let halves = vec![0.5f32; count];
            // SAFETY: `x` holds `bytes` (`count` f32s) of this context; the copy is
            // synchronous and `halves` outlives it.
            unsafe { result::memcpy_htod_sync(step.x[rank].ptr, &halves) }
                .context("cuMemcpyHtoD")?;
        }
        raw.bind(0)?;
        Ok(step)
    }

    /// Launches `work_f32` of rank `rank` from its input into `out` on `stream`.
    pub(super) fn launch(
        &self,
        rank: usize,
        out: sys::CUdeviceptr,
        iters: u32,
        stream: sys::CUstream,
    ) -> Result<()> {
        let cfg = work_config(self.count);
        let (x, len) = (self.x[rank].ptr, self.count);
        let mut args = [arg(&iters), arg(&x), arg(&len), arg(&out), arg(&len)];
        // SAFETY: `work_f32(unsigned, const float*, size_t, float*, size_t)` gets two
        // device buffers of `len` floats of this rank's context (bound by the caller),
        // alive until `free`, after the streams' synchronisation.
        unsafe { result::launch_kernel(self.work[rank], cfg.grid, cfg.block, 0, stream, &mut args) }
            .context("cuLaunchKernel")
    }

    /// Every rank's in-place sum of its gradient, on `stream_of(rank)`, in one group
    /// with two ranks or more.
    pub(super) fn all_reduce(
        &self,
        raw: &RawRanks,
        stream_of: impl Fn(usize) -> sys::CUstream,
    ) -> Result<()> {
        let n = raw.comms.len();
        let nccl = |call: &str, e: nccl_result::NcclError| Error::msg(format!("{call}: {e:?}"));
        if n > 1 {
            nccl_result::group_start().map_err(|e| nccl("ncclGroupStart", e))?;
        }
        for rank in 0..n {
            let grad = self.grad[rank].ptr;
            // SAFETY: the gradient holds `count` f32s of rank `rank`'s device, alive until
            // `free` (after the synchronisation at the end of the loop); the stream and
            // communicator are of that device.
            unsafe {
                nccl_result::all_reduce(
                    grad as *const _,
                    grad as *mut _,
                    self.count,
                    nccl_sys::ncclDataType_t::ncclFloat32,
                    nccl_sys::ncclRedOp_t::ncclSum,
                    raw.comms[rank],
                    stream_of(rank) as nccl_sys::cudaStream_t,
                )
            }
            .map_err(|e| nccl("ncclAllReduce", e))?;
        }
        if n > 1 {
            nccl_result::group_end().map_err(|e| nccl("ncclGroupEnd", e))?;
        }
        Ok(())
    }

    /// Seconds per step over `iters` steps, every stream synchronised at the end.
    fn run(
        &self,
        raw: &RawRanks,
        placement: Placement,
        work_iters: u32,
        iters: usize,
    ) -> Result<f64> {
        let n = raw.comms.len();
        let main = |rank: usize| raw.streams[rank].0;
        let side = |rank: usize| self.side[rank][placement.side()].0;
        let start = Instant::now();
        for _ in 0..iters {
            for rank in 0..n {
                raw.bind(rank)?;
                self.launch(rank, self.grad[rank].ptr, work_iters, main(rank))?;
                if placement != Placement::Serial {
                    order(self.fork[rank].0, main(rank), side(rank))?;
                }
            }
            match placement {
                Placement::Overlapped { .. } => self.all_reduce(raw, side)?,
                Placement::Serial => self.all_reduce(raw, main)?,
            }
            for rank in 0..n {
                raw.bind(rank)?;
                self.launch(rank, self.next[rank].ptr, work_iters, main(rank))?;
                if placement != Placement::Serial {
                    order(self.join[rank].0, side(rank), main(rank))?;
                }
            }
        }
        self.sync(raw)?;
        Ok(start.elapsed().as_secs_f64() / iters as f64)
    }

    /// Seconds per kernel of `work_iters` iterations, `iters` of them on rank 0 alone.
    fn kernel_alone(&self, raw: &RawRanks, work_iters: u32, iters: usize) -> Result<f64> {
        raw.bind(0)?;
        let start = Instant::now();
        for _ in 0..iters {
            self.launch(0, self.next[0].ptr, work_iters, raw.streams[0].0)?;
        }
        raw.streams[0].sync()?;
        Ok(start.elapsed().as_secs_f64() / iters as f64)
    }

    /// Seconds per all-reduce of the gradient, `iters` of them, on the ranks' streams.
    fn all_reduce_alone(&self, raw: &RawRanks, iters: usize) -> Result<f64> {
        let start = Instant::now();
        for _ in 0..iters {
            self.all_reduce(raw, |rank| raw.streams[rank].0)?;
        }
        self.sync(raw)?;
        Ok(start.elapsed().as_secs_f64() / iters as f64)
    }

    /// Synchronises every rank's two streams, then binds rank 0's context again.
    pub(super) fn sync(&self, raw: &RawRanks) -> Result<()> {
        for rank in 0..raw.comms.len() {
            raw.bind(rank)?;
            raw.streams[rank].sync()?;
            self.side[rank].iter().try_for_each(RawStream::sync)?;
        }
        raw.bind(0)
    }

    /// Frees every rank's memory, events, stream and module in its own context.
    pub(super) fn free(self, raw: &RawRanks) -> Result<()> {
        self.sync(raw)?;
        let RawStep {
            side,
            fork,
            join,
            modules,
            x,
            grad,
            next,
            ..
        } = self;
        let parts = side.into_iter().zip(fork).zip(join).zip(modules);
        let memory = x.into_iter().zip(grad).zip(next);
        for (rank, (owned, buffers)) in parts.zip(memory).enumerate() {
            raw.bind(rank)?;
            drop((owned, buffers));
        }
        raw.bind(0)
    }
}
