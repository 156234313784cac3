//! The host cost of enqueuing one small all-reduce (one `f32`) on a communicator of one
//! rank: ours through a scope, raw `ncclAllReduce` on memory of the same kind (the
//! device's stream-ordered pool, as a `DeviceVec`'s); with `Sum`, and with a
//! pre-multiplied sum made once on each side (ours `Communicator::pre_mul_sum`, raw
//! `ncclRedOpCreatePreMulSum`, whose handle raw code passes as C's `int`: cudarc's
//! `ncclRedOp_t` enum cannot hold it, so the raw side calls NCCL's entry points through
//! their C signatures, as the library does). And a barrier's round trip, against a raw
//! one-element all-reduce and synchronisation; `BENCH_BARRIER_DIAG=1` prints that raw
//! barrier's two calls apart and whether NCCL left work on the stream.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::time::Instant;

use cudarc::driver::sys;
use cudarc::nccl::{result as nccl_result, sys as nccl_sys};
use stream_core::nccl::{Communicator, ReduceOp, Sum, UniqueId};
use stream_core::{scope, Device, DeviceVec, Stream};

use super::raw_ranks::RawRanks;
use crate::env::Env;
use crate::error::{Error, Result};
use crate::measurement::Measurement;
use crate::raw::RawStream;
use crate::report::{Better, Report, Row, Source};

/// Calls per sample.
const CALLS: usize = 200;

/// Both rows.
pub(super) fn rows(env: &Env, device: &Device, rep: &mut Report) -> Result<()> {
    let diagnose = std::env::var_os("BENCH_BARRIER_DIAG").is_some();
    // One stream, synchronised idle before any communicator of this case exists and
    // again once both are alive.
    let idle = RawStream::new()?;
    let before = if diagnose {
        Some(idle_syncs(&idle)?)
    } else {
        None
    };
    let comm = Communicator::join(device, &UniqueId::new()?, 0, 1)?;
    let stream = device.new_stream()?;
    let mut x = device.alloc_vec::<f32>(1)?;
    let raw = RawRanks::new(std::slice::from_ref(device))?;
    if let Some(before) = before {
        let after = idle_syncs(&idle)?;
        println!(
            "barrier diagnosis: cuStreamSynchronize of one idle stream, ns per call in 3 \
             rounds: {before:?} before this case's two communicators, {after:?} with both alive"
        );
    }
    let mut theirs = raw.buffers(1, true)?;
    let buf = theirs.recv[0].ptr() as *mut c_void;
    let on = (raw.comms[0], raw.streams[0].0 as nccl_sys::cudaStream_t);
    let sum = || {
        // SAFETY: one f32 of the device, alive until `free` below; the stream and
        // communicator are of that device.
        unsafe {
            nccl_result::all_reduce(
                buf,
                buf,
                1,
                nccl_sys::ncclDataType_t::ncclFloat32,
                nccl_sys::ncclRedOp_t::ncclSum,
                on.0,
                on.1,
            )
        }
        .map(drop)
        .map_err(|e| Error::msg(format!("ncclAllReduce: {e:?}")))
    };
    let name = "enqueue one 4-byte all_reduce, 1 rank";
    rep.push(row(env, name, (&comm, &stream, &mut x), Sum, &raw, sum)?);
    let ours = comm.pre_mul_sum(1.0f32)?;
    let pre_mul_sum = RawPreMulSum::new(on.0, 1.0)?;
    let scaled = || {
        // SAFETY: as `sum` above; `pre_mul_sum` was made on `on.0` for `f32`.
        unsafe { pre_mul_sum.all_reduce_in_place(buf, 1, on.0, on.1) }
    };
    let name = "enqueue one 4-byte all_reduce with a pre_mul_sum, 1 rank";
    rep.push(row(
        env,
        name,
        (&comm, &stream, &mut x),
        &ours,
        &raw,
        scaled,
    )?);
    drop(pre_mul_sum);
    // The factor on the GPU: ours makes NCCL's reduction in each call (the factor is a
    // borrow of that call); raw makes it once, for a factor whose address never changes.
    let factor_on_device = theirs.send[0].ptr() as *mut c_void;
    // SAFETY: one f32 of the communicator's device, freed below after the stream is
    // synchronised.
    let device_factor = unsafe { RawPreMulSum::on_device(on.0, factor_on_device)? };
    let scaled_on_device = || {
        // SAFETY: as `sum` above; the factor is one f32 of the device, alive until `free`
        // below, and `device_factor` was made on `on.0` for `f32`.
        unsafe { device_factor.all_reduce_in_place(buf, 1, on.0, on.1) }
    };
    rep.push(device_factor_row(
        env,
        (&comm, &stream, &mut x),
        &raw,
        scaled_on_device,
    )?);
    raw.streams[0].sync()?;
    drop(device_factor);
    if diagnose {
        barrier_diagnosis(&raw, sum)?;
        stream_history_diagnosis(&raw, buf)?;
    }
    rep.push(barrier_row(env, &comm, &raw, sum)?);
    let _ = &mut theirs;
    raw.free(theirs)
}

/// One row: `CALLS` enqueues of ours with `op` in one scope against `CALLS` of
/// `raw_call`, per call.
fn row(
    env: &Env,
    name: &str,
    (comm, stream, x): (&Communicator, &Stream, &mut DeviceVec<f32>),
    op: impl ReduceOp<f32>,
    raw: &RawRanks,
    raw_call: impl Fn() -> Result<()>,
) -> Result<Row> {
    let row = Measurement::new()
        .ours("ours", || {
            scope(stream, |s| {
                let mut v = s.attach(&mut *x)?;
                seconds_per_call(|| Ok(s.all_reduce_in_place(comm, &mut v, op)?))
            })
        })
        .raw("raw ncclAllReduce", || raw_enqueues(raw, &raw_call))
        .into_row(
            env.cfg.plan(3, 15),
            Row::new("nccl", name, "ns/call", Better::Lower),
        )?
        .in_unit(|t| t * 1e9);
    Ok(row.check_vs_raw(1.03, Source::Issue))
}

/// `Scope::all_reduce_scaled_in_place` (a factor on the GPU, one element of the scope's
/// memory) against raw `ncclAllReduce` with a reduction made once on a device factor.
fn device_factor_row(
    env: &Env,
    (comm, stream, x): (&Communicator, &Stream, &mut DeviceVec<f32>),
    raw: &RawRanks,
    raw_call: impl Fn() -> Result<()>,
) -> Result<Row> {
    let row = Measurement::new()
        .ours("ours", || {
            scope(stream, |s| {
                let mut v = s.attach(&mut *x)?;
                let factor = s.upload(&[1.0f32])?;
                seconds_per_call(|| Ok(s.all_reduce_scaled_in_place(comm, &mut v, &factor)?))
            })
        })
        .raw("raw ncclAllReduce, reduction made once", || {
            raw_enqueues(raw, &raw_call)
        })
        .into_row(
            env.cfg.plan(3, 15),
            Row::new(
                "nccl",
                "enqueue one 4-byte all_reduce with a factor on the GPU, 1 rank",
                "ns/call",
                Better::Lower,
            ),
        )?
        .in_unit(|t| t * 1e9);
    Ok(row)
}

/// `Communicator::barrier` against what raw code waits on for one: a one-element
/// all-reduce (`raw_call`), then its stream synchronised, per call.
fn barrier_row(
    env: &Env,
    comm: &Communicator,
    raw: &RawRanks,
    raw_call: impl Fn() -> Result<()>,
) -> Result<Row> {
    let row = Measurement::new()
        .ours("ours", || seconds_per_call(|| Ok(comm.barrier()?)))
        .raw("raw ncclAllReduce + cuStreamSynchronize", || {
            seconds_per_call(|| {
                raw_call()?;
                raw.streams[0].sync()
            })
        })
        .into_row(
            env.cfg.plan(3, 15),
            Row::new("nccl", "barrier, 1 rank", "ns/call", Better::Lower),
        )?
        .in_unit(|t| t * 1e9);
    Ok(row)
}

/// Seconds per call of `CALLS` calls of `call`.
fn seconds_per_call(mut call: impl FnMut() -> Result<()>) -> Result<f64> {
    let start = Instant::now();
    for _ in 0..CALLS {
        call()?;
    }
    Ok(start.elapsed().as_secs_f64() / CALLS as f64)
}

/// Seconds per enqueue of `CALLS` of `raw_call`; the stream's synchronisation after
/// them is not timed.
fn raw_enqueues(raw: &RawRanks, raw_call: &impl Fn() -> Result<()>) -> Result<f64> {
    let enqueue = seconds_per_call(raw_call)?;
    raw.streams[0].sync()?;
    Ok(enqueue)
}

/// Three rounds of `CALLS` synchronisations of the idle `stream`: ns per call in each.
fn idle_syncs(stream: &RawStream) -> Result<Vec<u64>> {
    (0..3)
        .map(|_| Ok((seconds_per_call(|| stream.sync())? * 1e9) as u64))
        .collect()
}

/// `BENCH_BARRIER_DIAG=1`: what the raw barrier's two calls cost apart, and how often
/// the stream still has work right after the all-reduce (printed only).
fn barrier_diagnosis(raw: &RawRanks, raw_call: impl Fn() -> Result<()>) -> Result<()> {
    let stream = &raw.streams[0];
    let mut busy = 0;
    for _ in 0..CALLS {
        raw_call()?;
        // SAFETY: a live stream of the current context; a query only reads its state.
        if unsafe { sys::cuStreamQuery(stream.0) } == sys::CUresult::CUDA_ERROR_NOT_READY {
            busy += 1;
        }
        stream.sync()?;
    }
    for round in 0..3 {
        let both = seconds_per_call(|| {
            raw_call()?;
            stream.sync()
        })? * 1e9;
        let sync_alone = seconds_per_call(|| stream.sync())? * 1e9;
        let call_alone = seconds_per_call(&raw_call)? * 1e9;
        stream.sync()?;
        println!(
            "barrier diagnosis, round {round}: ncclAllReduce + cuStreamSynchronize {both:.0} ns, \
             cuStreamSynchronize of the idle stream {sync_alone:.0} ns, ncclAllReduce alone \
             {call_alone:.0} ns; the stream had work right after the call in {busy} of {CALLS}"
        );
    }
    Ok(())
}

/// `BENCH_BARRIER_DIAG=1`: whether an idle stream's synchronisation costs more after
/// NCCL used the stream, or after any work at all: three rounds each on a stream made
/// now and never used, one that ran a one-byte memset (no NCCL), and the barrier's
/// stream (printed only).
fn stream_history_diagnosis(raw: &RawRanks, buf: *mut c_void) -> Result<()> {
    let never_used = RawStream::new()?;
    let memset_only = RawStream::new()?;
    // SAFETY: `buf` is one f32 of this context's device, alive until the caller frees it
    // after this returns; the memset is synchronised below, before anything reads it.
    unsafe { sys::cuMemsetD8Async(buf as sys::CUdeviceptr, 0, 1, memset_only.0) }
        .result()
        .map_err(|e| Error::msg(format!("cuMemsetD8Async: {e:?}")))?;
    memset_only.sync()?;
    let fresh = idle_syncs(&never_used)?;
    let after_memset = idle_syncs(&memset_only)?;
    let nccl = idle_syncs(&raw.streams[0])?;
    println!(
        "barrier diagnosis: cuStreamSynchronize of an idle stream, ns per call in 3 rounds: \
         never used {fresh:?}, after one memset {after_memset:?}, after NCCL's calls {nccl:?}"
    );
    Ok(())
}

type CreatePreMulSum = unsafe extern "C" fn(
    *mut c_int,
    *mut c_void,
    nccl_sys::ncclDataType_t,
    nccl_sys::ncclScalarResidence_t,
    nccl_sys::ncclComm_t,
) -> nccl_sys::ncclResult_t;
type Destroy = unsafe extern "C" fn(c_int, nccl_sys::ncclComm_t) -> nccl_sys::ncclResult_t;
type AllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    nccl_sys::ncclDataType_t,
    c_int,
    nccl_sys::ncclComm_t,
    nccl_sys::cudaStream_t,
) -> nccl_sys::ncclResult_t;

/// Raw NCCL's pre-multiplied sum of `f32` on one communicator.
struct RawPreMulSum {
    op: c_int,
    comm: nccl_sys::ncclComm_t,
    all_reduce: AllReduce,
    destroy: Destroy,
}

/// The symbol `name` of the loaded NCCL.
///
/// # Safety
///
/// `F` is the C signature of `name`.
unsafe fn symbol<F: Copy>(name: &str) -> Result<F> {
    // SAFETY: the library is loaded (a communicator exists) and stays loaded.
    let nccl = unsafe { nccl_sys::culib() };
    // SAFETY: `F` is the caller's.
    unsafe { nccl.get::<F>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| Error::msg(format!("{name}: {e}")))
}

impl RawPreMulSum {
    fn new(comm: nccl_sys::ncclComm_t, factor: f32) -> Result<Self> {
        let mut factor = factor;
        // SAFETY: `factor` is live (host-immediate: read before the call returns).
        unsafe {
            Self::create(
                comm,
                (&raw mut factor).cast(),
                nccl_sys::ncclScalarResidence_t::ncclScalarHostImmediate,
            )
        }
    }

    /// One whose factor NCCL reads from the device memory at `factor` when each
    /// all-reduce runs.
    ///
    /// # Safety
    ///
    /// `factor` is one f32 of the communicator's device, alive until every all-reduce
    /// given this reduction has completed.
    unsafe fn on_device(comm: nccl_sys::ncclComm_t, factor: *mut c_void) -> Result<Self> {
        // SAFETY: NCCL reads `factor` only while the all-reduces run (the caller's).
        unsafe {
            Self::create(
                comm,
                factor,
                nccl_sys::ncclScalarResidence_t::ncclScalarDevice,
            )
        }
    }

    /// `ncclRedOpCreatePreMulSum` of `f32` on `comm`.
    ///
    /// # Safety
    ///
    /// `factor` is valid for NCCL to read as `residence` says.
    unsafe fn create(
        comm: nccl_sys::ncclComm_t,
        factor: *mut c_void,
        residence: nccl_sys::ncclScalarResidence_t,
    ) -> Result<Self> {
        // SAFETY: each type is `nccl.h`'s signature, with `int` for `ncclRedOp_t`.
        let create = unsafe { symbol::<CreatePreMulSum>("ncclRedOpCreatePreMulSum\0")? };
        // SAFETY: as above.
        let all_reduce = unsafe { symbol::<AllReduce>("ncclAllReduce\0")? };
        // SAFETY: as above.
        let destroy = unsafe { symbol::<Destroy>("ncclRedOpDestroy\0")? };
        let mut op = 0;
        // SAFETY: a live communicator; `op` is live; `factor` is the caller's.
        let status = unsafe {
            create(
                &raw mut op,
                factor,
                nccl_sys::ncclDataType_t::ncclFloat32,
                residence,
                comm,
            )
        };
        if status != nccl_sys::ncclResult_t::ncclSuccess {
            return Err(Error::msg(format!("ncclRedOpCreatePreMulSum: {status:?}")));
        }
        Ok(RawPreMulSum {
            op,
            comm,
            all_reduce,
            destroy,
        })
    }

    /// `ncclAllReduce` in place of `count` `f32` at `buf` with this reduction.
    ///
    /// # Safety
    ///
    /// `buf` holds `count` `f32` of the communicator's device until the call completes
    /// on `stream`, a stream of that device; `comm` is the one this was made on.
    unsafe fn all_reduce_in_place(
        &self,
        buf: *mut c_void,
        count: usize,
        comm: nccl_sys::ncclComm_t,
        stream: nccl_sys::cudaStream_t,
    ) -> Result<()> {
        let f32 = nccl_sys::ncclDataType_t::ncclFloat32;
        // SAFETY: the caller's contract.
        let status = unsafe { (self.all_reduce)(buf, buf, count, f32, self.op, comm, stream) };
        if status != nccl_sys::ncclResult_t::ncclSuccess {
            return Err(Error::msg(format!("ncclAllReduce: {status:?}")));
        }
        Ok(())
    }
}

impl Drop for RawPreMulSum {
    fn drop(&mut self) {
        // SAFETY: made on `self.comm`, which is still live; destroyed once.
        let _ = unsafe { (self.destroy)(self.op, self.comm) };
    }
}
