//! What the async test binaries share (`test_async`, `test_async_release`,
//! `test_async_waiting`): the executors they run on ([`workers`]), one request of each
//! kind checked against the CPU, the pool statistics once nothing is in flight, a
//! future wrapper that drops what it polls after a few polls, and the process's CPU
//! time (whether the completion thread sleeps). Each binary uses the part
//! it needs.
#![allow(dead_code)]

pub mod workers;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pub use gpu_tests::serial;
use gpu_tests::{check_eq, ensure, poisoned, TestResult};
use stream_core::future::completion_stats;
use stream_core::{scope, Device, Error, PinnedBuffer, Stream};

/// How long a test waits for the completion thread to finish everything.
const QUIET_TIMEOUT: Duration = Duration::from_secs(60);

/// About 50 ms of spinning on an H100/H200: long enough that work behind it is still
/// pending when the test looks.
pub const SPIN: u64 = 100_000_000;
/// About one second of spinning.
pub const LONG_SPIN: u64 = 2_000_000_000;
/// Streams the load tests spread their requests over.
pub const STREAMS: usize = 4;

/// Device and pinned bytes in use once nothing is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InUse {
    pub device: usize,
    pub pinned: usize,
}

/// Waits until no future's completion is pending, synchronises `streams` (so the pool
/// sees their frees complete) and the housekeeping stream, and reads what is in use.
pub fn quiet(dev: &Device, streams: &[&Stream]) -> TestResult<InUse> {
    let start = Instant::now();
    while completion_stats().in_flight > 0 {
        ensure!(
            start.elapsed() < QUIET_TIMEOUT,
            "{} operations still in flight after {QUIET_TIMEOUT:?}: the completion thread \
             never saw their events complete",
            completion_stats().in_flight
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    for stream in streams {
        scope(stream, |_| Ok::<_, Error>(()))?;
    }
    dev.trim_memory(0)?;
    Ok(InUse {
        device: dev.memory_stats()?.in_use_bytes,
        pinned: dev.pinned_memory_stats().in_use_bytes,
    })
}

pub fn doubled(input: &[f32]) -> Vec<f32> {
    input.iter().map(|v| v * 2.0).collect()
}

pub fn new_streams(dev: &Device, n: usize) -> TestResult<Arc<Vec<Stream>>> {
    let streams = (0..n)
        .map(|_| dev.new_stream())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(streams))
}

pub fn pinned_copy(dev: &Device, data: &[f32]) -> Result<PinnedBuffer<f32>, Error> {
    let mut buf = dev.alloc_pinned::<f32>(data.len())?;
    buf.copy_from_slice(data);
    Ok(buf)
}

/// One request of the load tests, of one of three kinds (`kind` is 0, 1 or 2), checked
/// against the CPU: 2x through `run_owned` over pinned buffers; a plain round trip
/// through `upload_owned(Vec)` and `download_owned(DeviceVec, Box<[f32]>)`; and 2x in
/// three steps (`upload_owned(PinnedBuffer)`, `run_owned` over the `DeviceVec`,
/// `download_owned` into a `Vec`).
pub async fn request(kind: usize, dev: Device, stream: &Stream, input: Vec<f32>) -> TestResult {
    let n = input.len();
    match kind {
        0 => {
            let owned = (pinned_copy(&dev, &input)?, pinned_copy(&dev, &poisoned(n))?);
            let ((_, output), ()) = stream
                .run_owned(owned, |s, (input, output)| {
                    let x = s.upload(&input[..])?;
                    let mut y = s.alloc::<f32>(x.len())?;
                    kernels::scale(s, 2.0f32, &x, &mut y)?;
                    let _download = s.copy_to_host(&y, &mut output[..])?;
                    Ok::<_, Error>(())
                })
                .await?;
            check_eq("run_owned request (2x)", &doubled(&input), &output)
        }
        1 => {
            let (on_gpu, input) = stream.upload_owned(input).await?;
            let (_, output) = stream
                .download_owned(on_gpu, poisoned::<f32>(n).into_boxed_slice())
                .await?;
            check_eq("upload_owned + download_owned round trip", &input, &output)
        }
        _ => {
            let (on_gpu, _) = stream.upload_owned(pinned_copy(&dev, &input)?).await?;
            let (on_gpu, ()) = stream
                .run_owned(on_gpu, |s, on_gpu| {
                    let mut x = s.attach(on_gpu)?;
                    let mut y = s.alloc::<f32>(x.len())?;
                    kernels::scale(s, 2.0f32, &x, &mut y)?;
                    s.copy_device(&y, &mut x)?;
                    Ok::<_, Error>(())
                })
                .await?;
            let (_, output) = stream.download_owned(on_gpu, poisoned::<f32>(n)).await?;
            check_eq("three-step request (2x)", &doubled(&input), &output)
        }
    }
}

/// Polls the inner future at most `polls` times (asking to be polled again at once
/// while it is pending), then drops it: `None`.
pub struct DropAfter<F> {
    pub inner: Option<F>,
    pub polls: usize,
}

impl<F: Future + Unpin> Future for DropAfter<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.polls == 0 {
            self.inner = None;
            return Poll::Ready(None);
        }
        self.polls -= 1;
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll(cx) {
            Poll::Ready(output) => Poll::Ready(Some(output)),
            Poll::Pending => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

/// User + system CPU time of this process so far (Linux `/proc/self/stat`, in clock
/// ticks: USER_HZ, 100 on Linux).
pub fn process_cpu_time() -> TestResult<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat")
        .map_err(|e| gpu_tests::Failed::from(format!("cannot read /proc/self/stat: {e}")))?;
    // The fields after the command name (which may hold spaces, inside parentheses):
    // state is the first, utime the 12th and stime the 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => Ok(Duration::from_millis((user + system) * 10)),
        _ => Err(format!("unexpected /proc/self/stat: {stat}").into()),
    }
}
