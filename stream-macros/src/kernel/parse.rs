//! Parsing of `#[kernel(args)] unsafe fn name(params);`: the syntax only. What the
//! arguments and the declaration must satisfy is checked in `validate`.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::parse::{Parse, ParseStream};
use syn::{Attribute, Expr, Ident, LitStr, Path, Signature, Token, Visibility};

use crate::diagnostics::kernel as error;
use crate::diagnostics::Errors;
use crate::tokens::{next_token, skip_argument};

/// One argument, as written.
pub(crate) enum Arg {
    /// `cuda = EXPR`: CUDA C++ source.
    Cuda(Ident, Expr),
    /// `ptx = EXPR`: PTX text.
    Ptx(Ident, Expr),
    /// `name = "cuda_name"`.
    Name(Ident, LitStr),
    /// `crate = path`.
    Crate(Ident, Path),
    /// `block = EXPR` (integer literals, checked in `validate`).
    Block(Ident, Expr),
    /// `max_threads = EXPR` (an integer literal, checked in `validate`).
    MaxThreads(Ident, Expr),
    /// `shared = EXPR`: a byte count or a closure over the block.
    Shared(Ident, Expr),
}

/// The attribute's arguments, in the order written.
pub(crate) struct Args(pub(crate) Vec<Arg>);

impl Args {
    /// The `crate = path` argument, if any (the first one).
    pub(crate) fn krate(&self) -> Option<&Path> {
        self.0.iter().find_map(|arg| match arg {
            Arg::Crate(_, path) => Some(path),
            _ => None,
        })
    }
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut args = Vec::new();
        let mut errors = Errors::default();
        while !input.is_empty() {
            match argument(input) {
                Ok(arg) => {
                    args.push(arg);
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
            // Either the input is empty or a `,` follows (`skip_argument` stops only
            // at those), so this never fails.
            input.parse::<Option<Token![,]>>()?;
        }
        errors.finish_with(Args(args))
    }
}

/// Parses one `key = value`, stopping before the `,` that ends it.
fn argument(input: ParseStream) -> syn::Result<Arg> {
    let key: Ident = if input.peek(Token![crate]) {
        let keyword: Token![crate] = input.parse()?;
        Ident::new("crate", keyword.span)
    } else if input.peek(Ident) {
        input.parse()?
    } else {
        return Err(error::expected_key(next_token(input)));
    };
    let known = [
        "cuda",
        "ptx",
        "name",
        "crate",
        "block",
        "max_threads",
        "shared",
    ];
    if !known.contains(&key.to_string().as_str()) {
        return Err(error::unknown_argument(&key));
    }
    if !input.peek(Token![=]) {
        let span = first_span(input).unwrap_or_else(|| key.span());
        return Err(error::expected_eq(&key, span));
    }
    let eq: Token![=] = input.parse()?;
    if input.is_empty() || input.peek(Token![,]) {
        return Err(error::missing_value(&key, eq.span));
    }
    let syntax = |e| error::value_syntax(&key, e);
    Ok(match key.to_string().as_str() {
        "cuda" => Arg::Cuda(key.clone(), input.parse().map_err(syntax)?),
        "ptx" => Arg::Ptx(key.clone(), input.parse().map_err(syntax)?),
        "name" => Arg::Name(key.clone(), input.parse().map_err(syntax)?),
        "crate" => Arg::Crate(
            key.clone(),
            input.call(Path::parse_mod_style).map_err(syntax)?,
        ),
        "block" => Arg::Block(key.clone(), input.parse().map_err(syntax)?),
        "max_threads" => Arg::MaxThreads(key.clone(), input.parse().map_err(syntax)?),
        _ => Arg::Shared(key.clone(), input.parse().map_err(syntax)?),
    })
}

/// The span of the next token, if there is one.
fn first_span(input: ParseStream) -> Option<Span> {
    input.cursor().token_tree().map(|(tree, _)| tree.span())
}

/// The item: a function signature, with or without a body (a body is a mistake that
/// `validate` reports; parsing it keeps the declared signature for the stand-in
/// wrapper).
pub(crate) struct KernelFn {
    /// Outer attributes (docs, `#[cfg]`, ...), kept on the wrapper.
    pub(crate) attrs: Vec<Attribute>,
    /// Visibility, kept on the wrapper.
    pub(crate) vis: Visibility,
    /// The signature as written.
    pub(crate) sig: Signature,
    /// The span of the body's `{`, when there is a body.
    pub(crate) body: Option<Span>,
}

impl Parse for KernelFn {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let not_a_declaration = |e: syn::Error| error::not_a_declaration(e.span());
        let attrs = input
            .call(Attribute::parse_outer)
            .map_err(not_a_declaration)?;
        let vis: Visibility = input.parse().map_err(not_a_declaration)?;
        let sig: Signature = input.parse().map_err(not_a_declaration)?;
        let body = if input.peek(Token![;]) {
            input.parse::<Token![;]>()?;
            None
        } else {
            match input.parse::<TokenTree>() {
                Ok(TokenTree::Group(group))
                    if group.delimiter() == proc_macro2::Delimiter::Brace =>
                {
                    Some(group.span_open())
                }
                Ok(other) => return Err(error::not_a_declaration(other.span())),
                Err(e) => return Err(not_a_declaration(e)),
            }
        };
        if !input.is_empty() {
            let rest: TokenStream = input.parse()?;
            let span = rest
                .into_iter()
                .next()
                .map_or_else(Span::call_site, |tree| tree.span());
            return Err(error::not_a_declaration(span));
        }
        Ok(KernelFn {
            attrs,
            vis,
            sig,
            body,
        })
    }
}
