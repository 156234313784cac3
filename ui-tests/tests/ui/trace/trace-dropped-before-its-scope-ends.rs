//! A trace made inside the scope it records.
//!
//! The scope's timing events are read when the trace is written, after the scope's work
//! has run, so the trace must outlive the scope: `trace_into` borrows it for the scope's
//! `'env`, and one made inside the closure is dropped too soon.
use stream_core::{scope, trace::Trace, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let trace = Trace::new();
        s.trace_into(&trace)?;
        let _x = s.alloc_zeroed::<f32>(16)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
