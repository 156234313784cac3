//! [`Device::prepare_kernels`]: compiles and loads kernel modules now, side by side, so
//! that their kernels' first launches find them ready and a compile error surfaces at
//! start-up rather than at a first launch deep inside a scope.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernel::declaration::KernelSource;
use crate::kernel::module_cache::ModuleCache;

impl Device {
    /// Compiles each CUDA source in `sources` for this device (or JIT-loads each PTX
    /// text) and loads it into the device, now, several at once, so that the first
    /// launch of a kernel declared with one of these sources (`#[kernel(cuda = SRC)]`)
    /// only looks its function up. A server calls it before taking requests, so that no
    /// first request waits for NVRTC (a tenth of a second to a second a module).
    ///
    /// A source is compiled once per process for devices of one compute capability, as
    /// at a first launch: preparing it on a second device of the same kind only loads
    /// the image. Preparing a source that is already loaded on this device does nothing.
    /// The modules stay loaded until the device is dropped.
    ///
    /// Returns the error of the first source (in the order given) that failed: a
    /// [`KernelCompile`](crate::error::KernelCompile) with NVRTC's log, naming it
    /// `source {i} of Device::prepare_kernels`. The sources that succeeded stay loaded.
    ///
    /// ```no_run
    /// use stream_core::{kernel, Device, KernelSource, LaunchConfig};
    ///
    /// const SRC: &str = r#"
    /// extern "C" __global__ void twice(float* x, size_t n) {
    ///     size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    ///     if (i < n) x[i] *= 2.0f;
    /// }"#;
    ///
    /// #[kernel(cuda = SRC, block = 256)]
    /// unsafe fn twice(x: &mut [f32]);
    ///
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = Device::new(0)?;
    /// dev.prepare_kernels(&[KernelSource::Cuda(SRC)])?; // compiles now
    /// let stream = dev.new_stream()?;
    /// stream_core::scope(&stream, |s| {
    ///     let mut x = s.upload(&[1.0f32; 1000])?;
    ///     twice(s, LaunchConfig::for_elements(1000, 256), &mut x) // no compile here
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn prepare_kernels(&self, sources: &[KernelSource]) -> Result<()> {
        let cache = ModuleCache::of(&self.inner);
        let next = AtomicUsize::new(0);
        // Takes the next source not yet taken until none is left; returns the failures.
        let work = || {
            let mut failed = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&source) = sources.get(i) else {
                    return failed;
                };
                let label = format!("source {i} of Device::prepare_kernels");
                if let Err(e) = cache.load_module(&label, source, &self.inner) {
                    failed.push((i, e));
                }
            }
        };
        let helpers = thread::available_parallelism()
            .map_or(1, NonZeroUsize::get)
            .min(sources.len())
            .saturating_sub(1);
        let failed: Vec<(usize, Error)> = thread::scope(|scope| {
            // A helper that cannot be spawned leaves its share to the others.
            let spawned: Vec<_> = (0..helpers)
                .filter_map(|_| {
                    thread::Builder::new()
                        .name("stream-core prepare".into())
                        .spawn_scoped(scope, work)
                        .ok()
                })
                .collect();
            let mut failed = work();
            for helper in spawned {
                match helper.join() {
                    Ok(theirs) => failed.extend(theirs),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            failed
        });
        match failed.into_iter().min_by_key(|&(i, _)| i) {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }
}
