//! `return` and `?` in a `#[gpu_scope]` function keep their meaning: they leave the
//! function with its own return type (the scope still synchronises on the way out).
use stream_core::{gpu_scope, Result, Scope, Stream};

#[gpu_scope]
fn copy_if_nonempty(s: &Scope, input: &[f32], out: &mut [f32]) -> Result<bool> {
    if input.is_empty() {
        return Ok(false);
    }
    let x = s.upload(input)?;
    let host = s.copy_to_host(&x, out)?.wait()?;
    if host[0].is_nan() {
        return Ok(false);
    }
    Ok(true)
}

fn run(stream: &Stream) -> Result<bool> {
    let input = vec![1f32; 4];
    let mut out = vec![0f32; 4];
    let copied = copy_if_nonempty(stream, &input, &mut out)?;
    let skipped = copy_if_nonempty(stream, &[], &mut [])?;
    Ok(copied && !skipped)
}

fn main() {
    let _ = run;
}
