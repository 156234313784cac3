//! Stream priorities (`Device::stream_priorities`, `Device::new_stream_with_priority`):
//! the device's range, a priority outside it refused, and the scheduling it buys: a
//! short kernel on the most urgent stream finishes while a low-priority stream's long
//! queue of blocks is still draining.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::time::{Duration, Instant};

use gpu_tests::{device, ensure, expect_err, TestResult};
use stream_core::{kernel, scope, Error, LaunchConfig, Stream};

gpu_tests::test_main! {
    gpu: [
        the_range_runs_from_the_most_urgent_to_the_default_and_each_makes_a_stream,
        a_priority_outside_the_range_is_invalid_stream_priority,
        an_urgent_kernel_finishes_while_a_low_priority_queue_drains,
    ],
}

/// CUDA source of [`spin_blocks`]: every block of 32 threads spins for about `cycles`
/// clock cycles; block 0's thread 0 then writes 1 to `done[0]` (if `done` is not empty).
const SPIN_BLOCKS: &str = r#"
extern "C" __global__ void __launch_bounds__(32)
spin_blocks(unsigned long long cycles, unsigned* done, size_t done_len) {
    long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) { }
    if (threadIdx.x == 0 && blockIdx.x == 0 && done_len > 0) done[0] = 1;
}
"#;

#[kernel(cuda = SPIN_BLOCKS, block = 32)]
/// Each block spins for about `cycles` clock cycles; block 0 then writes `done[0]`.
unsafe fn spin_blocks(cycles: u64, done: &mut [u32]);

/// The range is `greatest..=least` with `greatest <= least`, the default (`0`) at its
/// least urgent end, and a stream can be made at each priority of it; each works.
fn the_range_runs_from_the_most_urgent_to_the_default_and_each_makes_a_stream() -> TestResult {
    let dev = device()?;
    let range = dev.stream_priorities()?;
    ensure!(
        range.start() <= range.end() && *range.end() == 0,
        "stream_priorities is {range:?}: expected most urgent ..= 0"
    );
    for priority in range {
        let stream = dev.new_stream_with_priority(priority)?;
        let (input, mut back) = ([priority.unsigned_abs(); 4], [0u32; 4]);
        scope(&stream, |s| {
            let x = s.upload(&input)?;
            s.copy_to_host(&x, &mut back)?.wait()?;
            Ok::<_, Error>(())
        })?;
        ensure!(
            back == input,
            "a stream of priority {priority} copied {back:?}"
        );
    }
    Ok(())
}

/// One past each end of the range is refused, naming the priority and the range.
fn a_priority_outside_the_range_is_invalid_stream_priority() -> TestResult {
    let dev = device()?;
    let range = dev.stream_priorities()?;
    for priority in [*range.start() - 1, *range.end() + 1] {
        let err = expect_err(
            "new_stream_with_priority outside the range",
            dev.new_stream_with_priority(priority),
        )?;
        ensure!(
            err == Error::InvalidStreamPriority {
                priority,
                most_urgent: *range.start(),
                least_urgent: *range.end(),
            },
            "priority {priority}: {err:?}"
        );
        let message = err.to_string();
        ensure!(
            message.contains(&format!("stream priority {priority} is outside"))
                && message.contains("lower numbers are more urgent")
                && message.contains("Device::stream_priorities"),
            "message: {message}"
        );
    }
    Ok(())
}

/// Blocks of a long kernel on a least-urgent stream fill the GPU many times over (about
/// 50 waves of 1 ms blocks); a one-block kernel launched after it on the most urgent
/// stream must be scheduled ahead of the waiting blocks, so it finishes while the long
/// kernel still runs. (At equal priority it would wait behind every queued block; the
/// test prints that time too, for comparison, without relying on it.)
fn an_urgent_kernel_finishes_while_a_low_priority_queue_drains() -> TestResult {
    let dev = device()?;
    let range = dev.stream_priorities()?;
    if range.start() == range.end() {
        // Not a failure of the library: such a device schedules every stream alike.
        eprintln!("test_stream_priorities: this device offers one priority ({range:?}): the race is skipped");
        return Ok(());
    }
    let low = dev.new_stream_with_priority(*range.end())?;
    let urgent = dev.new_stream_with_priority(*range.start())?;
    let (urgent_after, long_took) = race(&low, &urgent)?;
    ensure!(
        urgent_after < long_took / 2,
        "the urgent kernel finished {urgent_after:?} after launch, the long kernel took \
         {long_took:?}: it was not scheduled ahead of the queued blocks"
    );
    let (equal_after, equal_took) = race(&low, &dev.new_stream()?)?;
    println!(
        "urgent stream: done after {urgent_after:?} of the long kernel's {long_took:?}; \
         same priority: after {equal_after:?} of {equal_took:?}"
    );
    Ok(())
}

/// Launches the long kernel on `low` and then the one-block kernel on `other`; returns
/// when the short one was seen done (after its launch) and how long the long one took.
fn race(low: &Stream, other: &Stream) -> TestResult<(Duration, Duration)> {
    const BLOCK_CYCLES: u64 = 2_000_000; // about 1 ms at 2 GHz
                                         // 32-thread blocks: at most 32 resident per multiprocessor, 132 multiprocessors on
                                         // an H100 SXM: 4224 at once. 50 waves of them.
    let long = LaunchConfig {
        grid: (200_000, 1, 1),
        block: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    let short = LaunchConfig::for_elements(32, 32);
    let mut timings = None;
    scope(low, |s| {
        let mut long_done = s.alloc_zeroed::<u32>(1)?;
        let start = Instant::now();
        spin_blocks(s, long, BLOCK_CYCLES, &mut long_done)?;
        // Let the long kernel's first waves start.
        std::thread::sleep(Duration::from_millis(2));
        let launched = Instant::now();
        scope(other, |t| {
            let mut done = t.alloc_zeroed::<u32>(1)?;
            spin_blocks(t, short, 1_000, &mut done)
        })?;
        let short_after = launched.elapsed();
        while !low.is_idle()? {
            std::hint::spin_loop();
        }
        timings = Some((short_after, start.elapsed()));
        Ok::<_, Error>(())
    })?;
    timings.ok_or_else(|| "the scope did not run its closure".into())
}
