//! Starting one `GpuTimer` from two threads at once.
//!
//! Each thread's scope would record the timer's start on its own stream, and which one
//! `elapsed` measures from would depend on the race; the timer also tracks which ends
//! it has recorded. One thread at a time uses a timer: `GpuTimer` is `Send`, not
//! `Sync`. Give each thread a timer of its own.
use stream_core::{scope, GpuTimer, Stream};

fn f(timer: &GpuTimer, a: &Stream, b: &Stream) {
    std::thread::scope(|threads| {
        threads.spawn(|| scope(a, |s| timer.start(s)));
        threads.spawn(|| scope(b, |s| timer.start(s)));
    });
}

fn main() {
    let _ = f;
}
