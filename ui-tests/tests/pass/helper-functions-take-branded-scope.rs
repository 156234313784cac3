//! Helper functions take `&'s Scope<'s, '_>` together with other `'s` borrows and
//! return branded buffers and `Pending`s to the scope that called them.
use stream_core::{scope, DeviceBuffer, DeviceMemory, Error, Pending, Result, Scope, Stream};

fn upload_all<'s>(s: &'s Scope<'s, '_>, a: &'s [f32]) -> Result<DeviceBuffer<'s, f32>> {
    s.upload(a)
}

fn download<'s>(
    s: &'s Scope<'s, '_>,
    src: &impl DeviceMemory<'s, f32>,
    dst: &'s mut [f32],
) -> Result<Pending<'s, &'s mut [f32]>> {
    s.copy_to_host(src, dst)
}

fn run(stream: &Stream) -> Result<()> {
    let input = vec![3f32; 128];
    let mut out = vec![0f32; 64];
    scope(stream, |s| {
        let x = upload_all(s, &input)?;
        let tail = x.slice(64..)?;
        download(s, &tail, &mut out)?.wait()?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = run;
}
