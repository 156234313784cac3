//! The completion thread's polling mode (`stream_core::future::CompletionMode::Poll`):
//! the same outcomes as the default sleeping mode, no operation held behind a long one
//! of another stream (no bypass needed: every stream is asked each round), sleeping
//! again with nothing in flight, switching back, switching from another thread while
//! work runs, and (on two GPUs) one device polling beside one sleeping.
//!
//! Its own binary: the mode is the device's for the whole process, and the other async
//! tests measure the default. The tests take one lock each, so that they run one at a
//! time.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

mod async_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_support::workers::{self, Kind};
use async_support::{new_streams, process_cpu_time, serial, LONG_SPIN};
use gpu_tests::{
    check_eq, device, ensure, gpu_status, spin, tests, Element, GpuStatus, Rng, Test, TestResult,
};
use mini_executor::block_on;
use stream_core::future::{completion_mode, completion_stats, set_completion_mode, CompletionMode};
use stream_core::Stream;

fn main() {
    let mut gpu: Vec<Test> = tests![
        polling_gives_every_result_of_many_streams_and_leaves_nothing_in_flight,
        polling_resolves_a_short_operation_before_a_long_one_of_another_stream_without_the_bypass,
        the_mode_reads_back_and_sleeping_again_still_finishes_everything,
        toggling_the_mode_from_another_thread_while_work_is_in_flight_loses_nothing,
        a_polling_thread_with_nothing_in_flight_sleeps,
        an_operation_made_while_polling_that_outlives_the_switch_to_sleep_waits_for_its_work,
    ];
    match gpu_status() {
        GpuStatus::Present(n) if *n >= 2 => {
            gpu.extend(tests![
                one_device_polling_leaves_the_other_asleep_and_both_exact
            ]);
        }
        GpuStatus::Present(n) => eprintln!(
            "test_async_polling: {n} CUDA device(s): the two-GPU test is not registered (run \
             this binary on a machine with two GPUs to cover one device polling beside one \
             sleeping)"
        ),
        GpuStatus::Absent(_) => {}
    }
    gpu_tests::run(&gpu, &[])
}

/// The device with its completion thread polling; `Sleep` again when dropped.
struct Polling(stream_core::Device);

impl Polling {
    fn on(dev: stream_core::Device) -> TestResult<Polling> {
        set_completion_mode(&dev, CompletionMode::Poll)?;
        Ok(Polling(dev))
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        let _ = set_completion_mode(&self.0, CompletionMode::Sleep);
    }
}

/// Eight streams, 40 round trips each of random lengths (0 to 300 Ki elements) as
/// `upload_owned` + `download_owned` pairs on the mini executor, all in flight at once:
/// every result matches its input, and `in_flight` returns to where it was.
fn polling_gives_every_result_of_many_streams_and_leaves_nothing_in_flight() -> TestResult {
    let _serial = serial();
    let polling = Polling::on(device()?)?;
    let dev = &polling.0;
    let before = completion_stats().in_flight;
    let streams = new_streams(dev, 8)?;
    round_trips(&streams, gpu_tests::load(40, 5), f32::NAN, |rng| {
        let len = rng.below(300 << 10);
        rng.vec(len)
    })?;
    nothing_left_in_flight(before)
}

/// With polling on and no stream's bypass on, a short operation made while a one-second
/// kernel's operation of another stream is in flight resolves long before that kernel
/// ends (sleeping, the thread would wait on the long one first: see
/// `test_async_waiting`).
fn polling_resolves_a_short_operation_before_a_long_one_of_another_stream_without_the_bypass(
) -> TestResult {
    let _serial = serial();
    let polling = Polling::on(device()?)?;
    let dev = &polling.0;
    let long_stream = Arc::new(dev.new_stream()?);
    let short_stream = Arc::new(dev.new_stream()?);
    for kind in [Kind::Tokio, Kind::Mini] {
        workers::short_resolves_before_long(kind, &long_stream, &short_stream, "polling")?;
    }
    Ok(())
}

/// The mode reads back as set; set back to `Sleep`, the thread finishes operations made
/// while it was polling and after, with their data.
fn the_mode_reads_back_and_sleeping_again_still_finishes_everything() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let stream = dev.new_stream()?;
    let input: Vec<u32> = (0..(1u32 << 16)).collect();
    set_completion_mode(&dev, CompletionMode::Poll)?;
    ensure!(
        completion_mode(&dev) == CompletionMode::Poll,
        "the mode read back {:?} after Poll was set",
        completion_mode(&dev)
    );
    let while_polling = stream.upload_owned(input.clone());
    set_completion_mode(&dev, CompletionMode::Sleep)?;
    ensure!(
        completion_mode(&dev) == CompletionMode::Sleep,
        "the mode read back {:?} after Sleep was set",
        completion_mode(&dev)
    );
    let (on_device, _) = block_on(while_polling)?;
    let (_, out) = block_on(stream.download_owned(on_device, vec![0u32; input.len()]))?;
    check_eq("made while polling, finished sleeping", &input, &out)
}

/// A thread toggles the mode between `Poll` and `Sleep` as fast as it can while four
/// streams run 20 round trips each (uploads and downloads, 64 Ki elements): every result
/// arrives exact, and nothing stays in flight.
fn toggling_the_mode_from_another_thread_while_work_is_in_flight_loses_nothing() -> TestResult {
    use std::sync::atomic::{AtomicBool, Ordering};
    let _serial = serial();
    let dev = device()?;
    let before = completion_stats().in_flight;
    let streams = new_streams(&dev, 4)?;
    let stop = AtomicBool::new(false);
    let (work, toggles) = std::thread::scope(|t| {
        let toggler = t.spawn(|| -> TestResult<u64> {
            let mut toggles = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mode = match toggles.is_multiple_of(2) {
                    true => CompletionMode::Poll,
                    false => CompletionMode::Sleep,
                };
                set_completion_mode(&dev, mode)?;
                toggles += 1;
                std::thread::yield_now();
            }
            Ok(toggles)
        });
        // Whatever the work returns, the toggler is stopped before the scope joins it.
        let work = round_trips(&streams, gpu_tests::load(20, 4), 0u32, |rng| {
            rng.vec(64 << 10)
        });
        stop.store(true, Ordering::Relaxed);
        let toggles = toggler
            .join()
            .unwrap_or_else(|_| Err(gpu_tests::Failed::from("the toggling thread panicked")));
        (work, toggles)
    });
    set_completion_mode(&dev, CompletionMode::Sleep)?;
    work?;
    let toggles = toggles?;
    ensure!(
        toggles > 1,
        "the mode was toggled {toggles} times: the test proves nothing"
    );
    nothing_left_in_flight(before)
}

/// A one-second kernel's operation made while polling records a plain event (the
/// thread cannot sleep on it); the mode switches to `Sleep` while it runs, and a short
/// operation follows on another stream. The long one resolves only after its kernel (the
/// plain event was not taken for complete, nor waited for wrongly), and the short one
/// well before it: with a plain event at the head, the sleeping thread keeps polling
/// rather than sleep behind it.
fn an_operation_made_while_polling_that_outlives_the_switch_to_sleep_waits_for_its_work(
) -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let long = dev.new_stream()?;
    let short = dev.new_stream()?;
    block_on(long.run_owned((), |s, ()| spin(s, 1)))?; // the module and the thread
    set_completion_mode(&dev, CompletionMode::Poll)?;
    let begin = Instant::now();
    let long_op = long.run_owned((), |s, ()| spin(s, LONG_SPIN));
    set_completion_mode(&dev, CompletionMode::Sleep)?;
    std::thread::sleep(Duration::from_millis(20)); // the thread has seen the switch
    block_on(short.run_owned((), |s, ()| spin(s, 1)))?;
    let short_after = begin.elapsed();
    block_on(long_op)?;
    let long_after = begin.elapsed();
    ensure!(
        long_after > Duration::from_millis(300),
        "the one-second kernel's operation resolved after {long_after:?}: it did not wait \
         for the GPU"
    );
    ensure!(
        short_after < Duration::from_millis(250),
        "the short operation resolved {short_after:?} after the start and the long one \
         {long_after:?}: the thread slept behind an event made for polling"
    );
    Ok(())
}

/// `rounds` rounds of an `upload_owned` and a `download_owned` of an input from `input`
/// on each stream, every stream's in flight at once, into buffers of `poison`; each
/// result checked.
fn round_trips<T: Element>(
    streams: &[Stream],
    rounds: usize,
    poison: T,
    mut input: impl FnMut(&mut Rng) -> Vec<T>,
) -> TestResult {
    let mut rng = Rng::new();
    for round in 0..rounds {
        let inputs: Vec<Vec<T>> = streams.iter().map(|_| input(&mut rng)).collect();
        let uploads: Vec<_> = streams
            .iter()
            .zip(&inputs)
            .map(|(stream, input)| stream.upload_owned(input.clone()))
            .collect();
        let mut downloads = Vec::with_capacity(uploads.len());
        for (stream, upload) in streams.iter().zip(uploads) {
            let (on_device, _) = block_on(upload)?;
            let len = on_device.len();
            downloads.push(stream.download_owned(on_device, vec![poison; len]));
        }
        for (i, (download, input)) in downloads.into_iter().zip(&inputs).enumerate() {
            let (_, out) = block_on(download)?;
            check_eq(&format!("round {round}, stream {i}"), input, &out)?;
        }
    }
    Ok(())
}

/// Waits up to 5 s for the completion counters to fall back to `before` operations in
/// flight.
fn nothing_left_in_flight(before: usize) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(5);
    while completion_stats().in_flight > before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    ensure!(
        completion_stats().in_flight <= before,
        "{} operations still in flight 5 s after the last result ({before} before)",
        completion_stats().in_flight
    );
    Ok(())
}

/// Two devices: device 0 polls, device 1 keeps sleeping (the mode is per device), and
/// round trips on both at once, from two threads, all arrive exact.
fn one_device_polling_leaves_the_other_asleep_and_both_exact() -> TestResult {
    let _serial = serial();
    let (d0, d1) = (stream_core::Device::new(0)?, stream_core::Device::new(1)?);
    let polling = Polling::on(d0)?;
    ensure!(
        completion_mode(&d1) == CompletionMode::Sleep,
        "device 1 reads {:?} after device 0 was set to Poll",
        completion_mode(&d1)
    );
    let before = completion_stats().in_flight;
    let on_each = |dev: &stream_core::Device| -> TestResult {
        let streams = new_streams(dev, 2)?;
        round_trips(&streams, gpu_tests::load(10, 2), 0u32, |rng| {
            rng.vec(64 << 10)
        })
    };
    let (a, b) = std::thread::scope(|t| {
        let a = t.spawn(|| on_each(&polling.0));
        let b = t.spawn(|| on_each(&d1));
        let join = |h: std::thread::ScopedJoinHandle<'_, TestResult>| {
            h.join()
                .unwrap_or_else(|_| Err(gpu_tests::Failed::from("a device's thread panicked")))
        };
        (join(a), join(b))
    });
    a?;
    b?;
    ensure!(
        completion_mode(&d1) == CompletionMode::Sleep,
        "device 1 reads {:?} after the work",
        completion_mode(&d1)
    );
    nothing_left_in_flight(before)
}

/// Polling, with nothing in flight, the completion thread sleeps: over 300 ms with no
/// work after some ran, the whole process burns well under one core (a thread still
/// polling would burn all 300 ms of one).
fn a_polling_thread_with_nothing_in_flight_sleeps() -> TestResult {
    let _serial = serial();
    let polling = Polling::on(device()?)?;
    let streams = new_streams(&polling.0, 1)?;
    let before = completion_stats().in_flight;
    round_trips(&streams, 2, 0u32, |rng| rng.vec(64 << 10))?;
    nothing_left_in_flight(before)?;
    let (cpu, wall) = (process_cpu_time()?, Instant::now());
    std::thread::sleep(Duration::from_millis(300));
    let (burned, elapsed) = (process_cpu_time()? - cpu, wall.elapsed());
    ensure!(
        burned < elapsed / 3,
        "with nothing in flight the process burned {burned:?} of CPU in {elapsed:?}: the \
         polling thread did not go to sleep"
    );
    Ok(())
}
