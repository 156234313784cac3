//! Unit tests of the expansion, outside the compiler: accepted functions are
//! compared with their expected expansion, rejected inputs with the errors,
//! spans and output they must produce. With `proc-macro2`'s `span-locations`
//! (a dev-dependency feature), tokens lexed from a string remember where they
//! came from, so a test can read back the source text an error points at.

mod accepted;
mod never_panics;
mod rejected;

use proc_macro2::TokenStream;

use super::gpu_scope as expand_gpu_scope;
use crate::diagnostics::Rejected;

/// Lexes test input written as a string (so that spans know their text).
fn lex(source: &str) -> TokenStream {
    source
        .parse()
        .unwrap_or_else(|err| panic!("test input does not lex: {err}: {source}"))
}

/// The messages of a rejection, one per error.
fn messages(rejected: &Rejected) -> Vec<String> {
    rejected
        .error()
        .clone()
        .into_iter()
        .map(|error| error.to_string())
        .collect()
}

/// Expands `#[gpu_scope(args)] item`, failing the test if it is rejected.
fn expand_ok(args: TokenStream, item: TokenStream) -> TokenStream {
    match expand_gpu_scope(args, item) {
        Ok(tokens) => tokens,
        Err(rejected) => panic!("unexpectedly rejected: {:#?}", messages(&rejected)),
    }
}

/// Parses tokens as a file of items, so expansions compare as syntax trees
/// rather than as spacing-sensitive strings.
fn as_file(tokens: &TokenStream) -> syn::File {
    syn::parse2(tokens.clone())
        .unwrap_or_else(|err| panic!("expansion does not parse as items: {err}\n{tokens}"))
}

/// Asserts that `#[gpu_scope(args)] item` expands to `expected`.
fn assert_expands(args: TokenStream, item: TokenStream, expected: TokenStream) {
    let actual = expand_ok(args, item);
    assert!(
        as_file(&actual) == as_file(&expected),
        "expansion differs\n  actual: {actual}\nexpected: {expected}"
    );
}

/// Checks what every message must look like (STYLE.md rule 5): it names the
/// attribute first and goes on in lowercase.
fn assert_well_formed(message: &str) {
    let rest = message
        .strip_prefix("#[gpu_scope] ")
        .unwrap_or_else(|| panic!("message does not start with the attribute: {message}"));
    assert!(
        rest.starts_with(|c: char| c.is_ascii_lowercase()),
        "message does not go on in lowercase: {message}"
    );
}
