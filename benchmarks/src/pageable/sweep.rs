//! The staging sweep of the pageable case, with `BENCH_STAGING_SWEEP` set: printed only,
//! used to choose the library's staging defaults.

use stream_core::staging::{set_streaming_stores, StagingConfig, StreamingStores};
use stream_core::DeviceVec;

use crate::env::Env;
use crate::env::MIB;
use crate::error::Result;

/// With `BENCH_STAGING_SWEEP` set: the staged path's bandwidth, both directions, at
/// 64 MiB, for a grid of chunk sizes, ring depths and thread counts (printed only; used
/// to choose the library's defaults).
pub(super) fn run(env: &Env) -> Result<()> {
    let bytes = 64 * MIB;
    let n = bytes / 4;
    let src: Vec<f32> = vec![1.0; n];
    let mut dst: Vec<f32> = vec![0.0; n];
    let mut dev_buf: DeviceVec<f32> = env.dev.alloc_vec(n)?;
    let stream = &env.streams[0];
    println!(
        "  staging sweep, 64 MiB: streaming stores (which copies), chunk MiB, ring, threads -> host-to-device GB/s, device-to-host GB/s"
    );
    let machine = StagingConfig::for_this_machine();
    println!(
        "  staging sweep: this machine's setting: chunk {} MiB, ring {}, threads {}",
        machine.chunk_bytes / MIB,
        machine.ring_blocks,
        machine.threads
    );
    // The library's default stores over the grid, then the other settings at the
    // machine's setting.
    let grid = [4usize, 8, 16]
        .into_iter()
        .flat_map(|chunk| [4usize, 8].map(move |ring| (chunk, ring)))
        .flat_map(|(chunk, ring)| {
            [8usize, 12, 14, 16].map(move |threads| {
                (
                    StreamingStores::DownloadsAndUploadTails,
                    chunk,
                    ring,
                    threads,
                )
            })
        })
        .chain(
            [
                StreamingStores::Never,
                StreamingStores::Downloads,
                StreamingStores::Always,
            ]
            .map(|streaming| {
                (
                    streaming,
                    machine.chunk_bytes / MIB,
                    machine.ring_blocks,
                    machine.threads,
                )
            }),
        );
    let mut copy = super::StagedCopy {
        stream,
        device: &mut dev_buf,
        src: &src,
        dst: &mut dst,
    };
    for (streaming, chunk_mib, ring, threads) in grid {
        set_streaming_stores(streaming);
        let cfg = StagingConfig {
            chunk_bytes: chunk_mib * MIB,
            ring_blocks: ring,
            threads,
            ..StagingConfig::DEFAULT
        };
        let mut time = |upload: bool| -> Result<f64> {
            let mut times = (0..6)
                .map(|_| copy.seconds(cfg, upload, None))
                .collect::<Result<Vec<f64>>>()?;
            times.sort_by(f64::total_cmp);
            Ok(bytes as f64 / times[times.len() / 2] / 1e9)
        };
        let up = time(true)?;
        let down = time(false)?;
        println!(
            "  staging sweep: {:23} {chunk_mib:>2} {ring} {threads:>2} -> {up:6.2} {down:6.2}",
            format!("{streaming:?}")
        );
    }
    super::variables::restore_streaming_stores()?;
    Ok(())
}
