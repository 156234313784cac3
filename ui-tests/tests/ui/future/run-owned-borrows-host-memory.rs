//! A `run_owned` closure cannot hand borrowed host memory to a copy: the copy may still
//! run after `run_owned` returns, when the borrow has ended.
use stream_core::{Error, Stream};

async fn request(stream: &Stream) -> Result<(), Error> {
    let input = vec![1.0f32; 256];
    stream
        .run_owned((), |s, ()| {
            let _x = s.upload(&input)?;
            Ok::<_, Error>(())
        })
        .await?;
    Ok(())
}

fn main() {
    let _ = request;
}
