//! A host buffer moved into an upload belongs to the future until it completes: reading
//! it meanwhile does not compile. The future hands it back.
use stream_core::Stream;

async fn upload(stream: &Stream) {
    let data = vec![1.0f32; 1024];
    let pending = stream.upload_owned(data);
    println!("{}", data[0]);
    let _ = pending.await;
}

fn main() {
    let _ = upload;
}
