//! A non-`Send` value captured by the `run_owned` closure and returned from it stays in
//! the future, which then cannot run on a multi-threaded runtime's workers.
use std::rc::Rc;
use std::sync::Arc;

use stream_core::{Error, Stream};

fn serve(stream: Arc<Stream>) {
    let label = Rc::new("request 1".to_owned());
    tokio::spawn(async move {
        let ((), label) = stream
            .run_owned((), move |s, ()| {
                let _x = s.alloc::<f32>(16)?;
                Ok::<_, Error>(label)
            })
            .await?;
        println!("{label}");
        Ok::<_, Error>(())
    });
}

fn main() {
    let _ = serve;
}
