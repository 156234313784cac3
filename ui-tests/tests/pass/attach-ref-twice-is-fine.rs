//! Attaching one `DeviceVec` read-only twice in a scope, and read-only in two nested
//! scopes on two streams: shared reads do not race.
use stream_core::{scope, DeviceVec, Error, Stream};

fn run(a: &Stream, b: &Stream, weights: &DeviceVec<f32>) -> Result<(), Error> {
    let mut out_a = vec![0f32; weights.len()];
    let mut out_b = vec![0f32; weights.len()];
    scope(a, |s| {
        let w1 = s.attach_ref(weights)?;
        let w2 = s.attach_ref(weights)?;
        let mut x = s.alloc::<f32>(weights.len())?;
        s.copy_device(&w1, &mut x)?;
        s.copy_device(&w2, &mut x)?;
        let pending = s.copy_to_host(&w1, &mut out_a)?;
        scope(b, |t| {
            let w3 = t.attach_ref(weights)?;
            t.copy_to_host(&w3, &mut out_b)?.wait()?;
            Ok::<_, Error>(())
        })?;
        pending.wait()?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = run;
}
