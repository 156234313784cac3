//! A `DeviceVec` attached mutably in one scope is free again after it: it can be read
//! back with `to_host_vec`, attached in the next scope, or dropped.
use stream_core::{scope, Error, Stream};

fn run(stream: &Stream) -> Result<Vec<f32>, Error> {
    let mut weights = stream.device().alloc_vec::<f32>(16)?;
    scope(stream, |s| {
        let mut w = s.attach(&mut weights)?;
        s.fill(&mut w, 2.0)?;
        Ok::<_, Error>(())
    })?;
    let host = weights.to_host_vec()?;
    scope(stream, |s| {
        let mut w = s.attach(&mut weights)?;
        s.zero(&mut w)?;
        Ok::<_, Error>(())
    })?;
    drop(weights);
    Ok(host)
}

fn main() {
    let _ = run;
}
