//! Small pieces of GPU work that several test files issue inside their scopes, and the
//! test-only kernel they use.

use stream_core::{kernel, scope, DeviceMemoryMut, Error, LaunchConfig, Scope, Stream};

use crate::check::{check_eq, poisoned};
use crate::element::Element;
use crate::rng::Rng;
use crate::TestResult;

/// CUDA source of [`spin_then_write_u32`]: one block of 32 threads spins for about
/// `cycles` clock cycles, then thread 0 writes `value` to `y[0]` (if `y` is not empty).
const SPIN_SRC: &str = r#"
extern "C" __global__ void __launch_bounds__(32)
spin_then_write_u32(unsigned long long cycles, unsigned value, unsigned* y, size_t y_len) {
    long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) { }
    if (threadIdx.x == 0 && blockIdx.x == 0 && y_len > 0) y[0] = value;
}
"#;

#[kernel(cuda = SPIN_SRC, block = 32)]
/// Spins for about `cycles` clock cycles, then writes `value` to `y[0]`.
unsafe fn spin_then_write_u32(cycles: u64, value: u32, y: &mut [u32]);

/// Queues one block that busy-waits about `cycles` clock cycles on `s`'s stream (about
/// 50 ms per 100 million on an H100/H200), then writes `value` to `y[0]` (if `y` is not
/// empty): work queued after it on the same stream must wait for it, which widens race
/// windows.
pub fn spin_then_write<'s>(
    s: &'s Scope<'s, '_>,
    cycles: u64,
    value: u32,
    y: &mut impl DeviceMemoryMut<'s, u32>,
) -> Result<(), Error> {
    spin_then_write_u32(s, LaunchConfig::for_elements(1, 32), cycles, value, y)
}

/// Queues a kernel that busy-waits about `cycles` clock cycles on `s`'s stream (about
/// 50 ms per 100 million on an H100/H200), so that a missing cross-stream dependency
/// would let other work run first.
pub fn spin<'s>(s: &'s Scope<'s, '_>, cycles: u64) -> Result<(), Error> {
    let mut flag = s.alloc::<u32>(1)?;
    spin_then_write(s, cycles, 1, &mut flag)
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

/// `rounds` round trips of random lengths (up to 64 Ki elements) on `stream`, each in a
/// scope of its own and checked: the stream still works.
pub fn round_trips_on(stream: &Stream, mut rng: Rng, rounds: usize) -> TestResult {
    for round in 0..rounds {
        let len = 1 + rng.below(1 << 16);
        let input: Vec<f64> = rng.vec(len);
        let mut out = poisoned::<f64>(input.len());
        scope(stream, |s| -> TestResult {
            let x = s.upload(&input)?;
            let _download = s.copy_to_host(&x, &mut out)?;
            Ok(())
        })?;
        check_eq(&format!("round {round} on this thread"), &input, &out)?;
    }
    Ok(())
}
