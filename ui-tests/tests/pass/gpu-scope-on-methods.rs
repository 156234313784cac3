//! `#[gpu_scope]` on methods taking `&self` and `&mut self`: the scope is the first
//! parameter after the receiver, and the body may use `self`'s fields, including a
//! `DeviceVec` attached read-only or writable.
use stream_core::{gpu_scope, DeviceVec, Result, Scope, Stream};

struct Model {
    weights: DeviceVec<f32>,
    bias: f32,
}

impl Model {
    #[gpu_scope]
    fn step(&self, s: &Scope, input: &[f32], out: &mut [f32]) -> Result<()> {
        let w = s.attach_ref(&self.weights)?;
        let mut x = s.upload(input)?;
        s.copy_device(&w, &mut x)?;
        s.copy_to_host(&x, out)?.wait()?;
        Ok(())
    }

    #[gpu_scope]
    fn reset(&mut self, s: &Scope) -> Result<()> {
        let mut w = s.attach(&mut self.weights)?;
        s.fill(&mut w, self.bias)?;
        Ok(())
    }
}

fn run(stream: &Stream) -> Result<()> {
    let mut model = Model {
        weights: stream.device().upload_vec(&[1.0f32; 16])?,
        bias: 0.5,
    };
    let input = vec![2.0f32; 16];
    let mut out = vec![0f32; 16];
    model.reset(stream)?;
    model.step(stream, &input, &mut out)?;
    Ok(())
}

fn main() {
    let _ = run;
}
