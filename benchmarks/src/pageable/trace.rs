//! With `BENCH_STAGING_TRACE=DIR` set: staged 64 MiB copies each way under a few
//! settings (streaming stores, chunk size, threads), each setting's median bandwidth
//! printed and one of its copies traced into `DIR` as a Chrome trace (printed only; a
//! diagnosis of where a staged copy's time goes). Each chunk's DMA is a slice on the
//! scope's stream: back-to-back slices mean the DMA is the slower half, gaps between
//! them mean the host memcpy is.

use std::path::Path;
use stream_core::staging::{set_streaming_stores, StagingConfig, StreamingStores};
use stream_core::trace::Trace;
use stream_core::DeviceVec;

use crate::env::{Env, MIB};
use crate::error::{Error, Result};

/// Untimed copies per setting, then timed ones (the median is printed).
const WARM: usize = 2;
const TIMED: usize = 5;

/// (streaming stores, chunk MiB, threads) of each setting tried.
const SETTINGS: [(StreamingStores, usize, usize); 12] = [
    (StreamingStores::Downloads, 8, 16),
    (StreamingStores::DownloadsAndUploadTails, 8, 16),
    (StreamingStores::Always, 8, 16),
    (StreamingStores::Never, 8, 16),
    (StreamingStores::Downloads, 8, 8),
    (StreamingStores::DownloadsAndUploadTails, 8, 8),
    (StreamingStores::Always, 8, 8),
    (StreamingStores::Never, 8, 8),
    (StreamingStores::DownloadsAndUploadTails, 4, 16),
    (StreamingStores::DownloadsAndUploadTails, 4, 8),
    (StreamingStores::Downloads, 8, 4),
    (StreamingStores::Never, 8, 4),
];

/// Runs the settings, writing their traces into `dir`.
pub(super) fn run(env: &Env, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::msg(format!("staging trace: create {}: {e}", dir.display())))?;
    let bytes = 64 * MIB;
    let n = bytes / 4;
    let src: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut dst: Vec<f32> = vec![0.0; n];
    let mut dev_buf: DeviceVec<f32> = env.dev.alloc_vec(n)?;
    let stream = &env.streams[0];
    let mut copy = super::StagedCopy {
        stream,
        device: &mut dev_buf,
        src: &src,
        dst: &mut dst,
    };
    for (streaming, chunk_mib, threads) in SETTINGS {
        set_streaming_stores(streaming);
        let config = StagingConfig {
            chunk_bytes: chunk_mib * MIB,
            threads,
            ..StagingConfig::for_this_machine()
        };
        for upload in [true, false] {
            let mut times = Vec::with_capacity(TIMED);
            for i in 0..WARM + TIMED {
                let t = copy.seconds(config, upload, None)?;
                if i >= WARM {
                    times.push(t);
                }
            }
            times.sort_by(f64::total_cmp);
            let trace = Trace::new();
            let traced = copy.seconds(config, upload, Some(&trace))?;
            let way = if upload { "up" } else { "down" };
            let name = format!("{way}-{streaming:?}-{chunk_mib}MiB-{threads}t.json");
            let path = dir.join(&name);
            trace
                .write_chrome_json(&path)
                .map_err(|e| Error::msg(format!("staging trace: write {}: {e}", path.display())))?;
            println!(
                "  staging trace: {way:4} streaming {:23} chunk {chunk_mib:>2} MiB, {threads:>2} threads: median {:6.2} GB/s (traced copy {:6.2}) -> {name}",
                format!("{streaming:?}"),
                bytes as f64 / times[TIMED / 2] / 1e9,
                bytes as f64 / traced / 1e9,
            );
        }
    }
    super::variables::restore_streaming_stores()?;
    if dst
        .iter()
        .zip(&src)
        .any(|(a, b)| a.to_bits() != b.to_bits())
    {
        return Err(Error::msg(
            "staging trace: the download differs from the upload",
        ));
    }
    Ok(())
}
