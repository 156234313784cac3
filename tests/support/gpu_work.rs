//! Small pieces of GPU work that several test files issue inside their scopes.

use stream_core::{Error, LaunchConfig, Scope};

use crate::check::check_eq;
use crate::element::Element;
use crate::TestResult;

/// Queues a kernel that busy-waits about `cycles` clock cycles on `s`'s stream (about
/// 50 ms per 100 million on an H100/H200), so that a missing cross-stream dependency
/// would let other work run first.
pub fn spin<'s>(s: &'s Scope<'s, '_>, cycles: u64) -> Result<(), Error> {
    let mut flag = s.alloc::<u32>(1)?;
    kernels::declarations::spin_then_write_u32(
        s,
        LaunchConfig::for_elements(1, 32),
        cycles,
        1,
        &mut flag,
    )
}

/// Uploads `input` and downloads it into `out` inside `s`, then checks it: proves the
/// scope still works.
pub fn round_trip_in<'s, 'env, T: Element>(
    s: &'s Scope<'s, 'env>,
    input: &'env [T],
    out: &'env mut [T],
    what: &str,
) -> TestResult {
    let x = s.upload(input)?;
    let host = s.copy_to_host(&x, out)?.wait()?;
    check_eq(what, input, host)
}
