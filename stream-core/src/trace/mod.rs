//! A timeline a person can look at without Nsight: [`Trace`] records the GPU time of
//! what chosen scopes enqueue (copies, fills, kernels, graph replays, NCCL collectives,
//! forks and joins) with timing events, and writes it as a Chrome trace (JSON) that Perfetto
//! (<https://ui.perfetto.dev>) and `chrome://tracing` open: one process per GPU, one
//! track per stream, a slice per operation, and arrows for the order forks and joins
//! impose between streams.
//!
//! A staged copy (pageable host memory, see [`staging`](crate::staging)) also records
//! each chunk's DMA inside its slice, except the copy-out of a download that returns at
//! once, which runs later on the library's own streams: there the slice is the device
//! snapshot the copy-out reads.
//!
//! Not recorded: a graph's capture (its work runs at replay, which is recorded), the
//! collectives of an `nccl::group` (NCCL enqueues them at the group's end), a
//! `hand_off`'s ordering, and the owned-buffer futures' work (`future`).
//!
//! Off unless a scope is given a trace ([`Scope::trace_into`](crate::Scope::trace_into)):
//! a scope without one pays one atomic load per operation. With one, each operation
//! records two timing events (about what two `cuEventRecord`s and two `cuEventCreate`s
//! cost) and the recorder keeps them until it is dropped, so record chosen scopes, not a
//! whole long run. Recording never changes what the program does: an event that cannot
//! be made or recorded is counted as lost (the trace says how many), never an error of
//! the operation.
//!
//! ```no_run
//! use stream_core::{scope, trace::Trace, Device, Error};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = Device::new(0)?;
//! let (a, b) = (dev.new_stream()?, dev.new_stream()?);
//! let trace = Trace::new();
//! let input = vec![1.0f32; 1 << 20];
//! scope(&a, |s| {
//!     s.trace_into(&trace)?;                   // this scope and its forks, from here on
//!     let x = s.upload(&input)?;
//!     s.fork(&b, &x, |c, x| {
//!         let _y = c.upload(&input)?;          // overlaps the parent's work
//!         let _ = x;
//!         Ok::<_, Error>(())
//!     })
//! })?;
//! trace.write_chrome_json("upload.trace.json")?; // open it in ui.perfetto.dev
//! # Ok(()) }
//! ```
//!
//! Owns: [`Trace`], its timing events and the Chrome trace writer. Uses: `device/`
//! (devices, streams), `driver/` (timing events), `error`. `scope/` records into it.

mod chrome;
mod recorder;

pub use recorder::Trace;
pub(crate) use recorder::{Category, ChunkTrace, Mark};
