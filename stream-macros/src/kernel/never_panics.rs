//! `#[kernel]` never panics, whatever it is given: every prefix, suffix and one-token
//! deletion of declarations it accepts, and deterministic token soup, in the attribute's
//! arguments and in the item. Each output is Rust the compiler can read: either a
//! wrapper or `compile_error!`s.

use std::panic;

use proc_macro2::TokenStream;

use super::kernel;
use crate::tests::fuzz::{self, cuts, deletions};

/// Declarations `#[kernel]` accepts, mutated below.
const GOOD: &[&str] = &[
    "pub unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]);",
    "#[doc = \" Adds.\"] pub(crate) unsafe fn k(n: u64, x: &[u8], y: &mut [u128], z: &mut [f64]);",
    "unsafe fn none();",
];

/// Arguments `#[kernel]` accepts, mutated below.
const GOOD_ARGS: &[&str] = &[
    "cuda = SRC",
    "ptx = PTX, name = \"my_kernel\", crate = ::my::gpu",
    "cuda = include_str!(\"k.cu\"), name = \"k\",",
];

/// Runs one expansion; `Err` holds the panic or the reason the output is not Rust.
fn check(args: &str, item: &str) -> Result<(), String> {
    let (args, item) = (args.to_owned(), item.to_owned());
    let outcome = panic::catch_unwind(move || {
        let (Ok(args), Ok(item)) = (args.parse::<TokenStream>(), item.parse::<TokenStream>())
        else {
            return Ok(()); // Does not lex: the compiler never sends this.
        };
        let output = kernel(args, item);
        syn::parse2::<syn::File>(output.clone())
            .map(drop)
            .map_err(|e| format!("the output is not Rust ({e}): {output}"))
    });
    match outcome {
        Ok(result) => result,
        Err(payload) => Err(fuzz::panic_text(payload.as_ref(), "a panic")),
    }
}

/// Deterministic token soup from the tokens the parser looks at.
fn soup(count: usize) -> Vec<String> {
    const WORDS: &[&str] = &[
        "unsafe", "fn", "k", "(", ")", "[", "]", "&", "mut", "f32", "u64", "bool", ":", ",", ";",
        "=", "cuda", "ptx", "name", "crate", "\"n\"", "SRC", "->", "<", ">", "'a", "*", "const",
        "async", "extern", "\"C\"", "self", "s", "config", "{", "}", "#", "pub", "_",
    ];
    fuzz::soup(WORDS, 0x2545_f491_4f6c_dd1d, 14, count)
}

#[test]
fn kernel_expansion_never_panics_and_always_emits_rust() {
    let mut inputs: Vec<(String, String)> = Vec::new();
    for good in GOOD {
        inputs.extend(cuts(good).map(|cut| (GOOD_ARGS[0].to_owned(), cut.to_owned())));
        inputs.extend(
            deletions(good)
                .into_iter()
                .map(|item| (GOOD_ARGS[0].to_owned(), item)),
        );
    }
    for args in GOOD_ARGS {
        inputs.extend(cuts(args).map(|cut| (cut.to_owned(), GOOD[0].to_owned())));
        inputs.extend(
            deletions(args)
                .into_iter()
                .map(|cut| (cut, GOOD[0].to_owned())),
        );
    }
    for tokens in soup(1500) {
        inputs.push((GOOD_ARGS[0].to_owned(), tokens.clone()));
        inputs.push((tokens, GOOD[0].to_owned()));
    }
    let failures: Vec<String> = inputs
        .iter()
        .filter_map(|(args, item)| {
            check(args, item)
                .err()
                .map(|why| format!("#[kernel({args})] {item}\n    {why}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} inputs failed:\n{}",
        failures.len(),
        inputs.len(),
        failures.join("\n")
    );
    assert!(inputs.len() > 1000, "{}", inputs.len());
}

#[test]
fn accepted_declarations_expand_to_a_wrapper_without_errors() {
    for good in GOOD {
        for args in GOOD_ARGS {
            let output = kernel(args.parse().unwrap(), good.parse().unwrap()).to_string();
            assert!(
                !output.contains("compile_error"),
                "#[kernel({args})] {good} was rejected: {output}"
            );
        }
    }
}
