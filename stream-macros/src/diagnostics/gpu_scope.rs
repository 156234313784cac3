//! The messages of `#[gpu_scope]`, one helper per mistake.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::{Abi, Error, Ident, Token};

use super::reworded;

/// How the attribute is written in messages.
const ATTR: &str = "#[gpu_scope]";

/// A correct function, quoted by the messages that reject the item.
const EXAMPLE_FN: &str = "`fn step(s: &Scope, input: &[f32]) -> Result<()> { ... }`";

/// The only argument, quoted by the messages that reject arguments.
const VALID_ARGS: &str =
    "the only valid argument is `crate = path`, e.g. `#[gpu_scope(crate = my_lib::gpu)]`";

/// `async fn` (spanned on `async`).
pub(crate) fn async_fn(asyncness: &Token![async]) -> Error {
    Error::new_spanned(
        asyncness,
        format!(
            "{ATTR} cannot be applied to an `async fn`: a scope synchronises its stream before \
             returning, remove `async`"
        ),
    )
}

/// `const fn` (spanned on `const`).
pub(crate) fn const_fn(constness: &Token![const]) -> Error {
    Error::new_spanned(
        constness,
        format!(
            "{ATTR} cannot be applied to a `const fn`: a scope issues GPU work at run time, \
             remove `const`"
        ),
    )
}

/// `extern "C" fn` and other foreign ABIs (spanned on the ABI).
pub(crate) fn foreign_abi(abi: &Abi) -> Error {
    let written = abi.name.as_ref().map_or_else(
        || "extern".to_owned(),
        |name| format!("extern {}", name.to_token_stream()),
    );
    Error::new_spanned(
        abi,
        format!(
            "{ATTR} cannot be applied to an `{written}` function: callers pass a Rust `&Stream` \
             in the scope's place and get a Rust `Result` back, remove `{written}` (an \
             `extern` function can call a {ATTR} function)"
        ),
    )
}

/// A C-variadic `...` parameter (spanned on it).
pub(crate) fn variadic(variadic: &syn::Variadic) -> Error {
    Error::new_spanned(
        variadic,
        format!("{ATTR} cannot be applied to a variadic function, remove the `...` parameter"),
    )
}

/// The start of every message about the scope parameter.
const EXPECTS_SCOPE: &str =
    "expects the first parameter (after `self`) to be the scope, written `name: &Scope`";

/// No parameter besides the receiver (spanned on the parentheses).
pub(crate) fn missing_scope_param(parens: Span) -> Error {
    Error::new(
        parens,
        format!("{ATTR} {EXPECTS_SCOPE}, but this function has none: add `s: &Scope`"),
    )
}

/// The first non-receiver parameter is not the scope (spanned on it).
/// `scope_comes_later` is true when a later parameter is a scope.
pub(crate) fn not_a_scope_param(param: &syn::PatType, scope_comes_later: bool) -> Error {
    let hint = if scope_comes_later {
        ": move the `&Scope` parameter to the front"
    } else {
        ""
    };
    Error::new_spanned(param, format!("{ATTR} {EXPECTS_SCOPE}{hint}"))
}

/// `s: Scope` (spanned on the type).
pub(crate) fn scope_by_value(ty: &syn::Type) -> Error {
    Error::new_spanned(
        ty,
        format!("{ATTR} {EXPECTS_SCOPE}: take the scope by reference, `&Scope`"),
    )
}

/// `s: &mut Scope` (spanned on `mut`).
pub(crate) fn scope_by_mut_ref(mutability: &Token![mut]) -> Error {
    Error::new_spanned(
        mutability,
        format!(
            "{ATTR} {EXPECTS_SCOPE}: use `&Scope` instead of `&mut Scope`, all scope methods \
             take `&self`"
        ),
    )
}

/// The requirement on the return type, shared by both messages about it.
const EXPECTS_RESULT: &str = "functions must return a `Result<T, E>` with \
     `E: From<stream_core::Error>`, because the final stream synchronisation can fail";

/// No return type (spanned on the function's name).
pub(crate) fn missing_return_type(ident: &Ident) -> Error {
    Error::new_spanned(
        ident,
        format!("{ATTR} {EXPECTS_RESULT}: add a return type such as `-> stream_core::Result<()>`"),
    )
}

/// A return type that is not a path ending in `Result` (spanned on it).
pub(crate) fn not_a_result(ty: &syn::Type) -> Error {
    Error::new_spanned(
        ty,
        format!("{ATTR} {EXPECTS_RESULT}: wrap the value in `Result`, e.g. `Result<T>`"),
    )
}

/// Anything but a function with a body; `found` says what it is
/// (`"a struct"`) and `tokens` are its keyword and name.
pub(crate) fn not_a_function(tokens: impl ToTokens, found: &str) -> Error {
    Error::new_spanned(tokens, not_a_function_message(found))
}

/// The attribute was applied to nothing at all.
///
/// There is no token to point at: the compiler never does this, only direct
/// calls of the expansion (tests) can.
pub(crate) fn empty_item() -> Error {
    Error::new(Span::call_site(), not_a_function_message("nothing"))
}

/// The message of [`not_a_function`] and [`empty_item`].
fn not_a_function_message(found: &str) -> String {
    format!(
        "{ATTR} can only be applied to a function with a body, like {EXAMPLE_FN}; found {found}"
    )
}

/// A syntax error in the function's signature, as found by `syn`.
///
/// The compiler only applies attributes to items that parse, so this happens
/// while an IDE expands code that is still being typed.
pub(crate) fn syntax(error: Error) -> Error {
    reworded(error, &format!("{ATTR} could not parse this function"))
}

/// Tokens after the function's body (spanned on them).
pub(crate) fn trailing_tokens(rest: &TokenStream) -> Error {
    Error::new_spanned(
        rest,
        format!("{ATTR} can only be applied to one function, found more tokens after its body"),
    )
}

/// An argument other than `crate = path` (spanned on the whole argument).
pub(crate) fn unknown_argument(argument: &TokenStream) -> Error {
    let name = argument
        .clone()
        .into_iter()
        .next()
        .map_or_else(String::new, |first| first.to_string());
    Error::new_spanned(
        argument,
        format!("{ATTR} does not take an argument `{name}`: {VALID_ARGS}"),
    )
}

/// A `,` where an argument should be (spanned on the comma).
pub(crate) fn missing_argument(comma: &Token![,]) -> Error {
    Error::new_spanned(
        comma,
        format!("{ATTR} expects an argument before this `,`: {VALID_ARGS}"),
    )
}

/// A token where the `,` between two arguments should be (spanned on it).
pub(crate) fn expected_comma(token: impl ToTokens) -> Error {
    Error::new_spanned(
        token,
        format!("{ATTR} expects its arguments separated by `,`: {VALID_ARGS}"),
    )
}

/// A malformed `crate = path`, spanned on `tokens`; `problem` says what is
/// wrong.
pub(crate) fn crate_argument(tokens: impl ToTokens, problem: &str) -> Error {
    Error::new_spanned(
        tokens,
        format!("{ATTR} {problem}: write `crate = path`, e.g. `#[gpu_scope(crate = my_lib::gpu)]`"),
    )
}

/// `crate = ...` given twice (spanned on the second `crate`).
pub(crate) fn duplicate_crate(keyword: &Token![crate]) -> Error {
    Error::new_spanned(
        keyword,
        format!("{ATTR} takes the `crate` argument once, remove this duplicate"),
    )
}
