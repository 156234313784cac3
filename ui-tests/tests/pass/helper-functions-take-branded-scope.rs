//! Helper functions take `&'s Scope<'s, 'env>` with device memory branded `'s` and host
//! memory borrowed for `'env`, and return branded buffers and `Pending`s to the scope
//! (or fork) that called them.
use stream_core::{scope, DeviceBuffer, DeviceMemory, Error, Pending, Result, Scope, Stream};

fn upload_all<'s, 'env>(s: &'s Scope<'s, 'env>, a: &'env [f32]) -> Result<DeviceBuffer<'s, f32>> {
    s.upload(a)
}

fn download<'s, 'env>(
    s: &'s Scope<'s, 'env>,
    src: &impl DeviceMemory<'s, f32>,
    dst: &'env mut [f32],
) -> Result<Pending<'s, &'env mut [f32]>> {
    s.copy_to_host(src, dst)
}

fn run(stream: &Stream, other: &Stream) -> Result<()> {
    let input = vec![3f32; 128];
    let mut out = vec![0f32; 64];
    let mut out2 = vec![0f32; 128];
    scope(stream, |s| {
        let x = upload_all(s, &input)?;
        let tail = x.slice(64..)?;
        download(s, &tail, &mut out)?.wait()?;
        s.fork(other, (), |c, ()| {
            let y = upload_all(c, &input)?;
            let _pending = download(c, &y, &mut out2)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = run;
}
