//! [`ManagedMemoryStats`]: the managed memory this process holds on each GPU, the
//! sibling of [`DeviceMemoryStats`](crate::DeviceMemoryStats) (which counts the device's
//! stream-ordered pool, where managed memory does not come from).

use std::sync::{Mutex, PoisonError};

use crate::device::Device;
use crate::driver::device::DeviceId;

/// Managed memory statistics of one GPU, for this process: bytes of live
/// [`ManagedVec`](crate::ManagedVec)s (wherever their pages are now), how many there
/// are, and the most bytes live at once since the last
/// [`Device::reset_peak_managed_memory_stats`]. Shared by every [`Device`] handle of
/// that GPU. Reading them makes no driver call.
///
/// ```no_run
/// # fn main() -> stream_core::Result<()> {
/// let dev = stream_core::Device::new(0)?;
/// let before = dev.managed_memory_stats();
/// let data = dev.alloc_managed::<f32>(1 << 20)?; // 4 MiB
/// let now = dev.managed_memory_stats();
/// assert_eq!(now.allocated_bytes, before.allocated_bytes + (4 << 20));
/// drop(data);
/// assert_eq!(dev.managed_memory_stats().allocations, before.allocations);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ManagedMemoryStats {
    /// Bytes of the live managed allocations.
    pub allocated_bytes: usize,
    /// How many managed allocations are live (empty `ManagedVec`s allocate nothing and
    /// are not counted).
    pub allocations: usize,
    /// The most bytes live at once since the last reset (never less than
    /// `allocated_bytes`).
    pub peak_allocated_bytes: usize,
}

/// The statistics of every GPU this process has allocated managed memory on.
static REGISTRY: Mutex<Vec<(DeviceId, ManagedMemoryStats)>> = Mutex::new(Vec::new());

/// Runs `f` on the statistics of `device` (zero the first time).
fn with<R>(device: DeviceId, f: impl FnOnce(&mut ManagedMemoryStats) -> R) -> R {
    let mut registry = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
    let index = match registry.iter().position(|(d, _)| *d == device) {
        Some(index) => index,
        None => {
            registry.push((device, ManagedMemoryStats::default()));
            registry.len() - 1
        }
    };
    f(&mut registry[index].1)
}

/// A managed allocation of `bytes` on `device` was made.
pub(crate) fn allocated(device: DeviceId, bytes: usize) {
    with(device, |s| {
        s.allocated_bytes = s.allocated_bytes.saturating_add(bytes);
        s.allocations += 1;
        s.peak_allocated_bytes = s.peak_allocated_bytes.max(s.allocated_bytes);
    });
}

/// A managed allocation of `bytes` on `device` was freed (or leaked for good).
pub(crate) fn freed(device: DeviceId, bytes: usize) {
    with(device, |s| {
        s.allocated_bytes = s.allocated_bytes.saturating_sub(bytes);
        s.allocations = s.allocations.saturating_sub(1);
    });
}

/// The statistics of `device` now.
pub(crate) fn of(device: DeviceId) -> ManagedMemoryStats {
    with(device, |s| *s)
}

impl Device {
    /// Managed memory statistics of this GPU for this process: live bytes, live
    /// allocations, and the peak since the last
    /// [`reset_peak_managed_memory_stats`](Self::reset_peak_managed_memory_stats). See
    /// [`ManagedMemoryStats`] for an example. Makes no driver call.
    pub fn managed_memory_stats(&self) -> ManagedMemoryStats {
        of(self.inner.device)
    }

    /// Restarts the peak of [`managed_memory_stats`](Self::managed_memory_stats) from
    /// the bytes live now.
    pub fn reset_peak_managed_memory_stats(&self) {
        with(self.inner.device, |s| {
            s.peak_allocated_bytes = s.allocated_bytes
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_and_frees_move_the_counts_and_the_peak_stays() {
        // A device handle no real device has: `DeviceId` is a plain number here.
        let device = DeviceId::for_tests(1000);
        allocated(device, 100);
        allocated(device, 50);
        freed(device, 100);
        let s = of(device);
        assert_eq!(
            (s.allocated_bytes, s.allocations, s.peak_allocated_bytes),
            (50, 1, 150)
        );
        with(device, |s| s.peak_allocated_bytes = s.allocated_bytes);
        assert_eq!(of(device).peak_allocated_bytes, 50);
        freed(device, 50);
        assert_eq!(of(device).allocations, 0);
    }
}
