//! [`Env`]: what every case shares, made once per run: the device, our streams, the
//! raw and cudarc contexts and streams, and the kernels loaded into each.

use crate::error::{Context, Error, Result};
use crate::raw::{RawContext, RawFunction, RawModule, RawStream};
use crate::sampling::Config;
use crate::{cuda, raw, report};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use cudarc::nvrtc::Ptx;
use std::sync::Arc;
use stream_core::{Device, Stream};

/// Bytes in a MiB, for the cases' sizes.
pub const MIB: usize = 1 << 20;

/// Everything the cases share: the device, streams of each implementation, and the
/// benchmark kernels loaded for each.
pub struct Env {
    /// Sizes and repetitions.
    pub cfg: Config,
    /// Raw baseline: the context (bound on worker threads).
    pub raw_ctx: RawContext,
    /// Raw baseline: four non-blocking streams.
    pub raw_streams: Vec<RawStream>,
    /// Raw baseline: `tiny_u32`.
    pub raw_tiny: RawFunction,
    /// Raw baseline: `work_f32`.
    pub raw_work: RawFunction,
    /// Keeps the raw module loaded while `raw_tiny`/`raw_work` are in use.
    _raw_module: RawModule,
    /// cudarc, one stream: its default stream, on a context object without streams of
    /// its own (so event tracking never engages).
    pub cu1: Arc<CudaStream>,
    /// cudarc, one stream: `tiny_u32`.
    pub cu1_tiny: CudaFunction,
    /// cudarc, one stream: `work_f32`.
    pub cu1_work: CudaFunction,
    /// cudarc, several streams: four `new_stream`s of a second context object (event
    /// tracking on).
    pub cu2: Vec<Arc<CudaStream>>,
    /// cudarc, several streams: `tiny_u32`.
    pub cu2_tiny: CudaFunction,
    /// cudarc, several streams: `work_f32`.
    pub cu2_work: CudaFunction,
    /// Ours: four streams.
    pub streams: Vec<Stream>,
    /// Ours: the device (dropped last: it holds the primary context).
    pub dev: Device,
}

impl Env {
    pub fn open(ordinal: usize, cfg: Config) -> Result<(Env, Vec<(String, String)>)> {
        // The library's `Device::new` first: it turns a missing driver or GPU into an
        // error, where cudarc's lazy loader would panic.
        let dev = Device::new(ordinal)?;
        let streams = (0..4)
            .map(|_| dev.new_stream())
            .collect::<stream_core::Result<Vec<_>>>()?;
        let raw_ctx = RawContext::current()?;
        let cubin = cuda::compile_cubin(cuda::SOURCE, dev.compute_capability())
            .context("compiling the benchmark kernels for the raw and cudarc baselines")?;
        let raw_module = RawModule::load(&cubin)?;
        let raw_tiny = RawFunction(raw_module.function("tiny_u32")?);
        let raw_work = RawFunction(raw_module.function("work_f32")?);
        let raw_streams = (0..4)
            .map(|_| RawStream::new())
            .collect::<Result<Vec<_>>>()?;

        let ctx1 = CudaContext::new(ordinal).context("cudarc: CudaContext::new")?;
        let cu1 = ctx1.default_stream();
        let m1 = ctx1
            .load_module(Ptx::from_binary(cubin.clone()))
            .context("cudarc: load_module")?;
        let ctx2 = CudaContext::new(ordinal).context("cudarc: CudaContext::new")?;
        let cu2 = (0..4)
            .map(|_| ctx2.new_stream())
            .collect::<std::result::Result<Vec<_>, _>>()
            .context("cudarc: new_stream")?;
        let m2 = ctx2
            .load_module(Ptx::from_binary(cubin))
            .context("cudarc: load_module")?;
        if ctx1.is_managing_stream_synchronization() || !ctx2.is_managing_stream_synchronization() {
            return Err(Error::msg(
                "cudarc's event tracking is not in the expected state (off on its default-stream context, on with streams of its own)",
            ));
        }
        let load = |m: &Arc<cudarc::driver::CudaModule>, name: &str| {
            m.load_function(name)
                .context(&format!("cudarc: load_function({name})"))
        };
        let header = vec![
            ("device".to_owned(), dev.name()?),
            ("ordinal".to_owned(), ordinal.to_string()),
            (
                "compute_capability".to_owned(),
                format!(
                    "{}.{}",
                    dev.compute_capability().0,
                    dev.compute_capability().1
                ),
            ),
            (
                "memory_mib".to_owned(),
                (dev.total_memory()? >> 20).to_string(),
            ),
            ("driver".to_owned(), raw::driver_version()?),
            ("date_utc".to_owned(), report::utc_now()),
            (
                "mode".to_owned(),
                if cfg.quick { "quick" } else { "full" }.to_owned(),
            ),
            ("repeat".to_owned(), cfg.repeat.to_string()),
            (
                "host_cpus".to_owned(),
                std::thread::available_parallelism()
                    .map_or(0, |n| n.get())
                    .to_string(),
            ),
            (
                "benchmarks_version".to_owned(),
                env!("CARGO_PKG_VERSION").to_owned(),
            ),
        ];
        Ok((
            Env {
                cfg,
                raw_ctx,
                raw_streams,
                raw_tiny,
                raw_work,
                _raw_module: raw_module,
                cu1_tiny: load(&m1, "tiny_u32")?,
                cu1_work: load(&m1, "work_f32")?,
                cu1,
                cu2_tiny: load(&m2, "tiny_u32")?,
                cu2_work: load(&m2, "work_f32")?,
                cu2,
                streams,
                dev,
            },
            header,
        ))
    }
}

/// `bytes` as the cases name sizes: "8 B", "32 KiB", "64 MiB".
pub fn size_name(bytes: usize) -> String {
    match bytes {
        b if b >= MIB => format!("{} MiB", b / MIB),
        b if b >= 1024 => format!("{} KiB", b / 1024),
        b => format!("{b} B"),
    }
}
