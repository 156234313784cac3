//! `Cublas::gemm` on `f32` matrices.
//!
//! `gemm` is cuBLAS's half-precision product (`cublasGemmEx` with `f16` or `bf16`
//! elements and `f32` accumulation); its element type is bounded by the sealed
//! `HalfGemm`, whose message points to `sgemm` for `f32`.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, blas: &mut kernels::Cublas) -> Result<(), Error> {
    scope(stream, |s| {
        let a = s.alloc_zeroed::<f32>(4)?;
        let b = s.alloc_zeroed::<f32>(4)?;
        let mut c = s.alloc_zeroed::<f32>(4)?;
        blas.gemm(s, 2, 2, 2, 1.0, &a, &b, 0.0, &mut c)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
