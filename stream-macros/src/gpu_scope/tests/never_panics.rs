//! Belt and braces: the expansion never panics, whatever it is given, and
//! every rejection it makes follows the message rules and keeps the item.

use proc_macro2::TokenStream;

use super::{assert_well_formed, expand_gpu_scope, rejected::CASES};
use crate::fuzz::{assert_never_fails, cuts, Corpus};

/// Functions and arguments `#[gpu_scope]` accepts, mutated by the harness, and the
/// tokens its parser looks at.
const CORPUS: Corpus = Corpus {
    items: &[
        "pub fn step(s: &Scope, input: &[f32], out: &mut [f32]) -> Result<()> { s.go(input, out)?; Ok(()) }",
        "#[inline] unsafe fn m<'a, T: Copy>(&'a mut self, _: &'a stream_core::Scope<'a, '_>) -> std::result::Result<T, E> where T: Default { #![allow(unused)] Ok(T::default()) }",
        "fn f(self: Box<Self>, mut s: &::stream_core::Scope) -> anyhow::Result<impl Iterator<Item = u8>> { todo!() }",
    ],
    args: &["", "crate = my_lib::gpu", "crate = ::stream_core,"],
    words: &[
        "fn", "f", "(", ")", "{", "}", "<", ">", "&", "mut", "self", "Scope", "Result", "->", ":",
        ",", ";", "=", "crate", "async", "const", "unsafe", "extern", "\"C\"", "...", "_", "'a",
        "impl", "struct", "pub", "#", "[", "]", "!", "where", "::", "1", "|", "move",
    ],
    seed: 0x9e37_79b9_7f4a_7c15,
    max_len: 16,
    soup: 2000,
};

/// Checks what must hold of any result: a rejection's messages follow the rules and
/// its output starts with the item.
fn check(args: TokenStream, item: TokenStream) -> Result<(), String> {
    let Err(rejected) = expand_gpu_scope(args, item.clone()) else {
        return Ok(());
    };
    for error in rejected.error().clone() {
        assert_well_formed(&error.to_string());
    }
    let output = rejected.into_compile_error().to_string();
    if output.starts_with(&item.to_string()) {
        Ok(())
    } else {
        Err(format!("item lost: {output}"))
    }
}

#[test]
fn expansion_never_panics_on_any_input() {
    let mut inputs: Vec<(String, String)> = CASES
        .iter()
        .map(|case| (case.args.to_owned(), case.item.to_owned()))
        .collect();
    inputs.extend(CORPUS.inputs());
    // Whole functions where the arguments go.
    for good in CORPUS.items {
        inputs.extend(cuts(good).map(|cut| (cut.to_owned(), (*good).to_owned())));
    }
    assert_never_fails("gpu_scope", &inputs, check);
}
