//! Parsing of the attribute's arguments and of the function it is applied to.
//!
//! The function's body is not parsed: it is kept as tokens and handed back to
//! the compiler inside the scope's closure. A body that is still being typed
//! (with syntax errors) therefore still expands, so IDEs keep completing in it
//! and the compiler reports the syntax error at its own place.

use proc_macro2::{TokenStream, TokenTree};
use quote::{quote, ToTokens};
use syn::parse::{Parse, ParseStream};
use syn::{braced, token, Attribute, Item, LitStr, Path, Signature, Token, Visibility};

use crate::diagnostics::gpu_scope as error;
use crate::diagnostics::Errors;
use crate::tokens::{next_token, skip_argument};

/// The attribute's arguments: `#[gpu_scope]` or `#[gpu_scope(crate = path)]`.
pub(crate) struct Args {
    /// The path generated code names instead of `::stream_core`.
    pub(crate) krate: Option<Path>,
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut krate = None;
        let mut errors = Errors::default();
        while !input.is_empty() {
            match parse_argument(input) {
                Ok(CrateArgument { keyword, path }) => {
                    if krate.is_some() {
                        errors.push(error::duplicate_crate(&keyword));
                    } else {
                        krate = Some(path);
                    }
                    if !input.is_empty() && !input.peek(Token![,]) {
                        errors.push(error::expected_comma(next_token(input)));
                        skip_argument(input)?;
                    }
                }
                Err(err) => {
                    errors.push(err);
                    skip_argument(input)?;
                }
            }
            // Either the input is empty or a `,` follows (`skip_argument`
            // stops only at those), so this never fails.
            input.parse::<Option<Token![,]>>()?;
        }
        errors.finish()?;
        Ok(Self { krate })
    }
}

/// A well-formed `crate = path`.
struct CrateArgument {
    keyword: Token![crate],
    path: Path,
}

/// Parses one argument, stopping before the `,` that ends it.
fn parse_argument(input: ParseStream) -> syn::Result<CrateArgument> {
    if input.peek(Token![,]) {
        let comma: Token![,] = input.parse()?;
        return Err(error::missing_argument(&comma));
    }
    if !input.peek(Token![crate]) {
        let argument = skip_argument(input)?;
        return Err(error::unknown_argument(&argument));
    }
    let keyword: Token![crate] = input.parse()?;
    if input.is_empty() || input.peek(Token![,]) {
        return Err(error::crate_argument(
            keyword,
            "expects a path after `crate`",
        ));
    }
    if !input.peek(Token![=]) {
        return Err(error::crate_argument(
            next_token(input),
            "expects `=` after `crate`",
        ));
    }
    let eq: Token![=] = input.parse()?;
    if input.is_empty() || input.peek(Token![,]) {
        return Err(error::crate_argument(eq, "expects a path after `crate =`"));
    }
    if input.peek(LitStr) {
        return Err(error::crate_argument(
            next_token(input),
            "expects a path without quotes after `crate =`",
        ));
    }
    let value = input.fork();
    match input.call(Path::parse_mod_style) {
        Ok(path) => Ok(CrateArgument { keyword, path }),
        Err(_) => Err(error::crate_argument(
            skip_argument(&value)?,
            "expects a path after `crate =`",
        )),
    }
}

/// The function the attribute is applied to, with its body left unparsed.
pub(crate) struct ScopeFn {
    /// Outer attributes (docs, `#[inline]`, ...), kept unchanged.
    pub(crate) attrs: Vec<Attribute>,
    /// Visibility, kept unchanged.
    pub(crate) vis: Visibility,
    /// The signature; only the scope parameter's type changes.
    pub(crate) sig: Signature,
    /// The body, which becomes the scope's closure.
    pub(crate) body: Body,
}

/// A function body: `{ #![inner] stmts }`.
pub(crate) struct Body {
    /// The braces, whose span the closure's body keeps.
    pub(crate) brace: token::Brace,
    /// Inner attributes, which stay on the function: they apply to all of it
    /// and are not allowed on a closure's body.
    pub(crate) inner_attrs: Vec<Attribute>,
    /// The statements, as the user wrote them.
    pub(crate) stmts: TokenStream,
}

impl Parse for ScopeFn {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.is_empty() {
            return Err(error::empty_item());
        }
        let start = input.fork();
        let head = input
            .call(Attribute::parse_outer)
            .and_then(|attrs| Ok((attrs, input.parse::<Visibility>()?)));
        let (attrs, vis) = match head {
            Ok(head) if starts_like_fn(input) => head,
            _ => return Err(classify_non_fn(&start)),
        };
        let sig: Signature = input.parse().map_err(error::syntax)?;
        if input.peek(Token![;]) {
            let (fn_token, ident) = (&sig.fn_token, &sig.ident);
            return Err(error::not_a_function(
                quote!(#fn_token #ident),
                "a function declaration without a body",
            ));
        }
        if !input.peek(token::Brace) {
            return Err(error::not_a_function(
                &sig,
                "a function signature without a body",
            ));
        }
        let content;
        let brace = braced!(content in input);
        let inner_attrs = content
            .call(Attribute::parse_inner)
            .map_err(error::syntax)?;
        let stmts: TokenStream = content.parse()?;
        if !input.is_empty() {
            let rest: TokenStream = input.parse()?;
            return Err(error::trailing_tokens(&rest));
        }
        Ok(Self {
            attrs,
            vis,
            sig,
            body: Body {
                brace,
                inner_attrs,
                stmts,
            },
        })
    }
}

/// Whether the next tokens are function qualifiers followed by `fn`.
fn starts_like_fn(input: ParseStream) -> bool {
    let ahead = input.fork();
    loop {
        if ahead.peek(Token![fn]) {
            return true;
        }
        let qualifier = ahead.peek(Token![const])
            || ahead.peek(Token![async])
            || ahead.peek(Token![unsafe])
            || ahead.peek(Token![extern]);
        if !qualifier || ahead.parse::<TokenTree>().is_err() {
            return false;
        }
        // The ABI of `extern "C"`.
        if ahead.peek(LitStr) && ahead.parse::<LitStr>().is_err() {
            return false;
        }
    }
}

/// The error for an item that is not a function: names what it is and points
/// at its keyword and name, or at its first token when it is no item at all.
fn classify_non_fn(start: ParseStream) -> syn::Error {
    let first_token = || Some(next_token(start)).filter(|first| !first.is_empty());
    let Ok(item) = start.fork().parse::<Item>() else {
        return first_token().map_or_else(error::empty_item, |first| {
            error::not_a_function(first, "something that is not an item")
        });
    };
    let (tokens, found) = match &item {
        Item::Struct(item) => (spanned(&item.struct_token, &item.ident), "a struct"),
        Item::Enum(item) => (spanned(&item.enum_token, &item.ident), "an enum"),
        Item::Union(item) => (spanned(&item.union_token, &item.ident), "a union"),
        Item::Const(item) => (spanned(&item.const_token, &item.ident), "a const"),
        Item::Static(item) => (spanned(&item.static_token, &item.ident), "a static"),
        Item::Trait(item) => (spanned(&item.trait_token, &item.ident), "a trait"),
        Item::TraitAlias(item) => (spanned(&item.trait_token, &item.ident), "a trait alias"),
        Item::Type(item) => (spanned(&item.type_token, &item.ident), "a type alias"),
        Item::Mod(item) => (spanned(&item.mod_token, &item.ident), "a module"),
        Item::Impl(item) => (spanned(&item.impl_token, &item.self_ty), "an impl block"),
        Item::Use(item) => (item.use_token.into_token_stream(), "a `use` item"),
        Item::ExternCrate(item) => (
            spanned(&item.extern_token, &item.ident),
            "an `extern crate` item",
        ),
        Item::ForeignMod(item) => (item.abi.to_token_stream(), "an `extern` block"),
        Item::Macro(item) => (item.mac.path.to_token_stream(), "a macro invocation"),
        _ => match first_token() {
            Some(first) => (first, "something that is not a function"),
            None => return error::empty_item(),
        },
    };
    error::not_a_function(tokens, found)
}

/// The tokens from an item's keyword to its name, for a span covering both.
fn spanned(keyword: &impl ToTokens, name: &impl ToTokens) -> TokenStream {
    quote!(#keyword #name)
}
