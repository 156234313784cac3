//! Parsing and validation of `#[kernel(cuda = SOURCE)] unsafe fn name(params);`.

use proc_macro2::TokenStream;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{
    Attribute, Expr, FnArg, ForeignItemFn, Ident, LitStr, Pat, Path, Token, Type, Visibility,
};

/// Where the kernel's code comes from.
pub(crate) enum Code {
    /// CUDA C++ source text, compiled with NVRTC.
    Cuda(Expr),
    /// PTX text.
    Ptx(Expr),
}

/// How a kernel parameter is passed.
pub(crate) enum ParamKind {
    /// A plain value of this type (`DeviceRepr`).
    Scalar(Type),
    /// `&[T]`: device memory the kernel reads.
    Read(Type),
    /// `&mut [T]`: device memory the kernel writes.
    Write(Type),
}

pub(crate) struct Param {
    pub(crate) name: Ident,
    pub(crate) kind: ParamKind,
}

/// A validated kernel declaration.
pub(crate) struct Declaration {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) ident: Ident,
    /// The `extern "C"` name in the CUDA code.
    pub(crate) cuda_name: LitStr,
    pub(crate) code: Code,
    pub(crate) krate: Path,
    pub(crate) params: Vec<Param>,
}

/// Names the generated wrapper gives its own first two parameters.
pub(crate) const RESERVED: [&str; 2] = ["s", "config"];

const USAGE: &str = "expected `#[kernel(cuda = SOURCE)]` or `#[kernel(ptx = PTX)]`, \
     optionally with `name = \"cuda_name\"` and `crate = path`";

struct Args {
    code: Option<Code>,
    name: Option<LitStr>,
    krate: Option<Path>,
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut args = Args {
            code: None,
            name: None,
            krate: None,
        };
        let mut errors: Option<syn::Error> = None;
        let mut push = |e: syn::Error| match &mut errors {
            Some(all) => all.combine(e),
            None => errors = Some(e),
        };
        let items = Punctuated::<Arg, Token![,]>::parse_terminated(input)?;
        for arg in items {
            match arg {
                Arg::Code(key, code) => {
                    if args.code.is_some() {
                        push(syn::Error::new(
                            key.span(),
                            "#[kernel] takes one of `cuda = ...` or `ptx = ...`, once",
                        ));
                    }
                    args.code = Some(code);
                }
                Arg::Name(key, lit) => {
                    if args.name.is_some() {
                        push(syn::Error::new(
                            key.span(),
                            "#[kernel] takes `name = ...` at most once",
                        ));
                    }
                    args.name = Some(lit);
                }
                Arg::Crate(key, path) => {
                    if args.krate.is_some() {
                        push(syn::Error::new(
                            key.span(),
                            "#[kernel] takes `crate = ...` at most once",
                        ));
                    }
                    args.krate = Some(path);
                }
            }
        }
        match errors {
            Some(e) => Err(e),
            None => Ok(args),
        }
    }
}

enum Arg {
    Code(Ident, Code),
    Name(Ident, LitStr),
    Crate(Ident, Path),
}

impl Parse for Arg {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key: Ident = if input.peek(Token![crate]) {
            let kw: Token![crate] = input.parse()?;
            Ident::new("crate", kw.span)
        } else {
            input
                .parse()
                .map_err(|e| syn::Error::new(e.span(), USAGE))?
        };
        let _: Token![=] = input
            .parse()
            .map_err(|e| syn::Error::new(e.span(), format!("#[kernel] expects `{key} = ...`")))?;
        match key.to_string().as_str() {
            "cuda" => Ok(Arg::Code(key, Code::Cuda(input.parse()?))),
            "ptx" => Ok(Arg::Code(key, Code::Ptx(input.parse()?))),
            "name" => Ok(Arg::Name(key, input.parse()?)),
            "crate" => Ok(Arg::Crate(key, Path::parse_mod_style(input)?)),
            _ => Err(syn::Error::new(
                key.span(),
                format!("unknown #[kernel] argument `{key}`: {USAGE}"),
            )),
        }
    }
}

/// Parses and validates the attribute's arguments and the declaration; all
/// independent errors are combined.
pub(crate) fn parse(args: TokenStream, item: TokenStream) -> syn::Result<Declaration> {
    let args = Args::parse.parse2(args)?;
    let decl: ForeignItemFn = syn::parse2(item).map_err(|e| {
        syn::Error::new(
            e.span(),
            "#[kernel] applies to a kernel signature without a body, e.g. \
             `pub unsafe fn axpy(a: f32, x: &[f32], y: &mut [f32]);`",
        )
    })?;
    let mut errors: Vec<syn::Error> = Vec::new();
    let sig = &decl.sig;
    let code = match args.code {
        Some(code) => Some(code),
        None => {
            errors.push(syn::Error::new(
                sig.ident.span(),
                format!("#[kernel] needs the kernel's code: {USAGE}"),
            ));
            None
        }
    };
    if sig.unsafety.is_none() {
        errors.push(syn::Error::new(
            sig.fn_token.span,
            "#[kernel] declarations must be `unsafe fn`: writing `unsafe` is your promise that the CUDA \
             kernel takes exactly these parameters (each slice as a pointer and a `size_t` length), \
             stays within those lengths, and writes only through `&mut` slices",
        ));
    }
    if let Some(t) = &sig.asyncness {
        errors.push(syn::Error::new(
            t.span,
            "#[kernel] cannot be `async`: remove `async`",
        ));
    }
    if let Some(t) = &sig.constness {
        errors.push(syn::Error::new(
            t.span,
            "#[kernel] cannot be `const`: remove `const`",
        ));
    }
    if let Some(abi) = &sig.abi {
        errors.push(syn::Error::new_spanned(
            abi,
            "#[kernel] declarations take no ABI: remove it (the CUDA side is `extern \"C\"`)",
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(syn::Error::new_spanned(
            &sig.generics,
            "#[kernel] declarations cannot be generic: declare one kernel per element type",
        ));
    }
    if let Some(v) = &sig.variadic {
        errors.push(syn::Error::new_spanned(
            v,
            "#[kernel] declarations cannot be variadic",
        ));
    }
    if let syn::ReturnType::Type(_, ty) = &sig.output {
        errors.push(syn::Error::new_spanned(
            ty,
            "#[kernel] declarations return nothing: a launch returns `Result<()>`",
        ));
    }
    let mut params = Vec::new();
    for input in &sig.inputs {
        match parse_param(input) {
            Ok(p) => params.push(p),
            Err(e) => errors.push(e),
        }
    }
    let mut all = errors.into_iter();
    if let Some(mut combined) = all.next() {
        all.for_each(|e| combined.combine(e));
        return Err(combined);
    }
    let code = code.ok_or_else(|| syn::Error::new(sig.ident.span(), USAGE))?;
    let cuda_name = args
        .name
        .unwrap_or_else(|| LitStr::new(&sig.ident.to_string(), sig.ident.span()));
    Ok(Declaration {
        attrs: decl.attrs,
        vis: decl.vis,
        ident: sig.ident.clone(),
        cuda_name,
        code,
        krate: args
            .krate
            .unwrap_or_else(|| syn::parse_quote!(::stream_core)),
        params,
    })
}

fn parse_param(input: &FnArg) -> syn::Result<Param> {
    let typed = match input {
        FnArg::Receiver(r) => {
            return Err(syn::Error::new_spanned(
                r,
                "#[kernel] declarations cannot take `self`",
            ));
        }
        FnArg::Typed(t) => t,
    };
    let name = match &*typed.pat {
        Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
        other => {
            return Err(syn::Error::new_spanned(
                other,
                "#[kernel] parameters must be plain names, e.g. `x: &[f32]`",
            ));
        }
    };
    if RESERVED.contains(&name.to_string().as_str()) {
        return Err(syn::Error::new_spanned(
            &name,
            format!("#[kernel] reserves the parameter name `{name}` for the generated wrapper (`s: &Scope, config: LaunchConfig`); rename it"),
        ));
    }
    let kind = match &*typed.ty {
        Type::Reference(r) => {
            let elem = match &*r.elem {
                Type::Slice(s) => (*s.elem).clone(),
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "#[kernel] takes device memory as a slice: `&[T]` (read) or `&mut [T]` (written)",
                    ));
                }
            };
            if let Some(lt) = &r.lifetime {
                return Err(syn::Error::new_spanned(lt, "#[kernel] parameters take no lifetimes: the wrapper brands them with the scope's"));
            }
            if r.mutability.is_some() {
                ParamKind::Write(elem)
            } else {
                ParamKind::Read(elem)
            }
        }
        Type::Ptr(p) => {
            return Err(syn::Error::new_spanned(
                p,
                "#[kernel] does not take raw pointers: use `&[T]` (read) or `&mut [T]` (written), \
                 which pass a pointer and a length",
            ));
        }
        other => ParamKind::Scalar(other.clone()),
    };
    Ok(Param { name, kind })
}
