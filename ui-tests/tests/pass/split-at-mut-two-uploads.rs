//! Host memory split with `split_at_mut`: one half's upload is pending while the host
//! still writes the other half, then uploads it too, into the two halves of a device
//! buffer split the same way.
use stream_core::{scope, Error, Stream};

fn run(stream: &Stream) -> Result<(), Error> {
    let mut data = vec![1f32; 32];
    let (lo, hi) = data.split_at_mut(16);
    scope(stream, |s| {
        let mut x = s.alloc::<f32>(32)?;
        let (mut dlo, mut dhi) = x.split_at_mut(16)?;
        s.copy_to_device(lo, &mut dlo)?;
        hi.iter_mut().for_each(|v| *v = 2.0);
        s.copy_to_device(hi, &mut dhi)?;
        Ok::<_, Error>(())
    })?;
    data.fill(0.0);
    Ok(())
}

fn main() {
    let _ = run;
}
