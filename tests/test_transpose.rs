//! `kernels::transpose` on a real GPU (`kernels/src/transpose.rs`): every element moves
//! to its mirrored place, bit for bit, for shapes that are and are not multiples of its
//! tile, and operands of the wrong size are refused before anything runs.
//!
//! Every test draws fresh non-zero random inputs, poisons its outputs before the GPU
//! runs, and compares with the CPU's transpose, exactly. Bad input is an `Err` of the
//! right variant that leaves the outputs untouched.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::{
    check_eq, check_error, expect_err, poisoned, stream, transposed, Element, Rng, TestResult,
};
use stream_core::{scope, Error};

gpu_tests::test_main! {
    gpu: [
        transpose_is_exact,
        transpose_with_wrong_sizes_is_shape_mismatch_and_writes_nothing,
    ],
}

/// `transpose` moves every element to its mirrored place, bit for bit, for shapes that
/// are and are not multiples of its 32x32 tile, and for empty ones.
fn transpose_is_exact() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for (rows, cols) in [(1, 1), (31, 33), (1000, 17), (4096, 4096), (0, 5), (5, 0)] {
        let input: Vec<f32> = rng.vec(rows * cols);
        let expected = transposed(&input, rows, cols);
        let mut out = poisoned::<f32>(rows * cols);
        scope(&stream, |s| -> TestResult {
            let x = s.upload(&input)?;
            let mut t = s.alloc::<f32>(rows * cols)?;
            s.fill(&mut t, f32::POISON)?;
            kernels::transpose(s, &x, rows as u32, cols as u32, &mut t)?;
            let _download = s.copy_to_host(&t, &mut out)?;
            Ok(())
        })?;
        check_eq(&format!("transpose of {rows}x{cols}"), &expected, &out)?;
    }
    Ok(())
}

/// `transpose` of a 3x4 matrix from 11 or 13 elements, or into 11 or 13, is
/// `ShapeMismatch` naming the operand; the output keeps its poison.
fn transpose_with_wrong_sizes_is_shape_mismatch_and_writes_nothing() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let (x11, x12, x13): (Vec<f32>, Vec<f32>, Vec<f32>) = (rng.vec(11), rng.vec(12), rng.vec(13));
    let mut out = poisoned::<f32>(12);
    scope(&stream, |s| -> TestResult {
        let (d11, d12, d13) = (s.upload(&x11)?, s.upload(&x12)?, s.upload(&x13)?);
        let mut o12 = s.alloc::<f32>(12)?;
        s.fill(&mut o12, f32::POISON)?;
        let mut o11 = s.alloc::<f32>(11)?;
        let mut o13 = s.alloc::<f32>(13)?;
        let input = "transpose: input (rows * cols)";
        let output = "transpose: output (rows * cols)";
        let cases = [
            (
                "input of 11",
                kernels::transpose(s, &d11, 3, 4, &mut o12),
                input,
                11,
            ),
            (
                "input of 13",
                kernels::transpose(s, &d13, 3, 4, &mut o12),
                input,
                13,
            ),
            (
                "output of 11",
                kernels::transpose(s, &d12, 3, 4, &mut o11),
                output,
                11,
            ),
            (
                "output of 13",
                kernels::transpose(s, &d12, 3, 4, &mut o13),
                output,
                13,
            ),
        ];
        for (what, result, operand, actual) in cases {
            let e = expect_err(what, result)?;
            let expected = Error::from(stream_core::error::ShapeMismatch {
                what: operand,
                expected: 12,
                actual,
            });
            check_error(what, &e, &expected, &[operand, "12", &actual.to_string()])?;
        }
        let _out = s.copy_to_host(&o12, &mut out)?;
        Ok(())
    })?;
    check_eq(
        "transpose output after refused launches",
        &poisoned::<f32>(12),
        &out,
    )
}
