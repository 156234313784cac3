//! The lock that runs a binary's tests one at a time, where they must not overlap.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Takes this test binary's one lock, for tests that must not run beside each other
/// (they compare process-wide statistics, prove timing windows, or make threads wait
/// for the whole device). Each test file is its own binary, so the lock covers only
/// that file's tests; a test that panicked while holding it does not poison it for
/// the others.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}
