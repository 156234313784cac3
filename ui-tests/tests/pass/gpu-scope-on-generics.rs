//! `#[gpu_scope]` on a generic function with bounds both inline and in a `where`
//! clause; callers pass the stream where the scope was.
use stream_core::{gpu_scope, DeviceRepr, Result, Scope, Stream};

#[gpu_scope]
fn fill_then_overwrite<T: DeviceRepr>(s: &Scope, input: &[T], out: &mut [T]) -> Result<()>
where
    T: Default,
{
    let mut x = s.alloc::<T>(input.len())?;
    s.fill(&mut x, T::default())?;
    s.copy_to_device(input, &mut x)?;
    s.copy_to_host(&x, out)?.wait()?;
    Ok(())
}

fn run(stream: &Stream) -> Result<()> {
    let input = vec![7u32; 32];
    let mut out = vec![0u32; 32];
    fill_then_overwrite(stream, &input, &mut out)?;
    let wide = vec![1.5f64; 8];
    let mut wide_out = vec![0f64; 8];
    fill_then_overwrite::<f64>(stream, &wide, &mut wide_out)?;
    Ok(())
}

fn main() {
    let _ = run;
}
