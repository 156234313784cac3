//! [`Rng`]: a small seeded generator (SplitMix64) for fresh test data, and the
//! per-test seed that a failure reports.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use libtest_mimic::Failed;

use crate::element::Element;

/// Environment variable that fixes the seed of every test's random data (decimal, or
/// hex with `0x`), to replay the seed a failure printed.
pub const SEED_ENV: &str = "STREAM_CORE_TEST_SEED";

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The seed of the test running on this thread, and how many generators it has made.
#[derive(Clone, Copy)]
struct TestSeed {
    base: u64,
    issued: u64,
}

thread_local! {
    static CURRENT: Cell<Option<TestSeed>> = const { Cell::new(None) };
}

/// Starts a test on this thread: its seed is `STREAM_CORE_TEST_SEED` when set, else
/// drawn from the clock (and a process-wide counter, so parallel tests differ).
pub(crate) fn begin_test() -> Result<(), Failed> {
    let base = match std::env::var(SEED_ENV) {
        Ok(text) => parse_seed(&text).ok_or_else(|| {
            Failed::from(format!(
                "{SEED_ENV}={text:?} is not a seed: write a decimal number or 0x followed by hex"
            ))
        })?,
        Err(_) => fresh_seed(),
    };
    CURRENT.with(|c| c.set(Some(TestSeed { base, issued: 0 })));
    Ok(())
}

/// The line a failure prints: the test's seed and how to replay it, if it drew any
/// random data.
pub(crate) fn seed_note() -> Option<String> {
    CURRENT.with(|c| c.get()).filter(|s| s.issued > 0).map(|s| {
        format!(
            "random data of this test came from seed {base:#018x}; rerun with \
             {SEED_ENV}={base:#018x} to draw the same data",
            base = s.base
        )
    })
}

pub(crate) fn parse_seed(text: &str) -> Option<u64> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16).ok(),
        None => text.replace('_', "").parse().ok(),
    }
}

fn fresh_seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    mix(nanos ^ count.wrapping_mul(GOLDEN))
}

/// The SplitMix64 output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A SplitMix64 generator: fast, no dependencies, good enough for test data.
///
/// [`Rng::new`] seeds it from the running test's seed (the `k`-th generator of a test
/// gets `seed + k`), so a failure's printed seed replays all of the test's data.
///
/// ```
/// use gpu_tests::{Element, Rng};
/// let mut rng = Rng::with_seed(7);
/// let data: Vec<f32> = rng.vec(1000);
/// assert!(data.iter().all(|&x| x != 0.0 && x.is_finite()));
/// ```
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// The next generator of the running test (see the type's docs).
    #[allow(clippy::new_without_default)] // drawing a seed is not a "default"
    pub fn new() -> Self {
        let seed = CURRENT.with(|c| {
            let mut s = c.get().unwrap_or(TestSeed {
                base: fresh_seed(),
                issued: 0,
            });
            let seed = s.base.wrapping_add(s.issued);
            s.issued += 1;
            c.set(Some(s));
            seed
        });
        Rng::with_seed(seed)
    }

    /// A generator with a fixed seed (not reported on failure).
    pub fn with_seed(seed: u64) -> Self {
        Rng {
            state: mix(seed ^ GOLDEN),
        }
    }

    /// 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix(self.state)
    }

    /// 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// 128 random bits.
    pub fn next_u128(&mut self) -> u128 {
        (u128::from(self.next_u64()) << 64) | u128::from(self.next_u64())
    }

    /// A uniform index in `0..n`; `n` must be positive.
    pub fn below(&mut self, n: usize) -> usize {
        assert!(n > 0, "Rng::below(0): the range is empty");
        (self.next_u64() % n as u64) as usize
    }

    /// A random value of `T`: non-zero, finite, never `T::POISON`.
    pub fn value<T: Element>(&mut self) -> T {
        T::random(self)
    }

    /// `len` random values (see [`value`](Self::value)).
    pub fn vec<T: Element>(&mut self, len: usize) -> Vec<T> {
        let mut v = vec![T::ZERO; len];
        T::fill_random(self, &mut v);
        v
    }

    /// Overwrites `out` with random values (see [`value`](Self::value)).
    pub fn fill<T: Element>(&mut self, out: &mut [T]) {
        T::fill_random(self, out);
    }
}
