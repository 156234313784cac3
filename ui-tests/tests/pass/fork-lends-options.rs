//! `Option`s lent to forks of a scope and of a capture: a pipeline's micro-batch that
//! has something to send and nothing to receive lends `(Some(&out), None)`; the child
//! gets `Some` of the views, or `None`.
use stream_core::{scope, Device, DeviceBuffer, Error, Scope, Stream};

fn step<'s, 'env>(
    s: &'s Scope<'s, 'env>,
    b: &'env Stream,
    out: &DeviceBuffer<'s, f32>,
    incoming: Option<&mut DeviceBuffer<'s, f32>>,
) -> Result<(), Error> {
    s.fork(b, (Some(out), incoming), |c, (out, incoming)| {
        if let (Some(out), Some(mut incoming)) = (out, incoming) {
            c.copy_device(&out, &mut incoming)?;
        }
        Ok::<_, Error>(())
    })
}

fn run(device: &Device, a: &Stream, b: &Stream) -> Result<(), Error> {
    scope(a, |s| {
        let out = s.alloc_zeroed::<f32>(16)?;
        let mut incoming = s.alloc::<f32>(16)?;
        step(s, b, &out, None)?;
        step(s, b, &out, Some(&mut incoming))?;
        let moved = Some(s.alloc_zeroed::<f32>(4)?);
        s.fork(b, moved, |c, moved| match moved {
            Some(buffer) => c.fill(&mut { buffer }, 1.0),
            None => Ok(()),
        })
    })?;
    let (_graph, ()) = device.capture((), |g, ()| {
        let mut x = g.alloc::<f32>(16)?;
        g.fork(Some(&mut x), |c, x| match x {
            Some(mut x) => c.fill(&mut x, 2.0),
            None => Ok::<_, Error>(()),
        })
    })?;
    Ok(())
}

fn main() {
    let _ = run;
}
