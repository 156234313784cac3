//! `#[derive(DeviceRepr)]` never panics, whatever it is given: every prefix, suffix and
//! one-token deletion of structs it accepts and of `#[device_repr(..)]` arguments, and
//! deterministic token soup. Each output is Rust the compiler can read (the impls, or a
//! stand-in and `compile_error!`s), and every message follows the message rules.

use proc_macro2::TokenStream;

use super::assert_well_formed;
use crate::derive::device_repr;
use crate::fuzz::{assert_never_fails, Corpus};

/// Structs the derive accepts and `#[device_repr(..)]` arguments, mutated by the
/// harness, and the tokens its parser looks at. The harness's "arguments" are the
/// contents of a `#[device_repr(..)]` attribute put on the item.
const CORPUS: Corpus = Corpus {
    items: &[
        "#[repr(C)] pub struct Particle { position: [f32; 3], mass: f32 }",
        "#[repr(C)] struct Vec3<T: DeviceRepr> where T: Copy { x: T, y: T, z: T }",
        "#[repr(transparent)] pub(crate) struct Meters(pub f64);",
        "#[repr(C)] struct Grid<const N: usize> { a: [u8; N], b: [u8; N] }",
    ],
    args: &["crate = ::stream_core", "cudarc", "crate = my::gpu, cudarc"],
    words: &[
        "struct",
        "enum",
        "union",
        "P",
        "{",
        "}",
        "(",
        ")",
        "[",
        "]",
        "<",
        ">",
        ":",
        ",",
        ";",
        "#",
        "repr",
        "C",
        "transparent",
        "align",
        "packed",
        "u8",
        "f32",
        "bool",
        "char",
        "&",
        "*",
        "mut",
        "const",
        "'a",
        "T",
        "fn",
        "=",
        "crate",
        "cudarc",
        "device_repr",
        "pub",
        "where",
        "DeviceRepr",
        "3",
        "N",
    ],
    seed: 0x9e37_79b9_7f4a_7c15,
    max_len: 14,
    soup: 1500,
};

/// Puts the harness's arguments in a `#[device_repr(..)]` attribute on the item.
fn with_args(args: TokenStream, item: TokenStream) -> TokenStream {
    if args.is_empty() {
        item
    } else {
        quote::quote!(#[device_repr(#args)] #item)
    }
}

/// Checks what must hold of any result: the output is Rust, and a rejection's messages
/// follow the rules.
fn check(args: TokenStream, item: TokenStream) -> Result<(), String> {
    let output = match device_repr(with_args(args, item)) {
        Ok(impls) => impls,
        Err(rejected) => {
            for error in rejected.error().clone() {
                let message = error.to_string();
                // Only input that is no struct, enum or union at all (which the compiler
                // never sends to a derive) gets `syn`'s own message.
                if message.starts_with("#[derive(DeviceRepr)]") {
                    assert_well_formed(&message);
                }
            }
            rejected.into_compile_error()
        }
    };
    syn::parse2::<syn::File>(output.clone())
        .map(drop)
        .map_err(|e| format!("the output is not Rust ({e}): {output}"))
}

#[test]
fn derive_never_panics_and_always_emits_rust() {
    assert_never_fails("derive(DeviceRepr)", &CORPUS.inputs(), check);
}

#[test]
fn accepted_structs_expand_without_errors() {
    for item in CORPUS.items {
        for args in CORPUS.args {
            let output = device_repr(with_args(args.parse().unwrap(), item.parse().unwrap()));
            assert!(
                output.is_ok(),
                "#[device_repr({args})] {item} was rejected: {}",
                output.map_or_else(|r| r.into_compile_error().to_string(), |_| String::new())
            );
        }
    }
}
