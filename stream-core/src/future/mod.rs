//! Futures over GPU work that own their buffers: async/await on any executor, with no
//! executor thread ever blocking on the GPU.
//!
//! Owns: [`Stream::run_owned`](crate::Stream::run_owned) (a whole scope as a future),
//! [`Stream::upload_owned`](crate::Stream::upload_owned) and
//! [`Stream::download_owned`](crate::Stream::download_owned), their futures
//! ([`RunOwned`], [`CopyOwned`]), the traits of what they may own ([`OwnedHostBuffer`],
//! [`OwnedDeviceVec`]), the completion record and the completion thread of each device,
//! how that thread waits ([`CompletionMode`]), and [`completion_stats`]. Uses: `driver/` (events, copies), `device/`, `memory/`,
//! `host/` (the pinned pool), `scope/` (an owned scope, `scope/owned.rs`), `error`. No
//! executor or runtime crate: the futures are plain [`std::future::Future`]s woken
//! through [`std::task::Waker`].
//!
//! ```no_run
//! use stream_core::{Device, Error};
//! # async fn handle(dev: &Device, stream: &stream_core::Stream, request: Vec<f32>) -> Result<Vec<f32>, Error> {
//! let output = vec![0f32; request.len()];
//! let ((request, output), ()) = stream
//!     .run_owned((request, dev.alloc_pinned::<f32>(0)?, output), |s, (request, _, output)| {
//!         let x = s.upload(&request[..])?;          // the future owns `request`
//!         let mut y = s.alloc::<f32>(x.len())?;      // stream-ordered, freed on the stream
//!         s.copy_device(&x, &mut y)?;
//!         let _out = s.copy_to_host(&y, &mut output[..])?; // not waited for here
//!         Ok::<_, Error>(())
//!     })
//!     .await                                         // the executor thread is free meanwhile
//!     .map(|((request, _, output), ())| ((request, output), ()))?;
//! # let _ = request; Ok(output) }
//! ```
//!
//! # Why the futures own their buffers
//!
//! A future that borrows host memory for a DMA is unsound in Rust: `mem::forget` is
//! safe, so the borrow can end while the DMA still runs, and the memory be freed or
//! written under it. This is why RustaCUDA's futures and cust's async copies never
//! became safe. The answer io_uring crates found is ownership: the future takes the
//! buffer by value and hands it back when the hardware is done. Forgetting the future
//! then leaks the buffer, which is safe.
//!
//! * [`upload_owned`](crate::Stream::upload_owned) and [`download_owned`](crate::Stream::download_owned)
//!   take a `Vec<T>`, a `Box<[T]>` or a [`PinnedBuffer<T>`](crate::PinnedBuffer), which
//!   are `'static` and own their elements at an address that moving them does not change.
//!   A borrowed slice is refused at compile time, with a message naming the owned forms.
//! * [`run_owned`](crate::Stream::run_owned) takes any `O: Send + 'static`, boxes it, and lends it
//!   to a closure that issues a whole [scope](fn@crate::scope)'s work.
//!
//! # Why `run_owned` is sound
//!
//! A scope's host borrows last for `'env`, and an ordinary scope synchronises before
//! `'env` ends. `run_owned` instead gives its closure a scope whose `'env` is a fresh
//! higher-ranked lifetime, `for<'s, 'env> FnOnce(&'s Scope<'s, 'env>, &'env mut O)`, like
//! the brand `'s`: nothing outside the closure can name it, so no borrow of the caller's
//! outlives it. The closure can therefore hand to copies (`&'env [T]`, `&'env mut [T]`)
//! and attach (`&'env DeviceVec`) only
//!
//! * memory inside the lent `&'env mut O`, which the future owns, boxed (unmoved), and
//!   keeps untouched until the GPU is done, or leaks;
//! * `'static` memory: a shared `&'static [T]` is never freed or written (writing needs
//!   `&mut`, and [`DeviceRepr`](crate::DeviceRepr) types have no interior mutability); a
//!   `&'static mut [T]` moved into the closure and reborrowed for `'env` stays borrowed
//!   until the closure's body ends (`'env` outlives the body), so it can be neither
//!   returned nor stored anywhere, and nothing can reach it again.
//!
//! The scope's end is then not a synchronisation (which would block the executor
//! thread) but an event recorded after the closure's work; the future owns `O` until the
//! device's completion thread has seen that event complete. Forks inside the closure are
//! joined into the scope's stream before the closure returns, so the event covers them
//! too (a fork's stream must be `&'env`: a `'static` one or one inside `O`, such as an
//! `Arc<Stream>`). Device memory allocated in the scope is freed stream-ordered on its
//! stream, as in any scope. The hooks this needs in `scope/` are the scope's one
//! constructor, `Scope::branded`, whose `# Safety` states the rule above as its second
//! alternative (see `scope/owned.rs`), and the capture check every scope makes.
//!
//! Borrowed host memory does not compile (see
//! `ui-tests/tests/ui/future/run-owned-borrows-host-memory.rs`):
//!
//! ```compile_fail
//! # async fn f(stream: &stream_core::Stream) -> stream_core::Result<()> {
//! let input = vec![1.0f32; 256];
//! stream.run_owned((), |s, ()| {
//!     let _x = s.upload(&input)?; // error: `input` does not live long enough for `'env`
//!     Ok::<_, stream_core::Error>(())
//! }).await?;
//! # Ok(()) }
//! ```
//!
//! # Completion: an event, and one completion thread per device
//!
//! After an operation's work, the future's constructor records an event on the stream
//! (no timing, and `CU_EVENT_BLOCKING_SYNC` unless the device's completion mode is
//! [`CompletionMode::Poll`]; taken from the completion thread's spares, so no event is
//! created on the hot path) and hands it to its device's completion thread,
//! a thread of this crate started with the device's first operation. That thread sleeps
//! on its queue while it has nothing to watch; otherwise it finishes every operation
//! whose event `cuEventQuery` reports complete (it asks about the oldest of each stream,
//! since a stream's work completes in order), and when none is, it sleeps in
//! `cuEventSynchronize` on the oldest operation of all until the driver wakes it.
//! Finishing an operation sets its outcome, wakes the future's waker and releases the
//! values of a dropped future. A kernel fault arrives as the sticky error of the query
//! or the wait, and becomes the future's error. No executor thread waits for the GPU and, by
//! default, nothing spins: the completion thread is asleep whenever nothing it watches
//! has ended.
//!
//! **Polling, for copy-bound servers.** Each sleeping wait costs a wake-up (the driver's
//! interrupt, the thread's scheduling), which a server of short copy-bound requests
//! feels per request. [`set_completion_mode`]`(&device, `[`CompletionMode::Poll`]`)`
//! makes the device's completion thread query the events in a loop instead, yielding its
//! core between rounds, while any operation is in flight, and sleep as before when none
//! is: one core busy during work in exchange for the wake-up. The default does not
//! change. `bench --case serve` measures both modes with the CPU time per request.
//!
//! **Head-of-line effect.** While the completion thread sleeps on the oldest operation,
//! an operation of another stream of the same device that ends sooner is noticed only
//! when the oldest one ends. Requests of about equal length, as in a server loop, end
//! roughly in order and lose nothing to this (`bench --case serve`: the same requests/s
//! as a thread that queries every event in a busy loop). A short operation enqueued
//! while a long one of another stream is pending resolves when the long one ends:
//! measured on an H100, an empty `run_owned` made 200 µs after a 1 ms kernel's on another
//! stream resolved after 0.62 ms, where it takes 16 µs alone. A stream whose latency
//! matters turns on [`Stream::set_head_of_line_bypass`](crate::Stream::set_head_of_line_bypass):
//! its operations made while another stream has work pending then also get a host
//! function (`cuLaunchHostFunc`, on a companion stream so that its own stream never
//! waits for it) that hands them to a second thread of the device as soon as they end
//! (the same empty operation: 82-109 µs). It is off by default because rings cost more
//! than they save for many streams of requests of equal length (the 64 KiB server loop
//! measured 0.80-0.92x of the thread-per-stream design with every stream's bypass on,
//! against 1.00-1.11x off).
//!
//! The cost per operation, on the calling thread: a context check, a capture check
//! (`cuStreamIsCapturing`), two small allocations, three short lock holds (finding the
//! device's completion thread, taking a spare event, handing it over) and
//! `cuEventRecord` (an empty `run_owned` takes 0.6 to 0.9 µs to enqueue on an H100); on
//! the completion thread: about one `cuEventQuery` per stream with work pending each
//! time it wakes (measured: 1.5 to 1.7 queries per operation in the serve loop), a wake
//! of the waker, and a blocking-sync wake-up when it had to sleep. The round trip of an empty
//! `run_owned` awaited with `block_on` is 14 to 19 µs on an H100 (an empty scope's
//! synchronisation, which spins, 1.5 to 2 µs): two sleeping threads are woken (the
//! completion thread by the driver, the waiting thread by the waker). `bench --case
//! serve` measures these and the throughput of a server loop against the
//! thread-per-stream design (see the README's Benchmarks).
//!
//! # Dropping, forgetting, cancelling
//!
//! * **Cancellation does not stop the GPU.** Work is enqueued when `run_owned`,
//!   `upload_owned` or `download_owned` is called, and runs to its end whatever happens
//!   to the future.
//! * **Dropping** a future before it completes hands what it owns to the completion
//!   record; the completion thread frees or recycles it (pinned blocks go back to their
//!   pool, device memory is freed) once the event after its work has completed (or the
//!   context has stopped at a kernel fault, after which no work runs). Dropping never
//!   blocks.
//! * **Forgetting** a future leaks what it owns: nothing is ever freed while a DMA may
//!   still use it. So does a failure to record the event after the work, or a wait for it
//!   that fails with an error that does not say the context stopped (the future then
//!   resolves to that error, and [`completion_stats`] counts the leak).
//! * A process that exits with work in flight leaks it to the operating system.
//! * [`completion_stats`] counts what is in flight; when it reads zero, every dropped
//!   future's memory is back in the pools.
//!
//! # What still blocks
//!
//! Inside a `run_owned` closure, the ordinary scope rules apply, blocking included:
//! copies to and from pageable memory take the driver's pageable path (use
//! [`PinnedBuffer`](crate::PinnedBuffer)s, or `upload_owned`/`download_owned`, which
//! stage pageable buffers through pinned blocks without blocking),
//! [`Pending::wait`](crate::Pending::wait) waits, and an allocation that finds the device
//! out of memory waits for streams before it retries. A closure that issued NCCL
//! collectives is waited for before `run_owned` returns, bounded by the communicator's
//! timeout: only the thread that issued them may abort their communicator when a peer
//! dies, so the completion thread cannot be the one waiting.

mod completion;
mod completion_mode;
mod copy;
mod doorbell;
mod owned_host;
mod run_owned;
mod spare_events;
mod stats;
mod watcher;

pub use completion_mode::{completion_mode, set_completion_mode, CompletionMode};
pub use copy::CopyOwned;
pub use owned_host::{OwnedDeviceVec, OwnedHostBuffer};
pub use run_owned::RunOwned;
pub use stats::{completion_stats, CompletionStats};
