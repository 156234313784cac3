//! Unit tests of `#[kernel]`: expansions and spanned rejections, never a panic.

use proc_macro2::TokenStream;
use quote::quote;

use super::kernel;

fn expand(args: TokenStream, item: TokenStream) -> String {
    kernel(args, item).to_string()
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
    assert!(out.contains("Kernel :: new (\"axpy_f32\" , :: stream_core :: __private :: KernelSource :: Cuda (SRC))"), "{out}");
    assert!(out.contains("scalar :: < f32 > (a)"), "{out}");
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
            "Kernel :: new (\"my_kernel\" , my :: gpu :: __private :: KernelSource :: Ptx (PTX))"
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
            "unknown #[kernel] argument `foo`",
        ),
        (
            quote!(cuda),
            quote!(
                unsafe fn k();
            ),
            "expects `cuda = ...`",
        ),
        (
            quote!(1),
            quote!(
                unsafe fn k();
            ),
            "expected `#[kernel(cuda = SOURCE)]`",
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
                unsafe fn k(s: u32);
            ),
            "reserves the parameter name `s`",
        ),
        (
            quote!(cuda = S),
            quote!(
                unsafe fn k(config: u32);
            ),
            "reserves the parameter name `config`",
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
