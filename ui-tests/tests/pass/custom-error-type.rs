//! A user error type with `From<stream_core::Error>` as the closure's (and a
//! `#[gpu_scope]` function's) `E`: `?` converts library errors, the closure can fail
//! with its own, and a failed final synchronisation is converted too.
use stream_core::{gpu_scope, scope, Scope, Stream};

#[derive(Debug)]
enum AppError {
    Gpu(stream_core::Error),
    Empty,
}

impl From<stream_core::Error> for AppError {
    fn from(e: stream_core::Error) -> Self {
        AppError::Gpu(e)
    }
}

#[gpu_scope]
fn round_trip(s: &Scope, input: &[f32], out: &mut [f32]) -> Result<(), AppError> {
    if input.is_empty() {
        return Err(AppError::Empty);
    }
    let x = s.upload(input)?;
    s.copy_to_host(&x, out)?.wait()?;
    Ok(())
}

fn run(stream: &Stream) -> Result<(), AppError> {
    let input = vec![1f32; 8];
    let mut out = vec![0f32; 8];
    scope(stream, |s| {
        let x = s.upload(&input)?;
        if x.is_empty() {
            return Err(AppError::Empty);
        }
        Ok(())
    })?;
    round_trip(stream, &input, &mut out)
}

fn main() {
    let _ = run;
    let _ = AppError::Gpu;
}
