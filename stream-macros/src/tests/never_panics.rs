//! Belt and braces: the expansion never panics, whatever it is given, and
//! every rejection it makes follows the message rules and keeps the item.

use std::panic;

use proc_macro2::TokenStream;

use super::fuzz::{self, cuts, deletions};
use super::{assert_well_formed, rejected::CASES};
use crate::expand;

/// Functions `#[gpu_scope]` accepts, mutated below.
const GOOD: &[&str] = &[
    "pub fn step(s: &Scope, input: &[f32], out: &mut [f32]) -> Result<()> { s.go(input, out)?; Ok(()) }",
    "#[inline] unsafe fn m<'a, T: Copy>(&'a mut self, _: &'a stream_core::Scope<'a, '_>) -> std::result::Result<T, E> where T: Default { #![allow(unused)] Ok(T::default()) }",
    "fn f(self: Box<Self>, mut s: &::stream_core::Scope) -> anyhow::Result<impl Iterator<Item = u8>> { todo!() }",
];

/// Arguments `#[gpu_scope]` accepts, mutated below.
const GOOD_ARGS: &[&str] = &["crate = my_lib::gpu", "crate = ::stream_core,"];

/// Runs one expansion and checks what must hold of any result; `Err` holds
/// the panic or failed check.
fn check(args: &str, item: &str) -> Result<(), String> {
    let (args, item) = (args.to_owned(), item.to_owned());
    panic::catch_unwind(move || {
        let (Ok(args), Ok(item)) = (args.parse::<TokenStream>(), item.parse::<TokenStream>())
        else {
            return; // Does not lex: the compiler never sends this.
        };
        if let Err(rejected) = expand::gpu_scope(args, item.clone()) {
            for error in rejected.error().clone() {
                assert_well_formed(&error.to_string());
            }
            let output = rejected.into_compile_error().to_string();
            assert!(output.starts_with(&item.to_string()), "item lost: {output}");
        }
    })
    .map_err(|payload| fuzz::panic_text(payload.as_ref(), ""))
}

/// Deterministic token soup from a vocabulary of the tokens the parser
/// looks at.
fn soup(count: usize) -> Vec<String> {
    const WORDS: &[&str] = &[
        "fn", "f", "(", ")", "{", "}", "<", ">", "&", "mut", "self", "Scope", "Result", "->", ":",
        ",", ";", "=", "crate", "async", "const", "unsafe", "extern", "\"C\"", "...", "_", "'a",
        "impl", "struct", "pub", "#", "[", "]", "!", "where", "::", "1", "|", "move",
    ];
    fuzz::soup(WORDS, 0x9e37_79b9_7f4a_7c15, 16, count)
}

#[test]
fn expansion_never_panics_on_any_input() {
    let mut inputs: Vec<(String, String)> = CASES
        .iter()
        .map(|case| (case.args.to_owned(), case.item.to_owned()))
        .collect();
    for good in GOOD {
        inputs.extend(cuts(good).map(|cut| (String::new(), cut.to_owned())));
        inputs.extend(
            deletions(good)
                .into_iter()
                .map(|item| (String::new(), item)),
        );
        inputs.extend(cuts(good).map(|cut| (cut.to_owned(), (*good).to_owned())));
    }
    for args in GOOD_ARGS {
        inputs.extend(cuts(args).map(|cut| (cut.to_owned(), GOOD[0].to_owned())));
        inputs.extend(
            deletions(args)
                .into_iter()
                .map(|cut| (cut, GOOD[0].to_owned())),
        );
    }
    for tokens in soup(2000) {
        inputs.push((String::new(), tokens.clone()));
        inputs.push((tokens, GOOD[0].to_owned()));
    }

    let failures: Vec<String> = inputs
        .iter()
        .filter_map(|(args, item)| {
            check(args, item)
                .err()
                .map(|why| format!("#[gpu_scope({args})] {item}\n    {why}"))
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
