//! An outer scope on stream `a` and an inner scope on stream `b`, each with its own
//! buffers and its own download destination, both uploading the same host input
//! (shared borrows of it coexist).
use stream_core::{scope, Error, Stream};

fn run(a: &Stream, b: &Stream) -> Result<bool, Error> {
    let input: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let mut out_a = vec![0f32; 64];
    let mut out_b = vec![0f32; 64];
    scope(a, |s| {
        let x = s.upload(&input)?;
        let pending_a = s.copy_to_host(&x, &mut out_a)?;
        scope(b, |t| {
            let y = t.upload(&input)?;
            t.copy_to_host(&y, &mut out_b)?.wait()?;
            Ok::<_, Error>(())
        })?;
        let host_a = pending_a.wait()?;
        println!("{}", host_a[0] + input[1]);
        Ok::<_, Error>(())
    })?;
    Ok(out_a == out_b)
}

fn main() {
    let _ = run;
}
