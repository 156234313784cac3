//! Checks of the helpers themselves (they run everywhere, no GPU needed).

use crate::{
    accurate_sum, check_close, check_eq, poisoned, summation_height, Element, Rng, TestResult,
};

fn random_values_are_fresh<T: Element>() {
    let mut rng = Rng::with_seed(1);
    let values: Vec<T> = rng.vec(100_003);
    for v in &values {
        assert!(v.bits() != 0, "{}: a zero value was drawn", T::NAME);
        assert!(!T::same(*v, T::POISON), "{}: the poison was drawn", T::NAME);
    }
    let distinct = values
        .iter()
        .map(|v| v.bits())
        .collect::<std::collections::HashSet<_>>();
    assert!(
        distinct.len() > 200,
        "{}: only {} distinct values",
        T::NAME,
        distinct.len()
    );
    let mut other: Vec<T> = poisoned(values.len());
    Rng::with_seed(2).fill(&mut other);
    assert!(
        !T::all_same(&values, &other),
        "{}: two seeds drew the same data",
        T::NAME
    );
}

#[test]
fn random_values_are_non_zero_not_poison_and_vary_for_every_type() {
    random_values_are_fresh::<u8>();
    random_values_are_fresh::<u16>();
    random_values_are_fresh::<u32>();
    random_values_are_fresh::<u64>();
    random_values_are_fresh::<u128>();
    random_values_are_fresh::<i8>();
    random_values_are_fresh::<i16>();
    random_values_are_fresh::<i32>();
    random_values_are_fresh::<i64>();
    random_values_are_fresh::<f32>();
    random_values_are_fresh::<f64>();
    let floats: Vec<f64> = Rng::with_seed(3).vec(100_000);
    assert!(floats.iter().all(|x| x.is_normal()));
    assert!(f32::POISON.is_nan() && f64::POISON.is_nan());
}

#[test]
fn same_seed_draws_the_same_data() {
    let a: Vec<u32> = Rng::with_seed(42).vec(1000);
    let b: Vec<u32> = Rng::with_seed(42).vec(1000);
    assert_eq!(a, b);
}

#[test]
fn check_eq_reports_the_first_mismatch_and_unwritten_poison() {
    assert!(check_eq("equal", &[1.0f32, -0.0], &[1.0, -0.0]).is_ok());
    let nan = check_eq("nan poison", &[f32::POISON], &[f32::POISON]);
    assert!(nan.is_ok(), "bit-identical NaNs must compare equal");

    let err = check_eq("zero sign", &[0.0f32], &[-0.0]).unwrap_err();
    assert!(err.message().unwrap().contains("index 0"));

    let expected = [1u32, 2, 3, 4];
    let err = check_eq("download", &expected, &[1, 2, u32::POISON, 9]).unwrap_err();
    let message = err.message().unwrap();
    assert!(
        message.starts_with("download: first mismatch at index 2 of 4"),
        "{message}"
    );
    assert!(message.contains("0xdeadbeef"), "{message}");
    assert!(message.contains("never written"), "{message}");
    assert!(message.contains("2 of 4 elements differ"), "{message}");

    let err = check_eq("length", &expected, &[1, 2]).unwrap_err();
    assert!(err
        .message()
        .unwrap()
        .contains("expected 4 elements of u32, got 2"));
}

#[test]
fn seeds_parse_in_decimal_and_hex() {
    use crate::rng::parse_seed;
    assert_eq!(parse_seed("123"), Some(123));
    assert_eq!(parse_seed(" 0x00ff_0001 "), Some(0xff_0001));
    assert_eq!(parse_seed("0XAB"), Some(0xab));
    assert_eq!(parse_seed("seed"), None);
}

/// `summation_height` for the sizes the reductions are checked at.
#[test]
fn summation_height_counts_every_level_of_the_reduction() -> TestResult {
    for (n, expected) in [
        (0, 0),
        (1, 20),
        (256, 20),
        (257, 20),
        (7 << 18, 26),
        ((1 << 24) + 3, 39),
    ] {
        let h = summation_height(n);
        ensure!(
            h == expected,
            "summation_height({n}) is {h}, expected {expected}"
        );
    }
    Ok(())
}

/// `accurate_sum` recovers what plain left-to-right summation loses.
#[test]
fn accurate_sum_is_exact_where_plain_summation_is_not() -> TestResult {
    let terms = [1e16, 1.0, -1e16, 3.0];
    let plain: f64 = terms.iter().sum();
    let accurate = accurate_sum(terms.into_iter());
    ensure!(
        plain != 4.0,
        "plain summation happened to be exact: {plain}"
    );
    ensure!(accurate == 4.0, "accurate_sum gave {accurate}, expected 4");
    Ok(())
}

/// `check_close` fails on a NaN and on the poison, says so, and passes within tolerance.
#[test]
fn check_close_rejects_nan_and_names_the_poison() -> TestResult {
    ensure!(
        check_close("ok", &[1.0f32, 2.0], |i| (i as f64 + 1.0, 0.0)).is_ok(),
        "exact values were rejected"
    );
    ensure!(
        check_close("ok", &[1.5f64], |_| (1.0, 0.5)).is_ok(),
        "a value at the tolerance was rejected"
    );
    let nan = check_close("nan", &[1.0f32, f32::NAN], |_| (1.0, 1e9));
    ensure!(nan.is_err(), "a NaN was accepted");
    let message = check_close("poison", &[f64::POISON, 2.0, 5.0], |_| (2.0, 0.5))
        .err()
        .and_then(|f| f.message().map(str::to_owned))
        .unwrap_or_default();
    ensure!(
        message.contains("index 0")
            && message.contains("never written")
            && message.contains("2 of 3"),
        "the message {message:?} does not name the first index, the poison and the count"
    );
    Ok(())
}
