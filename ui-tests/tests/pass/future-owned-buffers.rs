//! The owned-buffer futures in the forms users write: `run_owned` over a tuple of
//! pinned buffers and a `DeviceVec`, `'static` host memory, an `Arc<Stream>` in the owned
//! value for a fork, `upload_owned` of each owned buffer type, `download_owned` of a
//! `DeviceVec` and of an `Arc` of one, and futures spawned on a multi-threaded tokio runtime.
use std::sync::Arc;

use stream_core::{Device, DeviceVec, Error, PinnedBuffer, Stream};

static TABLE: [f32; 4] = [1.0, 2.0, 3.0, 4.0];

async fn request(
    stream: Arc<Stream>,
    input: PinnedBuffer<f32>,
    output: PinnedBuffer<f32>,
    weights: DeviceVec<f32>,
) -> Result<(PinnedBuffer<f32>, PinnedBuffer<f32>, DeviceVec<f32>), Error> {
    let ((input, output, weights), n) = stream
        .run_owned((input, output, weights), |s, (input, output, weights)| {
            let w = s.attach(weights)?;
            let mut x = s.upload(&input[..])?;
            s.copy_device(&w, &mut x)?;
            let _table = s.upload(&TABLE[..])?;
            let _download = s.copy_to_host(&x, &mut output[..])?;
            Ok::<_, Error>(x.len())
        })
        .await?;
    assert_eq!(n, input.len());
    Ok((input, output, weights))
}

async fn fork_on_an_owned_stream(stream: &Stream, other: Arc<Stream>) -> Result<(), Error> {
    let (_other, ()) = stream
        .run_owned(other, |s, other| {
            let x = s.alloc_zeroed::<f32>(16)?;
            s.fork(other, &x, |c, x| {
                let mut y = c.alloc::<f32>(16)?;
                c.copy_device(&x, &mut y)?;
                Ok::<_, Error>(())
            })
        })
        .await?;
    Ok(())
}

async fn copies(dev: &Device, stream: &Stream) -> Result<(), Error> {
    let (a, _vec) = stream.upload_owned(vec![1.0f32; 8]).await?;
    let (b, _boxed) = stream.upload_owned(vec![1u32; 8].into_boxed_slice()).await?;
    let (c, _pinned) = stream.upload_owned(dev.alloc_pinned::<f64>(8)?).await?;
    let (a, host) = stream.download_owned(a, vec![0f32; 8]).await?;
    let shared = Arc::new(b);
    let (shared, _host) = stream
        .download_owned(Arc::clone(&shared), dev.alloc_pinned::<u32>(8)?)
        .await?;
    drop((a, host, c, shared));
    Ok(())
}

fn run(dev: Device, runtime: tokio::runtime::Runtime) -> Result<(), Error> {
    let stream = Arc::new(dev.new_stream()?);
    let weights = dev.upload_vec(&[0.5f32; 1024])?;
    let (input, output) = (dev.alloc_pinned(1024)?, dev.alloc_pinned(1024)?);
    let task = runtime.spawn(request(Arc::clone(&stream), input, output, weights));
    let _ = runtime.block_on(task);
    let other = Arc::new(dev.new_stream()?);
    runtime.block_on(fork_on_an_owned_stream(&stream, other))?;
    runtime.block_on(copies(&dev, &stream))
}

fn main() {
    let _ = run;
}
