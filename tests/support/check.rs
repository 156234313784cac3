//! Poisoning outputs and comparing them with a CPU reference.

use std::any::Any;

use libtest_mimic::Failed;

use stream_core::Error;

use crate::element::Element;

/// A vector of `len` elements all set to `T::POISON` (written, so every page is
/// touched before the GPU writes it).
pub fn poisoned<T: Element>(len: usize) -> Vec<T> {
    vec![T::POISON; len]
}

/// Sets every element of `out` to `T::POISON`.
pub fn poison<T: Element>(out: &mut [T]) {
    out.fill(T::POISON);
}

/// `Ok` when `actual` equals the CPU reference `expected` bit for bit; otherwise a
/// failure naming `what`, the first mismatching index with both values, whether that
/// element still holds the poison (never written), and how many elements differ.
///
/// ```
/// use gpu_tests::check_eq;
/// assert!(check_eq("same", &[1u32, 2, 3], &[1, 2, 3]).is_ok());
/// let err = check_eq("download", &[1u32, 2, 3], &[1, 5, 3]).unwrap_err();
/// assert!(err.message().unwrap().contains("index 1"));
/// ```
pub fn check_eq<T: Element>(what: &str, expected: &[T], actual: &[T]) -> Result<(), Failed> {
    if expected.len() != actual.len() {
        return Err(Failed::from(format!(
            "{what}: expected {} elements of {}, got {}",
            expected.len(),
            T::NAME,
            actual.len()
        )));
    }
    if T::all_same(expected, actual) {
        return Ok(());
    }
    let mut mismatches = expected
        .iter()
        .zip(actual)
        .enumerate()
        .filter(|(_, (&e, &a))| !T::same(e, a));
    let Some((index, (&e, &a))) = mismatches.next() else {
        return Ok(());
    };
    let differing = 1 + mismatches.count();
    let unwritten = if T::same(a, T::POISON) {
        " (the poison value: this element was never written)"
    } else {
        ""
    };
    Err(Failed::from(format!(
        "{what}: first mismatch at index {index} of {len} ({ty}): expected {e}, got {a}{unwritten}; \
         {differing} of {len} elements differ",
        len = expected.len(),
        ty = T::NAME,
        e = e.describe(),
        a = a.describe(),
    )))
}

/// The error of `result`, or a failure naming `what` when it succeeded.
pub fn expect_err<T>(
    what: &str,
    result: stream_core::Result<T>,
) -> Result<stream_core::Error, Failed> {
    match result {
        Ok(_) => Err(Failed::from(format!(
            "{what}: succeeded, but it must return an error"
        ))),
        Err(e) => Ok(e),
    }
}

/// The message of a panic payload (`panic!("...")` gives a `&str` or a `String`).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic payload that is not a string".to_owned()
    }
}

/// `Ok` when `err` is `expected`, and its message contains every piece of `parts`.
pub fn check_error(
    what: &str,
    err: &Error,
    expected: &Error,
    parts: &[&str],
) -> Result<(), Failed> {
    crate::ensure!(
        err == expected,
        "{what}: got {err:?}, expected {expected:?}"
    );
    let message = err.to_string();
    for part in parts {
        crate::ensure!(
            message.contains(part),
            "{what}: the message {message:?} does not contain {part:?}"
        );
    }
    Ok(())
}
