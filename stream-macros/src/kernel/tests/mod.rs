//! Unit tests of `#[kernel]`: expansions and spanned rejections, never a panic.

mod never_panics;
mod shapes;

use proc_macro2::TokenStream;
use quote::quote;

use super::kernel;
use crate::diagnostics::Rejected;

/// The attribute's output, as the compiler would get it.
fn expand(args: TokenStream, item: TokenStream) -> String {
    kernel(args, item)
        .unwrap_or_else(Rejected::into_compile_error)
        .to_string()
}

fn error_of(args: TokenStream, item: TokenStream) -> String {
    let out = expand(args, item);
    assert!(
        out.contains("compile_error"),
        "expected an error, got: {out}"
    );
    out
}

#[test]
fn read_write_and_scalar_parameters_become_branded_memory_and_values() {
    let out = expand(
        quote!(cuda = SRC),
        quote!(
            pub unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]);
        ),
    );
    assert!(out.contains("pub fn axpy_f32 < 's >"), "{out}");
    assert!(
        out.contains("x : & impl :: stream_core :: __private :: DeviceMemory < 's , f32 >"),
        "{out}"
    );
    assert!(
        out.contains("y : & mut impl :: stream_core :: __private :: DeviceMemoryMut < 's , f32 >"),
        "{out}"
    );
    assert!(out.contains("Kernel :: new (\"axpy_f32\" , :: stream_core :: __private :: KernelSource :: Cuda (SRC) , :: stream_core :: __private :: KernelShape { block : :: stream_core :: __private :: BlockRule :: Any , shared : :: stream_core :: __private :: SharedRule :: Any })"), "{out}");
    assert!(out.contains("scalar :: < f32 > (a)"), "{out}");
}

#[test]
fn the_wrapper_takes_a_scope_or_a_capture_and_describes_its_parameters() {
    let out = expand(
        quote!(cuda = SRC),
        quote!(
            pub unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]);
        ),
    );
    assert!(
        out.contains("& 's impl :: stream_core :: __private :: Enqueue < 's >"),
        "{out}"
    );
    assert!(
        out.contains(
            ". with_params (& [:: stream_core :: __private :: KernelParam :: scalar :: < f32 > (\"a\" , \"f32\") , :: stream_core :: __private :: KernelParam :: slice (\"x\") , :: stream_core :: __private :: KernelParam :: slice (\"y\")])"
        ),
        "{out}"
    );
}

#[test]
fn name_ptx_and_crate_arguments_are_honoured() {
    let out = expand(
        quote!(ptx = PTX, name = "my_kernel", crate = my::gpu),
        quote!(
            unsafe fn k(x: &[u32]);
        ),
    );
    assert!(
        out.contains(
            "Kernel :: new (\"my_kernel\" , my :: gpu :: __private :: KernelSource :: Ptx (PTX) ,"
        ),
        "{out}"
    );
}

#[test]
fn docs_are_kept() {
    let out = expand(
        quote!(cuda = SRC),
        quote!(
            #[doc = " Adds."]
            pub unsafe fn add(x: &mut [f32]);
        ),
    );
    assert!(out.contains("# [doc = \" Adds.\"]"), "{out}");
}

#[test]
fn rejections_say_what_is_expected() {
    let cases: Vec<(TokenStream, TokenStream, &str)> = vec![
        (
            quote!(cuda = S),
            quote!(
                pub fn k(x: &[f32]);
            ),
            "must be `unsafe fn`",
        ),
        (
            quote!(),
            quote!(
                unsafe fn k(x: &[f32]);
            ),
            "needs the kernel's code",
        ),
        (
            quote!(cuda = S, ptx = P),
            quote!(
                unsafe fn k();
            ),
            "one of `cuda = ...` or `ptx = ...`",
        ),
        (
            quote!(cuda = S, name = "a", name = "b"),
            quote!(
                unsafe fn k();
            ),
            "`name = ...` at most once",
        ),
        (
            quote!(cuda = S, crate = a, crate = b),
            quote!(
                unsafe fn k();
            ),
            "`crate = ...` at most once",
        ),
        (
            quote!(foo = S),
            quote!(
                unsafe fn k();
            ),
            "does not take an argument `foo`",
        ),
        (
            quote!(cuda),
            quote!(
                unsafe fn k();
            ),
            "expects `=` after `cuda`",
        ),
        (
            quote!(1),
            quote!(
                unsafe fn k();
            ),
            "expects arguments written `name = value`",
        ),
        (
            quote!(cuda = S),
            quote!(
                unsafe fn k(x: &[f32]) {}
            ),
            "without a body",
        ),
        (
            quote!(cuda = S),
            quote!(
                struct K;
            ),
            "without a body",
        ),
        (quote!(cuda = S), quote!(), "without a body"),
        (
            quote!(cuda = S),
            quote!(
                async unsafe fn k();
            ),
            "cannot be `async`",
        ),
        (
            quote!(cuda = S),
            quote!(
                const unsafe fn k();
            ),
            "cannot be `const`",
        ),
        (
            quote!(cuda = S),
            quote!(
                unsafe extern "C" fn k();
            ),
            "take no ABI",
        ),
        (
            quote!(cuda = S),
            quote!(
                unsafe fn k<T>(x: &[T]);
            ),
            "cannot be generic",
        ),
        (
            quote!(cuda = S),
            quote!(
                unsafe fn k(x: &[f32]) -> u32;
            ),
            "return nothing",
        ),
        (
            quote!(cuda = S),
            quote!(
                unsafe fn k(&self);
            ),
            "cannot take `self`",
        ),
        (
            quote!(cuda = S),
            quote!(
                unsafe fn k((a, b): (u32, u32));
            ),
            "plain names",
        ),
        (
            quote!(cuda = S),
            quote!(
                unsafe fn k(x: &Vec<f32>);
            ),
            "as a slice",
        ),
        (
            quote!(cuda = S),
            quote!(
                unsafe fn k(x: *mut f32);
            ),
            "does not take raw pointers",
        ),
        (
            quote!(cuda = S),
            quote!(
                unsafe fn k(x: &'a [f32]);
            ),
            "take no lifetimes",
        ),
    ];
    for (args, item, expected) in cases {
        let shown = format!("#[kernel({args})] {item}");
        let out = std::panic::catch_unwind(|| error_of(args, item))
            .unwrap_or_else(|_| panic!("#[kernel] panicked on {shown}"));
        assert!(
            out.contains(expected),
            "for {shown}: expected {expected:?} in {out}"
        );
    }
}

#[test]
fn all_errors_are_reported_together() {
    let out = error_of(
        quote!(cuda = S),
        quote!(
            async fn k<T>(x: *mut f32) -> u8;
        ),
    );
    for expected in [
        "must be `unsafe fn`",
        "cannot be `async`",
        "cannot be generic",
        "return nothing",
        "raw pointers",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in {out}");
    }
}

/// Lexes test input written as a string, so that spans know their source text.
fn lex(source: &str) -> TokenStream {
    source
        .parse()
        .unwrap_or_else(|err| panic!("test input does not lex: {err}: {source}"))
}

/// The rejection of `#[kernel(args)] item`, failing the test if it is accepted.
fn rejected(args: &str, item: &str) -> Rejected {
    match kernel(lex(args), lex(item)) {
        Ok(tokens) => panic!("#[kernel({args})] {item} was accepted: {tokens}"),
        Err(rejected) => rejected,
    }
}

/// Every error of a rejection: the source text its span starts at and its message.
fn errors_of(rejected: &Rejected) -> Vec<(Option<String>, String)> {
    rejected
        .error()
        .clone()
        .into_iter()
        .map(|error| (error.span().source_text(), error.to_string()))
        .collect()
}

/// One expected error: the source text its span starts with, and words of its message.
type Expected = (&'static str, &'static str);

/// Checks what every message must look like (STYLE.md rule 5): it names the
/// attribute first and goes on in lowercase.
fn assert_well_formed(message: &str) {
    let rest = message
        .strip_prefix("#[kernel] ")
        .unwrap_or_else(|| panic!("message does not start with the attribute: {message}"));
    assert!(
        rest.starts_with(|c: char| c.is_ascii_lowercase() || c == '`'),
        "message does not go on in lowercase: {message}"
    );
}

#[test]
fn parameters_named_like_the_wrappers_own_are_accepted() {
    let out = expand(
        quote!(cuda = SRC),
        quote!(
            unsafe fn k(s: u32, config: u64, kernel: u32, args: u32, parts_0: u64, x: &[f32]);
        ),
    );
    assert!(!out.contains("compile_error"), "{out}");
    assert!(out.contains("scalar :: < u32 > (s)"), "{out}");
    assert!(out.contains("scalar :: < u64 > (config)"), "{out}");
    assert!(out.contains("read_parts :: < f32 > (x)"), "{out}");
}

#[test]
fn a_rejected_declaration_still_emits_its_wrapper_signature() {
    let out = expand(
        quote!(cuda = S, foo = 1),
        quote!(
            pub fn axpy(a: f32, x: &[f32], y: &mut [f32], p: *mut f32);
        ),
    );
    for expected in [
        "pub fn axpy < 's >",
        "a : f32",
        "x : & impl :: stream_core :: __private :: DeviceMemory < 's , f32 >",
        "y : & mut impl :: stream_core :: __private :: DeviceMemoryMut < 's , f32 >",
        "p : impl :: core :: marker :: Sized",
        ":: core :: unreachable ! ()",
        "does not take an argument `foo`",
        "must be `unsafe fn`",
        "does not take raw pointers",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in {out}");
    }
    assert!(syn::parse_str::<syn::File>(&out).is_ok(), "not Rust: {out}");
}

#[test]
fn a_declaration_with_a_body_keeps_its_signature_and_loses_the_body() {
    let out = expand(
        quote!(cuda = S, crate = my::gpu),
        quote!(
            unsafe fn k(x: &mut [u32]) {
                body_token();
            }
        ),
    );
    assert!(out.contains("fn k < 's >"), "{out}");
    assert!(
        out.contains("x : & mut impl my :: gpu :: __private :: DeviceMemoryMut < 's , u32 >"),
        "{out}"
    );
    assert!(!out.contains("body_token"), "{out}");
}

#[test]
fn something_that_is_not_a_signature_emits_only_the_errors() {
    let out = expand(
        quote!(cuda = S),
        quote!(
            struct K;
        ),
    );
    assert!(out.starts_with(":: core :: compile_error !"), "{out}");
}

#[test]
fn errors_point_at_the_offending_tokens() {
    let cases: &[(&str, &str, &[Expected])] = &[
        (
            "cuda = S, ptx = P",
            "unsafe fn k();",
            &[("ptx", "one of `cuda = ...` or `ptx = ...`, once")],
        ),
        (
            "cuda = S, foo = 1, name = 3",
            "unsafe fn k();",
            &[
                ("foo", "does not take an argument `foo`"),
                ("3", "could not parse the value of `name`"),
            ],
        ),
        (
            "cuda S",
            "unsafe fn k();",
            &[("S", "expects `=` after `cuda`")],
        ),
        (
            "cuda =",
            "unsafe fn k();",
            &[("=", "expects a value after `cuda =`")],
        ),
        (
            "cuda = S name = \"k\"",
            "unsafe fn k();",
            &[("name", "separated by `,`")],
        ),
        ("", "unsafe fn k();", &[("k", "needs the kernel's code")]),
        (
            "cuda = S",
            "unsafe fn k(x: &[f32]) { }",
            &[("{", "without a body")],
        ),
        (
            "cuda = S",
            "unsafe fn k(x: &'a [f32], y: &Vec<u8>, (a, b): (u8, u8));",
            &[
                ("'a", "take no lifetimes"),
                ("Vec", "as a slice"),
                ("(", "plain names"),
            ],
        ),
    ];
    for (args, item, expected) in cases {
        let found = errors_of(&rejected(args, item));
        assert_eq!(
            found.len(),
            expected.len(),
            "#[kernel({args})] {item}: {found:?}"
        );
        for ((span, message), (text, words)) in found.iter().zip(expected.iter()) {
            assert_well_formed(message);
            assert!(
                message.contains(words),
                "#[kernel({args})] {item}: `{message}` does not contain `{words}`"
            );
            assert!(
                span.as_deref().is_some_and(|span| span.starts_with(text)),
                "#[kernel({args})] {item}: `{message}` points at {span:?}, expected {text:?}"
            );
        }
    }
}
