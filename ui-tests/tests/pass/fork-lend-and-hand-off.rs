//! Fork/join on two streams: the child reads a lent parent buffer, writes a mutably
//! lent one, takes one by value, hands one back; the host memory the child used is
//! free again once the scope has returned.
use stream_core::{scope, Error, Stream};

fn run(a: &Stream, b: &Stream, input: &[f32], out: &mut [f32]) -> Result<(), Error> {
    let mut local = vec![0f32; input.len()];
    let mut local2 = vec![0f32; input.len()];
    scope(a, |s| {
        let x = s.upload(input)?;
        let mut y = s.alloc_zeroed::<f32>(input.len())?;
        let z = s.upload(input)?;
        let back = s.fork(b, (&x, &mut y, z), |c, (xs, mut ys, z)| {
            c.copy_device(&xs, &mut ys)?;
            let _pending = c.copy_to_host(&z, &mut local)?;
            let w = c.upload(input)?;
            c.hand_off(w, s)
        })?;
        s.copy_device(&back, &mut y)?;
        let (lo, _hi) = y.split_at_mut(1)?;
        s.fork(b, lo, |c, mut lo| c.fill(&mut lo, 1.0))?;
        s.fork(b, (), |c, ()| c.alloc::<f32>(4).map(drop))?;
        let w = s.upload(input)?;
        s.fork(b, (), |c, ()| {
            let w = s.hand_off(w, c)?;
            let _pending = c.copy_to_host(&w, &mut local2)?;
            Ok::<_, Error>(())
        })?;
        s.copy_to_host(&x, out)?.wait()?;
        Ok::<_, Error>(())
    })?;
    local[0] += local2[0];
    Ok(())
}

fn main() {
    let _ = run;
}
