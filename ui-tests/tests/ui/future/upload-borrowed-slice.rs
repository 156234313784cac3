//! An asynchronous upload must own its host buffer: a borrowed slice could be freed or
//! written while the DMA reads it, once the future is forgotten.
use stream_core::Stream;

async fn upload(stream: &Stream, data: &[f32]) {
    let _ = stream.upload_owned(data).await;
}

fn main() {
    let _ = upload;
}
