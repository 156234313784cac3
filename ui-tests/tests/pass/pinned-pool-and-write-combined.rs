//! The pinned pool's everyday use keeps compiling: a write-combined buffer as an upload
//! source, a pinned buffer reused across scopes after `wait`, the pool's statistics
//! read from another thread, and `trim_pinned_memory` between phases.
use stream_core::{scope, Device, Error, PinnedMemoryStats};

fn run(dev: &Device) -> Result<(), Error> {
    let stream = dev.new_stream()?;
    let mut upload = dev.alloc_pinned_write_combined::<f32>(1024)?;
    upload.fill(1.0);
    let mut download = dev.alloc_pinned::<f32>(1024)?;
    for _ in 0..2 {
        scope(&stream, |s| {
            let x = s.upload(&upload)?;
            s.copy_to_host(&x, &mut download)?.wait()?;
            Ok::<_, Error>(())
        })?;
        download[0] += 1.0;
    }
    let stats: PinnedMemoryStats = std::thread::scope(|t| {
        t.spawn(|| dev.pinned_memory_stats())
            .join()
            .unwrap_or_default()
    });
    let _ = (stats.in_use_bytes, stats.cached_bytes, stats.peak_in_use_bytes);
    dev.reset_peak_pinned_memory_stats();
    drop((upload, download));
    let _freed: usize = dev.trim_pinned_memory(0)?;
    Ok(())
}

fn main() {
    let _ = run;
}
