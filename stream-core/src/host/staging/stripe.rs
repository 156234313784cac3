//! Copying one stripe of a staged copy, with non-temporal ("streaming") stores where the
//! processor has them and the direction calls for them.
//!
//! An ordinary store first reads the destination's cache line into the cache (a read
//! for ownership), so a copy into memory that is not cached moves each byte three times
//! through memory; a streaming store writes the line without reading it, so twice, and
//! leaves the caches to the source. Streaming stores are weakly ordered: an `sfence` at
//! the end of the stripe makes them visible, to other processors and to the DMA engine,
//! before the stripe reports that it is done.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Which staged copies write with streaming stores (on x86-64; other processors always
/// copy with ordinary stores).
///
/// Which direction gains was measured (`BENCH_STREAMING_STORES` in the benchmark's
/// pageable case, H100 and H200 hosts, 2026-11-24). A download writes the user's
/// memory, which is not in the cache: streaming stores moved 64 MiB downloads from
/// 0.46-0.66x to 0.69-0.72x of pinned DMA and left 1 GiB ones where they were (0.79-0.83x
/// against 0.78-0.81x on the H200). An upload writes the same few staging blocks over and
/// over, which ordinary stores keep in the cache: 1 GiB uploads ran at 0.87x of pinned
/// with ordinary stores against 0.67-0.73x with streaming ones on the H200.
///
/// Except at an upload's end. Traces of staged 64 MiB uploads (`BENCH_STAGING_TRACE` in
/// the pageable case, 2x H100 host, 2026-11-26) showed each chunk's DMA back to back (the
/// DMA, not the memcpy, was the slower half), at 52-53 GB/s for the chunks in the middle
/// and 10-17 GB/s for the last one or two (an 8 MiB chunk in 733-874 us instead of 157):
/// the DMA engine reads lines the memcpy threads just wrote, and while the writes of a
/// following chunk push the earlier chunks' lines out of the cores' caches, nothing
/// pushes out the last ones' (the DMA then snoops every line). That tail was a third of a
/// 64 MiB upload's time. Streaming stores leave no line in a cache, so the default writes
/// an upload's last [`UPLOAD_STREAMING_TAIL`] chunks with them and the others with
/// ordinary stores. Streaming every chunk ([`Always`](Self::Always)) ran those uploads at
/// 40-43 GB/s against 23-35 with ordinary stores everywhere, each chunk's DMA at about
/// 42-44 GB/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamingStores {
    /// None: ordinary stores both ways.
    Never,
    /// Downloads only: their destination is the user's memory.
    Downloads,
    /// Downloads, and the last [`UPLOAD_STREAMING_TAIL`] chunks of each upload (the
    /// default).
    DownloadsAndUploadTails,
    /// Uploads (every chunk, into the staging blocks) and downloads.
    Always,
}

/// How many of an upload's last chunks the default setting writes with streaming
/// stores (see [`StreamingStores`]).
pub const UPLOAD_STREAMING_TAIL: usize = 2;

impl StreamingStores {
    /// Whether a download (device to host) streams.
    pub fn for_downloads(self) -> bool {
        cfg!(target_arch = "x86_64") && self != StreamingStores::Never
    }

    /// How many of an upload's last chunks are written with streaming stores (`usize::MAX`:
    /// every chunk).
    pub fn upload_tail(self) -> usize {
        if !cfg!(target_arch = "x86_64") {
            return 0;
        }
        match self {
            StreamingStores::Never | StreamingStores::Downloads => 0,
            StreamingStores::DownloadsAndUploadTails => UPLOAD_STREAMING_TAIL,
            StreamingStores::Always => usize::MAX,
        }
    }
}

/// The process-wide setting, as a [`StreamingStores`] discriminant.
static STREAMING: AtomicU8 = AtomicU8::new(DEFAULT_STREAMING as u8);

/// The default of [`STREAMING`] (see [`StreamingStores`]).
const DEFAULT_STREAMING: StreamingStores = StreamingStores::DownloadsAndUploadTails;

/// Sets which staged copies use streaming stores, for the whole process (see
/// [`StreamingStores`] for the measurements behind the default,
/// [`StreamingStores::DownloadsAndUploadTails`]). For benchmarks that compare the settings.
pub fn set_streaming_stores(setting: StreamingStores) {
    STREAMING.store(setting as u8, Ordering::Relaxed);
    STREAMING_SET.store(true, Ordering::Release);
}

/// Undoes [`set_streaming_stores`]: staged copies use the default again, or, for
/// downloads, the [calibration](crate::staging::staging_calibration)'s choice if one ran. For benchmarks
/// that compared the settings and must not leave one pinned for what follows.
pub fn reset_streaming_stores() {
    STREAMING.store(DEFAULT_STREAMING as u8, Ordering::Relaxed);
    STREAMING_SET.store(false, Ordering::Release);
}

/// Set once [`set_streaming_stores`] was called (and not [`reset_streaming_stores`]
/// since): the setting is the user's, not the default a calibration may replace.
static STREAMING_SET: AtomicBool = AtomicBool::new(false);

/// Whether a staged download writes with streaming stores: never in an unoptimised
/// build; else the setting of [`set_streaming_stores`] if one was made, else the
/// [calibration](super::calibration)'s choice if it ran, else the default
/// ([`StreamingStores::DownloadsAndUploadTails`]).
///
/// Unoptimised, the streaming loop (16 bytes per iteration, every call and bounds check
/// kept) copied 0.12 GB/s on a 2-core build machine where `copy_from_slice` (memcpy) ran at
/// full speed: a 64 MiB staged download took half a second in a debug build.
pub(crate) fn streaming_downloads() -> bool {
    if cfg!(debug_assertions) {
        return false;
    }
    if !STREAMING_SET.load(Ordering::Acquire) {
        if let Some(cal) = super::calibration::staging_calibration() {
            return cal.streaming_downloads && cfg!(target_arch = "x86_64");
        }
    }
    streaming_stores().for_downloads()
}

/// How many of a staged upload's last chunks are written with streaming stores: none in
/// an unoptimised build (see [`streaming_downloads`]), else per the setting of
/// [`set_streaming_stores`] (the calibration does not choose it: the traces behind the
/// default measured it, see [`StreamingStores`]).
pub(crate) fn upload_streaming_tail() -> usize {
    if cfg!(debug_assertions) {
        return 0;
    }
    streaming_stores().upload_tail()
}

/// Which staged copies use streaming stores (see [`set_streaming_stores`]).
pub fn streaming_stores() -> StreamingStores {
    StreamingStores::from_discriminant(STREAMING.load(Ordering::Relaxed))
}

impl StreamingStores {
    /// The setting stored as `value` (`setting as u8`).
    fn from_discriminant(value: u8) -> StreamingStores {
        match value {
            x if x == StreamingStores::Never as u8 => StreamingStores::Never,
            x if x == StreamingStores::Downloads as u8 => StreamingStores::Downloads,
            x if x == StreamingStores::Always as u8 => StreamingStores::Always,
            _ => StreamingStores::DownloadsAndUploadTails,
        }
    }
}

/// Below this, a stripe is copied with ordinary stores (a streaming store of a few
/// cache lines gains nothing).
const STREAMING_MIN: usize = 4096;

/// Copies `src` into `dst` (the first `min` of their lengths), with streaming stores
/// when `streaming` (and the processor has them).
pub(super) fn copy_stripe(dst: &mut [u8], src: &[u8], streaming: bool) {
    let len = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..len], &src[..len]);
    #[cfg(target_arch = "x86_64")]
    if len >= STREAMING_MIN && streaming {
        // SAFETY: `streaming_copy` needs SSE2, which every x86-64 processor has (it is
        // part of the architecture's baseline).
        unsafe { streaming_copy(dst, src) };
        return;
    }
    dst.copy_from_slice(src);
}

/// [`copy_stripe`] with streaming stores: ordinary stores up to the first 16-byte
/// aligned byte of `dst` and after the last whole 16 bytes, streaming stores between,
/// then a store fence. `dst` and `src` have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn streaming_copy(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_set_epi64x, _mm_sfence, _mm_stream_si128};
    let head = dst.as_ptr().align_offset(16).min(dst.len());
    let (dst_head, dst_rest) = dst.split_at_mut(head);
    let (src_head, src_rest) = src.split_at(head);
    dst_head.copy_from_slice(src_head);
    let mut dst_lines = dst_rest.chunks_exact_mut(16);
    let mut src_lines = src_rest.chunks_exact(16);
    for (d, s) in (&mut dst_lines).zip(&mut src_lines) {
        let word = |at: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&s[at..at + 8]);
            i64::from_ne_bytes(bytes)
        };
        // Little-endian x86: the low 64 bits are the first 8 bytes.
        let value = _mm_set_epi64x(word(8), word(0));
        // SAFETY: `d` is 16 writable bytes of `dst` (borrowed mutably), 16-byte aligned
        // (`dst_rest` starts at an aligned address and every chunk is 16 bytes long),
        // which is what `_mm_stream_si128` requires; SSE2 is part of x86-64.
        unsafe { _mm_stream_si128(d.as_mut_ptr().cast::<__m128i>(), value) };
    }
    dst_lines
        .into_remainder()
        .copy_from_slice(src_lines.remainder());
    // The streaming stores above become visible before anything this thread does next
    // (counting the stripe done, enqueueing the DMA that reads it).
    _mm_sfence();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_are_exact_at_every_alignment_and_length_with_and_without_streaming() {
        let src: Vec<u8> = (0..(1 << 16) + 64).map(|i| (i * 131 + 7) as u8).collect();
        for streaming in [true, false] {
            for offset in 0..17 {
                for len in [0, 1, 15, 16, 17, 4095, 4096, 4097, 40_000, 1 << 16] {
                    let mut dst = vec![0xA5u8; len + 40];
                    copy_stripe(&mut dst[offset..offset + len], &src[3..3 + len], streaming);
                    assert!(
                        dst[..offset].iter().all(|&b| b == 0xA5),
                        "before the stripe"
                    );
                    assert!(dst[offset + len..].iter().all(|&b| b == 0xA5), "after it");
                    assert_eq!(&dst[offset..offset + len], &src[3..3 + len]);
                }
            }
        }
    }

    #[test]
    fn downloads_and_upload_tails_stream_by_default_and_the_setting_picks_the_directions() {
        let x86 = cfg!(target_arch = "x86_64");
        let tail = if x86 { UPLOAD_STREAMING_TAIL } else { 0 };
        let default = StreamingStores::from_discriminant(STREAMING.load(Ordering::Relaxed));
        if !STREAMING_SET.load(Ordering::Acquire) {
            assert_eq!(default, StreamingStores::DownloadsAndUploadTails);
        }
        let cases = [
            (StreamingStores::Never, false, 0),
            (StreamingStores::Downloads, x86, 0),
            (StreamingStores::DownloadsAndUploadTails, x86, tail),
            (
                StreamingStores::Always,
                x86,
                if x86 { usize::MAX } else { 0 },
            ),
        ];
        for (setting, downloads, upload_tail) in cases {
            assert_eq!(setting.for_downloads(), downloads, "{setting:?}");
            assert_eq!(setting.upload_tail(), upload_tail, "{setting:?}");
        }
        for (setting, ..) in cases {
            assert_eq!(
                StreamingStores::from_discriminant(setting as u8),
                setting,
                "{setting:?} does not survive the process-wide setting's encoding"
            );
        }
        // Pinning a setting, then undoing it (here, the one test that touches the
        // process-wide setting, so that no other sees it change).
        set_streaming_stores(StreamingStores::Always);
        assert_eq!(streaming_stores(), StreamingStores::Always);
        assert!(STREAMING_SET.load(Ordering::Acquire));
        reset_streaming_stores();
        assert_eq!(streaming_stores(), DEFAULT_STREAMING);
        assert!(!STREAMING_SET.load(Ordering::Acquire));
    }
}
