//! [`gemm_reference`]: the CPU's matrix product that the SGEMM tests compare with (a
//! host test of `test_gemm` checks it against a plain triple loop), and the shapes on
//! which the tiled SGEMM splits k ([`SPLIT_SHAPES`]).

/// Shapes `(m, n, k)` for which `kernels::sgemm_tiled` splits k on any device of 8 or
/// more multiprocessors (`test_gemm_split_k` checks that they do on the test device): a
/// weight gradient (16-byte loads), odd lengths with a last range shorter than the others
/// (scalar loads), one element of C over a long k (the most ranges).
pub const SPLIT_SHAPES: [(usize, usize, usize); 3] =
    [(256, 256, 1024), (130, 70, 1001), (1, 1, 20_000)];

/// `A B` and `|A| |B|` (row-major, `m x k` times `k x n`) in `f64`, rows spread over
/// the host's cores.
pub fn gemm_reference(
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    b: &[f32],
) -> (Vec<f64>, Vec<f64>) {
    let mut ab = vec![0f64; m * n];
    let mut abs = vec![0f64; m * n];
    if m == 0 || n == 0 {
        return (ab, abs);
    }
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let rows_per_thread = m.div_ceil(threads);
    std::thread::scope(|t| {
        let chunks = ab
            .chunks_mut(rows_per_thread * n)
            .zip(abs.chunks_mut(rows_per_thread * n));
        for (chunk, (ab_rows, abs_rows)) in chunks.enumerate() {
            t.spawn(move || {
                let rows = ab_rows.chunks_mut(n).zip(abs_rows.chunks_mut(n));
                for (r, (ab_row, abs_row)) in rows.enumerate() {
                    let i = chunk * rows_per_thread + r;
                    for p in 0..k {
                        let aip = f64::from(a[i * k + p]);
                        let b_row = &b[p * n..(p + 1) * n];
                        for ((sum, sum_abs), &bpj) in
                            ab_row.iter_mut().zip(abs_row.iter_mut()).zip(b_row)
                        {
                            let product = aip * f64::from(bpj);
                            *sum += product;
                            *sum_abs += product.abs();
                        }
                    }
                }
            });
        }
    });
    (ab, abs)
}
