//! Case 8's rows against raw managed-memory calls: the library's own cost of each
//! managed operation, in the same run (issue 30). Ours is a `ManagedVec` and a scope's
//! operations on it; raw is `cuMemAllocManaged` memory and the driver calls a raw
//! program makes for the same thing:
//!
//! * **allocation + free** (host time): `alloc_managed` (which checks the free memory and
//!   zeroes the vec on the host) and its drop, against `cuMemAllocManaged`, the same
//!   host zeroing, `cuMemFree`;
//! * **prefetch to the device**, **prefetch to the host** (GPU time, as GB/s): a scope's
//!   `prefetch_to_device` / `prefetch_to_host` against `cuMemPrefetchAsync` (CUDA 13's
//!   location form), the pages first moved the other way (not timed);
//! * **advice** (host time per pair): `advise(PreferredLocation(device))` then
//!   `advise(NoPreferredLocation)` against the two `cuMemAdvise` calls;
//! * **kernel on prefetched pages** (GPU time): the same `y[i] += 1` kernel, launched
//!   through `#[kernel]` on a prefetched view against `cuLaunchKernel` of the same source.
//!
//! Target: ours/raw >= 0.98 in throughput (the design's promise: the library costs no
//! more than the raw calls). Afterwards both buffers must hold what their kernels made.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::time::Instant;

use cudarc::driver::{result, sys};
use stream_core::{scope, GpuTimer, ManagedAdvice, ManagedLocation, ManagedVec, Stream};

use crate::cuda;
use crate::env::{Env, MIB};
use crate::error::{Context, Error, Result};
use crate::managed::{add_one_in_place_u32, config, SOURCE};
use crate::measurement::Measurement;
use crate::raw::{arg, RawModule, RawStream};
use crate::report::{Better, Report, Row, Source};
use crate::sampling::GpuTimer as RawTimer;

/// Advice pairs per sample.
const ADVICE_PAIRS: usize = 100;

/// Runs the rows.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    let cfg = env.cfg;
    let bytes = cfg.pick(256 * MIB, 32 * MIB);
    let n = bytes / 4;
    let plan = cfg.plan(1, cfg.pick(5, 2));
    let stream = &env.streams[0];
    let mut ours = Ours::new(env, n)?;
    let mut raw = Raw::new(env, bytes)?;
    let size = format!("{} MiB", bytes / MIB);

    let alloc_bytes = cfg.pick(64 * MIB, 16 * MIB);
    let row = Measurement::new()
        .ours("ours", || ours_alloc(env, alloc_bytes / 4))
        .raw("raw", || raw_alloc(alloc_bytes))
        .into_row(
            plan,
            Row::new(
                "managed",
                format!("raw calls: alloc (zeroed) + free {} MiB", alloc_bytes / MIB),
                "ms",
                Better::Lower,
            ),
        )?
        .in_unit(|s| s * 1e3);
    rep.push(row.check_vs_raw(1.0 / 0.98, Source::Issue));

    for to_device in [true, false] {
        let way = if to_device {
            "to the device"
        } else {
            "to the host"
        };
        let row = Measurement::new()
            .ours("ours", || ours.prefetch(stream, to_device))
            .raw("raw", || raw.prefetch(to_device))
            .into_row(
                plan,
                Row::new(
                    "managed",
                    format!("raw calls: prefetch {size} {way}"),
                    "GB/s",
                    Better::Higher,
                ),
            )?
            .in_unit(|s| bytes as f64 / s / 1e9);
        rep.push(row.check_vs_raw(0.98, Source::Issue));
    }

    let row = Measurement::new()
        .ours("ours", || ours.advise_pairs(env))
        .raw("raw", || raw.advise_pairs())
        .into_row(
            plan,
            Row::new(
                "managed",
                "raw calls: advice PreferredLocation(device) + NoPreferredLocation",
                "ns/pair",
                Better::Lower,
            ),
        )?
        .in_unit(|s| s * 1e9 / ADVICE_PAIRS as f64);
    rep.push(row.check_vs_raw(1.0 / 0.98, Source::Issue));

    let row = Measurement::new()
        .ours("ours", || ours.kernel(stream))
        .raw("raw", || raw.kernel())
        .into_row(
            plan,
            Row::new(
                "managed",
                format!("raw calls: kernel on {size} of prefetched pages"),
                "ms",
                Better::Lower,
            ),
        )?
        .in_unit(|s| s * 1e3);
    rep.push(row.check_vs_raw(1.0 / 0.98, Source::Issue));

    ours.check()?;
    raw.check()?;
    rep.note("managed, raw calls: ours is a ManagedVec and a scope's operations, raw the same operations on cuMemAllocManaged memory; prefetches and the kernel in GPU time, allocation and advice in host time");
    Ok(())
}

/// `alloc_managed` of `n` `u32`s and its drop: host seconds.
fn ours_alloc(env: &Env, n: usize) -> Result<f64> {
    let t = Instant::now();
    drop(env.dev.alloc_managed::<u32>(n)?);
    Ok(t.elapsed().as_secs_f64())
}

/// `cuMemAllocManaged`, zeroed on the host as `alloc_managed` does, `cuMemFree`: host
/// seconds.
fn raw_alloc(bytes: usize) -> Result<f64> {
    let t = Instant::now();
    // SAFETY: a plain allocation in the current context; the result is checked.
    let ptr =
        unsafe { result::malloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
            .context("cuMemAllocManaged")?;
    // SAFETY: `ptr` is `bytes` bytes of managed memory just allocated, attached globally
    // on a device with concurrent managed access (the case runs only there), so the host
    // may write it; no stream uses it.
    unsafe { std::ptr::with_exposed_provenance_mut::<u8>(ptr as usize).write_bytes(0, bytes) };
    // SAFETY: allocated above, used by nothing, freed once.
    unsafe { result::free_sync(ptr) }.context("cuMemFree")?;
    Ok(t.elapsed().as_secs_f64())
}

/// A `CUmemLocation` of `type_` and `id`, with any CUDA binding (13.2's header moved
/// `id` into a one-member union: the same layout; see stream-core's `driver/versions.rs`).
fn location(type_: sys::CUmemLocationType, id: c_int) -> sys::CUmemLocation {
    #[repr(C)]
    struct Layout {
        type_: sys::CUmemLocationType,
        id: c_int,
    }
    // SAFETY: both layouts are `#[repr(C)]` (type, int id) of the same size, which
    // `transmute` checks; any `int` is a valid id.
    unsafe { std::mem::transmute::<Layout, sys::CUmemLocation>(Layout { type_, id }) }
}

/// The library's side: a managed vec and a timer.
struct Ours {
    data: ManagedVec<u32>,
    timer: GpuTimer,
    kernels: u32,
}

impl Ours {
    fn new(env: &Env, n: usize) -> Result<Self> {
        Ok(Ours {
            data: env.dev.alloc_managed::<u32>(n)?,
            timer: GpuTimer::new(&env.dev)?,
            kernels: 0,
        })
    }

    /// Moves the pages the other way (not timed), then prefetches them `to_device` or to
    /// the host, timed on the GPU.
    fn prefetch(&mut self, stream: &Stream, to_device: bool) -> Result<f64> {
        let Ours { data, timer, .. } = self;
        scope(stream, |s| {
            let view = s.attach_managed(&mut *data)?;
            if to_device {
                s.prefetch_to_host(view)?.wait()?;
            } else {
                s.prefetch_to_device(&view)?;
            }
            Ok::<_, Error>(())
        })?;
        scope(stream, |s| {
            let view = s.attach_managed(&mut *data)?;
            timer.start(s)?;
            if to_device {
                s.prefetch_to_device(&view)?;
                timer.stop(s)?;
            } else {
                let back = s.prefetch_to_host(view)?;
                timer.stop(s)?;
                back.wait()?;
            }
            Ok::<_, Error>(())
        })?;
        Ok(timer.elapsed()?.as_secs_f64())
    }

    /// [`ADVICE_PAIRS`] pairs of advice: host seconds.
    fn advise_pairs(&mut self, env: &Env) -> Result<f64> {
        let t = Instant::now();
        for _ in 0..ADVICE_PAIRS {
            self.data
                .advise(ManagedAdvice::PreferredLocation(ManagedLocation::Device(
                    &env.dev,
                )))?;
            self.data.advise(ManagedAdvice::NoPreferredLocation)?;
        }
        Ok(t.elapsed().as_secs_f64())
    }

    /// The kernel on prefetched pages: GPU seconds.
    fn kernel(&mut self, stream: &Stream) -> Result<f64> {
        let Ours { data, timer, .. } = self;
        scope(stream, |s| {
            let mut view = s.attach_managed(&mut *data)?;
            s.prefetch_to_device(&view)?;
            timer.start(s)?;
            add_one_in_place_u32(s, config(view.len()), &mut view)?;
            timer.stop(s)
        })?;
        self.kernels += 1;
        Ok(self.timer.elapsed()?.as_secs_f64())
    }

    /// Every element is the number of kernels run (the vec started at zero).
    fn check(&self) -> Result<()> {
        check("ours", self.data.host()?, self.kernels)
    }
}

/// The raw side: `cuMemAllocManaged` memory, a stream, a timer and the same kernel.
struct Raw {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    device: c_int,
    stream: RawStream,
    timer: RawTimer,
    _module: RawModule,
    function: sys::CUfunction,
    kernels: u32,
}

impl Raw {
    fn new(env: &Env, bytes: usize) -> Result<Self> {
        let cubin = cuda::compile_cubin(SOURCE, env.dev.compute_capability())
            .context("compiling the managed kernel for the raw side")?;
        let module = RawModule::load(&cubin)?;
        let function = module.function("add_one_in_place_u32")?;
        // SAFETY: a plain allocation in the current context; the result is checked.
        let ptr =
            unsafe { result::malloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
                .context("cuMemAllocManaged")?;
        // SAFETY: as in `raw_alloc`: just allocated, attached globally, used by nothing.
        unsafe { std::ptr::with_exposed_provenance_mut::<u8>(ptr as usize).write_bytes(0, bytes) };
        Ok(Raw {
            ptr,
            bytes,
            device: env.dev.ordinal() as c_int,
            stream: RawStream::new()?,
            timer: RawTimer::new()?,
            _module: module,
            function,
            kernels: 0,
        })
    }

    fn to(&self, to_device: bool) -> sys::CUmemLocation {
        if to_device {
            location(
                sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                self.device,
            )
        } else {
            location(sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, 0)
        }
    }

    /// `cuMemPrefetchAsync` of the whole allocation to `to`, on the raw stream.
    fn prefetch_to(&self, to: sys::CUmemLocation) -> Result<()> {
        // SAFETY: `ptr` is `bytes` bytes of live managed memory; a prefetch only moves
        // pages; the stream is live.
        unsafe { sys::cuMemPrefetchAsync_v2(self.ptr, self.bytes, to, 0, self.stream.0) }
            .result()
            .context("cuMemPrefetchAsync")
    }

    /// As [`Ours::prefetch`].
    fn prefetch(&mut self, to_device: bool) -> Result<f64> {
        self.prefetch_to(self.to(!to_device))?;
        self.stream.sync()?;
        self.timer.start(self.stream.0)?;
        self.prefetch_to(self.to(to_device))?;
        self.timer.stop(self.stream.0)?;
        self.stream.sync()?;
        self.timer.seconds()
    }

    /// As [`Ours::advise_pairs`].
    fn advise_pairs(&mut self) -> Result<f64> {
        // The driver ignores the location of the unset; a valid one stands in, as the
        // library passes.
        let device = self.to(true);
        let t = Instant::now();
        for _ in 0..ADVICE_PAIRS {
            for (advice, at) in [
                (
                    sys::CUmem_advise::CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                    device,
                ),
                (
                    sys::CUmem_advise::CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
                    device,
                ),
            ] {
                // SAFETY: `ptr` is `bytes` bytes of live managed memory; advice changes
                // only where pages prefer to live.
                unsafe { sys::cuMemAdvise_v2(self.ptr, self.bytes, advice, at) }
                    .result()
                    .context("cuMemAdvise")?;
            }
        }
        Ok(t.elapsed().as_secs_f64())
    }

    /// As [`Ours::kernel`].
    fn kernel(&mut self) -> Result<f64> {
        self.prefetch_to(self.to(true))?;
        let launch = cuda::to_cudarc(config(self.bytes / 4));
        let len = self.bytes / 4;
        let mut args = [arg(&self.ptr), arg(&len)];
        self.timer.start(self.stream.0)?;
        // SAFETY: the kernel's parameters are (unsigned*, size_t): the managed memory of
        // `len` u32s and its length; it writes only inside it; the stream is live.
        unsafe {
            result::launch_kernel(
                self.function,
                launch.grid_dim,
                launch.block_dim,
                0,
                self.stream.0,
                &mut args,
            )
        }
        .context("cuLaunchKernel")?;
        self.timer.stop(self.stream.0)?;
        self.stream.sync()?;
        self.kernels += 1;
        self.timer.seconds()
    }

    fn check(&self) -> Result<()> {
        // SAFETY: the raw stream was synchronised after its last work; the memory is
        // `bytes / 4` u32s of live managed memory, readable by the host on a device with
        // concurrent managed access.
        let host = unsafe {
            std::slice::from_raw_parts(
                std::ptr::with_exposed_provenance::<u32>(self.ptr as usize),
                self.bytes / 4,
            )
        };
        check("raw", host, self.kernels)
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.stream.sync();
        // SAFETY: allocated in `new`, freed once, after its stream was synchronised.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

/// Every 4099th element of `host` and the last are `kernels`.
fn check(who: &str, host: &[u32], kernels: u32) -> Result<()> {
    let wrong = host
        .iter()
        .step_by(4099)
        .chain(host.last())
        .find(|&&v| v != kernels);
    match wrong {
        None => Ok(()),
        Some(v) => Err(Error::msg(format!(
            "managed, raw calls: {who}'s buffer holds {v}, expected {kernels} (the kernels run)"
        ))),
    }
}
