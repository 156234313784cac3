//! [`Scope::zero`] and [`Scope::fill`]: setting device memory with the driver's memsets,
//! enqueued on the scope's stream.

use crate::driver::memory::{memset, Memset};
use crate::error::{byte_len, Result};
use crate::memory::view::RawSlice;
use crate::memory::{value_bytes, DeviceMemoryMut, DeviceRepr};
use crate::scope::Scope;
use crate::sealed::TOKEN;
use crate::trace::Category;

impl<'s, 'env> Scope<'s, 'env> {
    /// Sets every byte of `dst` to zero, asynchronously.
    pub fn zero<T: DeviceRepr>(&'s self, dst: &mut impl DeviceMemoryMut<'s, T>) -> Result<()> {
        let dst = dst.raw(TOKEN);
        let bytes = byte_len::<T>(dst.len)?;
        self.memset_all(dst, bytes, &[(0, Memset::Bytes(0), bytes)])
    }

    /// Sets every element of `dst` to `value`, asynchronously, with the driver's memset
    /// (one call for 1-, 2- and 4-byte types and for values whose 4-byte words are all
    /// equal; one strided call per 4-byte word, or per byte, otherwise).
    pub fn fill<T: DeviceRepr>(
        &'s self,
        dst: &mut impl DeviceMemoryMut<'s, T>,
        value: T,
    ) -> Result<()> {
        let dst = dst.raw(TOKEN);
        let bytes = byte_len::<T>(dst.len)?;
        self.memset_all(dst, bytes, &memsets_of(value_bytes(&value), dst.len))
    }

    /// Enqueues `memsets` (offset in bytes from `dst`, what, count) that together set
    /// the `bytes` bytes of `dst`.
    fn memset_all(
        &self,
        dst: RawSlice,
        bytes: usize,
        memsets: &[(u64, Memset, usize)],
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.traced("fill", Category::Fill, Some(bytes as u64), || {
            for &(offset, fill, count) in memsets {
                // SAFETY: `dst` is `bytes` bytes of device memory of this scope, borrowed
                // mutably for the call (so no other work of this scope touches it) and
                // freed, if at all, stream-ordered after this memset. `memsets_of` writes
                // only inside `dst`: whole bytes, or 2- or 4-byte words at element
                // boundaries (aligned: allocations are aligned to at least 256 bytes and
                // views start at element boundaries), or one byte or word at the same
                // offset of each element. The bytes written are those of a `T` value (or
                // zeros), a valid `T`.
                unsafe { memset(dst.ptr + offset, fill, count, &self.stream.raw) }?;
            }
            Ok(())
        })
    }
}

/// The memsets that write `value` (the bytes of one element) into each of `len`
/// elements: (offset in bytes, what, count).
fn memsets_of(value: &[u8], len: usize) -> Vec<(u64, Memset, usize)> {
    let size = value.len();
    let words: Vec<u32> = value
        .chunks_exact(4)
        .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    match (value, words.as_slice()) {
        ([b], _) => vec![(0, Memset::Bytes(*b), len)],
        ([b0, b1], _) => vec![(0, Memset::Words16(u16::from_ne_bytes([*b0, *b1])), len)],
        (_, [first, rest @ ..]) if size.is_multiple_of(4) && rest.iter().all(|w| w == first) => {
            vec![(0, Memset::Words32(*first), len * words.len())]
        }
        _ if size.is_multiple_of(4) => words
            .iter()
            .enumerate()
            .map(|(i, &value)| {
                let pitch = size;
                (4 * i as u64, Memset::Strided32 { value, pitch }, len)
            })
            .collect(),
        _ => value
            .iter()
            .enumerate()
            .map(|(i, &value)| {
                let pitch = size;
                (i as u64, Memset::Strided8 { value, pitch }, len)
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies `memsets` to a host buffer of `len` elements of `size` bytes, the way the
    /// driver's memsets would.
    fn apply(memsets: &[(u64, Memset, usize)], size: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0xEEu8; size * len];
        for &(offset, fill, count) in memsets {
            let at = offset as usize;
            match fill {
                Memset::Bytes(v) => out[at..at + count].fill(v),
                Memset::Words16(v) => (0..count).for_each(|i| {
                    out[at + 2 * i..at + 2 * i + 2].copy_from_slice(&v.to_ne_bytes())
                }),
                Memset::Words32(v) => (0..count).for_each(|i| {
                    out[at + 4 * i..at + 4 * i + 4].copy_from_slice(&v.to_ne_bytes())
                }),
                Memset::Strided32 { value, pitch } => (0..count).for_each(|i| {
                    let o = at + pitch * i;
                    out[o..o + 4].copy_from_slice(&value.to_ne_bytes())
                }),
                Memset::Strided8 { value, pitch } => {
                    (0..count).for_each(|i| out[at + pitch * i] = value)
                }
            }
        }
        out
    }

    #[test]
    fn memsets_write_every_element_and_nothing_else_for_every_size() {
        for size in [1usize, 2, 3, 4, 5, 6, 8, 12, 16] {
            for len in [1usize, 2, 7] {
                let value: Vec<u8> = (0..size).map(|i| (i * 37 + 11) as u8).collect();
                let got = apply(&memsets_of(&value, len), size, len);
                let want: Vec<u8> = value.iter().copied().cycle().take(size * len).collect();
                assert_eq!(got, want, "element of {size} bytes, {len} elements");
            }
        }
        let uniform = [7u8, 0, 0, 0, 7, 0, 0, 0];
        assert_eq!(
            memsets_of(&uniform, 3).len(),
            1,
            "equal words take one memset"
        );
    }
}
