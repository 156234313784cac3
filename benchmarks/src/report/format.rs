//! How figures and ratios are written in the table and the progress lines.

/// A figure with three significant digits or so.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A ratio with three decimals.
pub fn fmt_ratio(v: f64) -> String {
    format!("{v:.3}")
}
