//! Copying one stripe of a staged copy, with non-temporal ("streaming") stores where the
//! processor has them.
//!
//! A staged copy writes memory it will not read again soon (a pinned block the DMA
//! engine reads next, or a destination far larger than the caches). An ordinary store
//! first reads the destination's cache line into the cache (a read for ownership), so
//! the copy moves each byte three times through memory; a streaming store writes the
//! line without reading it, so twice. Streaming stores are weakly ordered: an `sfence`
//! at the end of the stripe makes them visible, to other processors and to the DMA
//! engine, before the stripe reports that it is done.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether stripes use streaming stores (where the processor has them).
static STREAMING: AtomicBool = AtomicBool::new(false);

/// Turns streaming stores in staged copies on or off for the whole process (off by
/// default: on the H100 host they were slower, see [`staging`](crate::staging);
/// processors other than x86-64 always copy with ordinary stores). For benchmarks
/// that compare the two.
pub fn set_streaming_stores(on: bool) {
    STREAMING.store(on, Ordering::Relaxed);
}

/// Whether staged copies use streaming stores (see [`set_streaming_stores`]).
pub fn streaming_stores() -> bool {
    cfg!(target_arch = "x86_64") && STREAMING.load(Ordering::Relaxed)
}

/// Below this, a stripe is copied with ordinary stores (a streaming store of a few
/// cache lines gains nothing).
const STREAMING_MIN: usize = 4096;

/// Copies `src` into `dst` (the first `min` of their lengths).
pub(super) fn copy_stripe(dst: &mut [u8], src: &[u8]) {
    let len = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..len], &src[..len]);
    #[cfg(target_arch = "x86_64")]
    if len >= STREAMING_MIN && streaming_stores() {
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
        let before = STREAMING.load(Ordering::Relaxed);
        for streaming in [true, false] {
            set_streaming_stores(streaming);
            for offset in 0..17 {
                for len in [0, 1, 15, 16, 17, 4095, 4096, 4097, 40_000, 1 << 16] {
                    let mut dst = vec![0xA5u8; len + 40];
                    copy_stripe(&mut dst[offset..offset + len], &src[3..3 + len]);
                    assert!(
                        dst[..offset].iter().all(|&b| b == 0xA5),
                        "before the stripe"
                    );
                    assert!(dst[offset + len..].iter().all(|&b| b == 0xA5), "after it");
                    assert_eq!(&dst[offset..offset + len], &src[3..3 + len]);
                }
            }
        }
        set_streaming_stores(before);
    }
}
