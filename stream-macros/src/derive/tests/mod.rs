//! Unit tests of `#[derive(DeviceRepr)]`, outside the compiler: what accepted structs
//! expand to, which token each rejection points at (with `proc-macro2`'s
//! `span-locations`, tokens lexed from a string remember their text), and that the
//! derive never panics. What the type checker reports (a field that is not
//! `DeviceRepr`, a missing bound, padding) is covered by `ui-tests/tests/ui/derive/`.

mod never_panics;

use proc_macro2::TokenStream;

use super::device_repr;
use crate::diagnostics::Rejected;

/// Lexes test input written as a string (so that spans know their text).
fn lex(source: &str) -> TokenStream {
    source
        .parse()
        .unwrap_or_else(|err| panic!("test input does not lex: {err}: {source}"))
}

/// The expansion of an accepted struct, as a string.
fn expand_ok(source: &str) -> String {
    match device_repr(lex(source)) {
        Ok(tokens) => tokens.to_string(),
        Err(rejected) => panic!("unexpectedly rejected: {}", rejected.into_compile_error()),
    }
}

/// `(source text the error points at, message)` of every error of a rejected struct,
/// and what was emitted next to them.
fn rejections(source: &str) -> (Vec<(String, String)>, String) {
    let rejected = match device_repr(lex(source)) {
        Ok(tokens) => panic!("unexpectedly accepted: {tokens}"),
        Err(rejected) => rejected,
    };
    let errors = rejected
        .error()
        .clone()
        .into_iter()
        .map(|error| {
            (
                error.span().source_text().unwrap_or_default(),
                error.to_string(),
            )
        })
        .collect();
    (errors, emitted_next_to(rejected))
}

/// What a rejection emits besides its `compile_error!`s.
fn emitted_next_to(rejected: Rejected) -> String {
    let all = rejected.into_compile_error().to_string();
    all.split(":: core :: compile_error !")
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Checks what every message must look like (STYLE.md rule 5): it names the derive
/// first and goes on in lowercase (or with a quoted name).
pub(super) fn assert_well_formed(message: &str) {
    let rest = message
        .strip_prefix("#[derive(DeviceRepr)] ")
        .unwrap_or_else(|| panic!("message does not start with the derive: {message}"));
    assert!(
        rest.starts_with(|c: char| c.is_ascii_lowercase() || c == '`'),
        "message does not go on in lowercase: {message}"
    );
}

#[test]
fn a_repr_c_struct_gets_field_assertions_a_padding_assertion_and_the_impl() {
    let out =
        expand_ok("#[repr(C)] pub struct Particle { position: [f32; 3], mass: f32, charge: f32 }");
    // One assertion per distinct field type.
    assert_eq!(
        out.matches("__stream_core_is_device_repr :: < f32 >")
            .count(),
        1,
        "{out}"
    );
    assert!(
        out.contains("__stream_core_is_device_repr :: < [f32 ; 3] >"),
        "{out}"
    );
    assert!(
        out.contains(
            ":: core :: mem :: size_of :: < Particle > () == 0usize + :: core :: mem :: size_of :: < [f32 ; 3] > () + :: core :: mem :: size_of :: < f32 > () + :: core :: mem :: size_of :: < f32 > ()"
        ),
        "{out}"
    );
    assert!(
        out.contains("unsafe impl :: stream_core :: __private :: DeviceRepr for Particle { }"),
        "{out}"
    );
    assert!(out.contains("SAFETY: `Particle` is `#[repr(C)]`"), "{out}");
    assert!(
        !out.contains(":: cudarc"),
        "no cudarc impl unless asked: {out}"
    );
}

#[test]
fn a_generic_struct_of_one_field_type_is_bounded_and_needs_no_size_assertion() {
    let out = expand_ok("#[repr(C)] struct Vec3<T: DeviceRepr> { x: T, y: T, z: T }");
    assert!(
        out.contains("fn __stream_core_fields_are_device_repr < T : DeviceRepr > ()"),
        "{out}"
    );
    assert_eq!(
        out.matches("__stream_core_is_device_repr :: < T >").count(),
        1,
        "{out}"
    );
    assert!(!out.contains("size_of"), "{out}");
    assert!(
        out.contains(
            "unsafe impl < T : DeviceRepr > :: stream_core :: __private :: DeviceRepr for Vec3 < T > where T : :: stream_core :: __private :: DeviceRepr ,"
        ),
        "{out}"
    );
}

#[test]
fn transparent_and_const_generic_structs_are_accepted() {
    let out = expand_ok("#[repr(transparent)] struct Wrapped<T: DeviceRepr>(T);");
    assert!(
        out.contains("SAFETY: `Wrapped` is `#[repr(transparent)]`"),
        "{out}"
    );
    let out = expand_ok("#[repr(C)] struct Grid<const N: usize> { a: [f32; N], b: [f32; N] }");
    assert!(out.contains("for Grid < N >"), "{out}");
    let out = expand_ok("#[repr(C, packed)] struct Packed { a: u8, b: u32 }");
    assert!(out.contains("size_of :: < Packed >"), "{out}");
}

#[test]
fn crate_path_and_cudarc_arguments_are_honoured() {
    let out =
        expand_ok("#[device_repr(crate = my::gpu, cudarc)] #[repr(C)] struct P { a: f32, b: f32 }");
    assert!(
        out.contains("unsafe impl my :: gpu :: __private :: DeviceRepr for P"),
        "{out}"
    );
    assert!(
        out.contains("unsafe impl :: cudarc :: driver :: DeviceRepr for P"),
        "{out}"
    );
    assert!(
        out.contains("unsafe impl :: cudarc :: driver :: ValidAsZeroBits for P"),
        "{out}"
    );
    assert!(!out.contains(":: stream_core"), "{out}");
}

#[test]
fn each_rejection_points_at_the_offending_token() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "struct P { a: f32 }",
            "P",
            "needs `#[repr(C)]` or `#[repr(transparent)]`",
        ),
        (
            "#[repr(packed)] struct P { a: f32 }",
            "P",
            "needs `#[repr(C)]`",
        ),
        (
            "#[repr(C)] struct P { a: &'static f32 }",
            "&'static f32",
            "reference field",
        ),
        (
            "#[repr(C)] struct P { a: *const f32 }",
            "*const f32",
            "pointer field",
        ),
        ("#[repr(C)] struct P { a: fn() }", "fn()", "pointer field"),
        ("#[repr(C)] struct P { a: bool }", "bool", "`bool` field"),
        (
            "#[repr(C)] struct P { a: [[char; 2]; 2] }",
            "char",
            "`char` field",
        ),
        ("#[repr(C)] struct P {}", "P", "at least one field"),
        ("#[repr(C)] struct P;", "P", "at least one field"),
        (
            "#[repr(C)] enum E { A }",
            "enum",
            "structs only, not to enums",
        ),
        (
            "#[repr(C)] union U { a: u32 }",
            "union",
            "structs only, not to unions",
        ),
        (
            "#[repr(C)] struct P<'a> { a: &'a u32 }",
            "'a",
            "lifetime parameters",
        ),
        (
            "#[repr(C)] struct P<T> { a: u8, b: T }",
            "T",
            "cannot prove",
        ),
        (
            "#[repr(C, align(8))] struct P<T> { a: T }",
            "align",
            "`repr(align(..))`",
        ),
        (
            "#[device_repr(packed)] #[repr(C)] struct P { a: u8 }",
            "packed",
            "takes only",
        ),
        (
            "#[device_repr(cudarc, cudarc)] #[repr(C)] struct P { a: u8 }",
            "cudarc",
            "at most once",
        ),
        (
            "#[device_repr(crate = a, crate = b)] #[repr(C)] struct P { a: u8 }",
            "crate",
            "at most once",
        ),
        (
            "#[device_repr(crate = \"a\")] #[repr(C)] struct P { a: u8 }",
            "\"a\"",
            "could not parse `#[device_repr(..)]`",
        ),
    ];
    for (source, points_at, says) in cases {
        let (errors, _) = rejections(source);
        assert!(
            errors
                .iter()
                .any(|(text, message)| text == points_at && message.contains(says)),
            "{source}: expected an error at `{points_at}` saying `{says}`, got {errors:#?}"
        );
        for (_, message) in &errors {
            assert_well_formed(message);
        }
    }
}

#[test]
fn every_mistake_is_reported_at_once() {
    let (errors, _) = rejections("struct P<'a> { a: bool, b: *mut u8, c: &'a u8 }");
    let texts: Vec<&str> = errors.iter().map(|(text, _)| text.as_str()).collect();
    assert_eq!(
        texts,
        ["P", "'a", "bool", "*mut u8", "&'a u8"],
        "{errors:#?}"
    );
}

#[test]
fn a_rejected_struct_is_stood_in_for_unless_that_would_add_errors() {
    let (_, emitted) = rejections("#[repr(C)] struct P { a: bool }");
    assert!(
        emitted.contains("unsafe impl :: stream_core :: __private :: DeviceRepr for P"),
        "{emitted}"
    );
    for source in [
        "#[repr(C)] struct P { a: *mut u8 }",
        "#[repr(C)] struct P<'a> { a: &'a u8 }",
        "#[repr(C)] enum E { A }",
    ] {
        let (_, emitted) = rejections(source);
        assert!(emitted.trim().is_empty(), "{source}: {emitted}");
    }
}
