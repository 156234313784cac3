//! The free-memory check every managed allocation passes before the driver is asked
//! (unless the caller opted in to oversubscription): managed memory the GPU cannot hold
//! makes pages migrate back and forth, which can stall the device for seconds or hang
//! it, not only the program.

use crate::error::{Error, Result};

/// The smallest margin: 256 MiB.
const MIN_MARGIN: usize = 256 << 20;

/// Bytes kept free beyond every managed allocation, for the driver, kernels' local
/// memory and the device's other allocations: a sixteenth of the device's memory, at
/// least 256 MiB (5 GiB of an 80 GiB H100).
pub(crate) fn margin(total: usize) -> usize {
    (total / 16).max(MIN_MARGIN)
}

/// `Ok` when `requested` bytes of managed memory fit in a device with `free` of `total`
/// bytes free, on which this process already holds `managed` bytes of managed memory
/// (counted as if all of it were on the device: any of it may migrate there at the next
/// kernel), keeping [`margin`] free; else [`Error::ManagedExceedsFreeMemory`].
pub(crate) fn check(requested: usize, free: usize, total: usize, managed: usize) -> Result<()> {
    let margin = margin(total);
    let available = free.saturating_sub(managed).saturating_sub(margin);
    if requested <= available {
        Ok(())
    } else {
        Err(Error::from(crate::error::ManagedExceedsFreeMemory {
            requested,
            free,
            managed,
            margin,
            available,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: usize = 1 << 30;

    #[test]
    fn the_margin_is_a_sixteenth_of_the_device_and_at_least_256_mib() {
        assert_eq!(margin(80 * GIB), 5 * GIB);
        assert_eq!(margin(2 * GIB), 256 << 20);
        assert_eq!(margin(0), 256 << 20);
    }

    #[test]
    fn a_request_fits_only_below_free_memory_less_live_managed_memory_and_the_margin() {
        let (total, free) = (80 * GIB, 70 * GIB);
        assert!(check(65 * GIB, free, total, 0).is_ok());
        assert!(check(60 * GIB, free, total, 5 * GIB).is_ok());
        let e = check(60 * GIB + 1, free, total, 5 * GIB).unwrap_err();
        assert_eq!(
            e,
            Error::from(crate::error::ManagedExceedsFreeMemory {
                requested: 60 * GIB + 1,
                free,
                managed: 5 * GIB,
                margin: 5 * GIB,
                available: 60 * GIB,
            })
        );
        let message = e.to_string();
        for part in [
            "managed allocation of 64424509441 bytes refused",
            "Device::alloc_managed_oversubscribed",
            "ask for less",
        ] {
            assert!(message.contains(part), "{message:?} lacks {part:?}");
        }
    }

    #[test]
    fn the_whole_card_or_more_never_fits() {
        for (free, managed) in [(80 * GIB, 0), (GIB, 0), (0, 0), (80 * GIB, 100 * GIB)] {
            for requested in [80 * GIB, 160 * GIB, usize::MAX] {
                assert!(
                    check(requested, free, 80 * GIB, managed).is_err(),
                    "{requested} of {free} free with {managed} managed"
                );
            }
        }
        assert!(check(0, 0, 80 * GIB, 0).is_ok());
    }
}
