//! Forgetting a download's `Pending` is safe and compiles: the destination stays
//! borrowed until the scope ends, and the scope's own synchronisation makes the copy
//! complete, so the host reads it after the scope.
use stream_core::{scope, Error, Stream};

fn run(stream: &Stream) -> Result<f32, Error> {
    let input: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let mut out = vec![0f32; 16];
    scope(stream, |s| {
        let x = s.upload(&input)?;
        let pending = s.copy_to_host(&x, &mut out)?;
        std::mem::forget(pending);
        Ok::<_, Error>(())
    })?;
    Ok(out[15])
}

fn main() {
    let _ = run;
}
