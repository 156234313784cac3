//! Reading a `DeviceVec` that a graph writes, while the graph exists.
//!
//! The graph holds `&mut state` exclusively for its whole life; read it through
//! `Graph::held` between replays.
use stream_core::{scope, Device, Error, Stream};

fn f(dev: &Device, stream: &Stream) -> Result<(), Error> {
    let mut state = dev.alloc_vec::<f32>(16)?;
    let (mut graph, ()) = dev.capture(&mut state, |g, mut state| {
        g.fill(&mut state, 1.0)?;
        Ok::<_, Error>(())
    })?;
    let _host = state.to_host_vec()?;
    scope(stream, |s| s.replay(&mut graph).map(drop))
}

fn main() {
    let _ = f;
}
