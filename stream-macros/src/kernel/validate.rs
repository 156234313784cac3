//! The rules a `#[kernel]` declaration and its arguments must follow. Every rule is
//! checked, and all broken ones are reported together.

use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprClosure, ExprLit, FnArg, Ident, Lit, LitInt, LitStr, Pat, Path,
    ReturnType, Type, Visibility,
};

use super::parse::{Arg, Args, KernelFn};
use crate::diagnostics::kernel::{self as error, MAX_BLOCK_Z, MAX_SHARED_BYTES, MAX_THREADS};
use crate::diagnostics::Errors;

/// Where the kernel's code comes from.
pub(crate) enum Code {
    /// CUDA C++ source text, compiled with NVRTC.
    Cuda(Expr),
    /// PTX text.
    Ptx(Expr),
}

/// The blocks the declaration admits.
pub(crate) enum Block {
    /// Neither `block` nor `max_threads`: every block the device accepts.
    Any,
    /// `block = ...`: exactly these dimensions; `written` is how many the user wrote
    /// (the others are 1), so that messages quote the declaration as written.
    Exactly { dims: [u32; 3], written: usize },
    /// `max_threads = n`.
    AtMost(u32),
}

/// The dynamic shared memory the declaration needs.
pub(crate) enum Shared {
    /// No `shared`: any amount.
    Any,
    /// `shared = 4096`: a literal, checked against the largest opt-in.
    Literal(LitInt),
    /// `shared = EXPR`: a constant `u32` expression.
    Constant(Expr),
    /// `shared = |(x, y, z)| ...`: a rule on the block.
    Rule(ExprClosure),
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

/// One kernel parameter.
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
    pub(crate) block: Block,
    pub(crate) shared: Shared,
}

/// The arguments, checked: at most one of each, and shapes any device can launch.
pub(crate) struct CheckedArgs {
    code: Option<Code>,
    name: Option<LitStr>,
    krate: Option<Path>,
    block: Block,
    shared: Shared,
}

/// Checks the arguments.
pub(crate) fn args(args: Args) -> syn::Result<CheckedArgs> {
    let mut errors = Errors::default();
    let mut checked = CheckedArgs {
        code: None,
        name: None,
        krate: None,
        block: Block::Any,
        shared: Shared::Any,
    };
    let (mut block_key, mut max_threads_key): (Option<Ident>, Option<Ident>) = (None, None);
    let mut shared_key: Option<Ident> = None;
    for arg in args.0 {
        match arg {
            Arg::Cuda(key, _) | Arg::Ptx(key, _) if checked.code.is_some() => {
                errors.push(error::duplicate_code(&key));
            }
            Arg::Cuda(_, expr) => checked.code = Some(Code::Cuda(expr)),
            Arg::Ptx(_, expr) => checked.code = Some(Code::Ptx(expr)),
            Arg::Name(key, _) if checked.name.is_some() => errors.push(error::duplicate(&key)),
            Arg::Name(_, name) => checked.name = Some(name),
            Arg::Crate(key, _) if checked.krate.is_some() => errors.push(error::duplicate(&key)),
            Arg::Crate(_, path) => checked.krate = Some(path),
            Arg::Block(key, _) if block_key.is_some() => errors.push(error::duplicate(&key)),
            Arg::MaxThreads(key, _) if max_threads_key.is_some() => {
                errors.push(error::duplicate(&key));
            }
            Arg::Block(key, _) | Arg::MaxThreads(key, _)
                if block_key.is_some() || max_threads_key.is_some() =>
            {
                errors.push(error::block_and_max_threads(&key));
            }
            Arg::Block(key, value) => {
                block_key = Some(key);
                if let Some(block) = errors.check(block(&value)) {
                    checked.block = block;
                }
            }
            Arg::MaxThreads(key, value) => {
                if let Some(threads) = errors.check(max_threads(&key, &value)) {
                    checked.block = Block::AtMost(threads);
                }
                max_threads_key = Some(key);
            }
            Arg::Shared(key, _) if shared_key.is_some() => errors.push(error::duplicate(&key)),
            Arg::Shared(key, value) => {
                if let Some(shared) = errors.check(shared(&key, value)) {
                    checked.shared = shared;
                }
                shared_key = Some(key);
            }
        }
    }
    errors.finish_with(checked)
}

/// An integer literal's value, if `expr` is one (possibly in parentheses), with a
/// suffix of `u32` or none. Values too large for `u64` read as `u64::MAX`: the bound
/// checks reject them all the same.
fn literal(key: &Ident, expr: &Expr) -> Option<syn::Result<(u64, LitInt)>> {
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => Some(match lit.suffix() {
            "" | "u32" => Ok((lit.base10_parse().unwrap_or(u64::MAX), lit.clone())),
            suffix => Err(error::literal_suffix(lit, key, suffix)),
        }),
        Expr::Paren(paren) => literal(key, &paren.expr),
        Expr::Group(group) => literal(key, &group.expr),
        _ => None,
    }
}

/// `block = 256`, `block = (32, 8)` or `block = (32, 8, 2)`.
fn block(value: &Expr) -> syn::Result<Block> {
    let key = Ident::new("block", value.span());
    let elems: Vec<&Expr> = match value {
        Expr::Tuple(tuple) => tuple.elems.iter().collect(),
        other => vec![other],
    };
    if elems.is_empty() {
        return Err(error::block_not_literal(value));
    }
    if elems.len() > 3 {
        return Err(error::block_too_many_dimensions(value));
    }
    let mut errors = Errors::default();
    let mut dims = [1u32; 3];
    let mut threads: u64 = 1;
    let mut all_valid = true;
    for ((axis, elem), dim) in ['x', 'y', 'z'].into_iter().zip(&elems).zip(&mut dims) {
        let Some(parsed) = literal(&key, elem) else {
            return Err(error::block_not_literal(value));
        };
        let Some((v, lit)) = errors.check(parsed) else {
            all_valid = false;
            continue;
        };
        let max = if axis == 'z' {
            MAX_BLOCK_Z
        } else {
            MAX_THREADS
        };
        if v == 0 {
            errors.push(error::block_dimension_zero(&lit, axis));
            all_valid = false;
        } else if v > max {
            errors.push(error::block_dimension_too_large(&lit, axis, v, max));
            all_valid = false;
        } else {
            // `v <= 1024` here, so it fits.
            *dim = u32::try_from(v).unwrap_or(u32::MAX);
            threads *= v;
        }
    }
    if all_valid && threads > MAX_THREADS {
        errors.push(error::block_too_many_threads(value, threads));
    }
    errors.finish_with(Block::Exactly {
        dims,
        written: elems.len(),
    })
}

/// `max_threads = 512`.
fn max_threads(key: &Ident, value: &Expr) -> syn::Result<u32> {
    let (v, lit) = literal(key, value).ok_or_else(|| error::max_threads_not_literal(value))??;
    if v == 0 {
        return Err(error::max_threads_zero(&lit));
    }
    if v > MAX_THREADS {
        return Err(error::max_threads_too_large(&lit, v));
    }
    Ok(u32::try_from(v).unwrap_or(u32::MAX))
}

/// `shared = BYTES` or `shared = |(x, y, z)| BYTES`.
fn shared(key: &Ident, value: Expr) -> syn::Result<Shared> {
    if let Expr::Closure(closure) = value {
        if closure.inputs.len() != 1 {
            return Err(if closure.inputs.is_empty() {
                error::shared_rule_parameters(closure.or1_token)
            } else {
                error::shared_rule_parameters(&closure.inputs)
            });
        }
        return Ok(Shared::Rule(closure));
    }
    match literal(key, &value) {
        Some(parsed) => {
            let (v, lit) = parsed?;
            if v > MAX_SHARED_BYTES {
                return Err(error::shared_too_large(&lit, v));
            }
            Ok(Shared::Literal(lit))
        }
        None => Ok(Shared::Constant(value)),
    }
}

/// Checks the item; `args` are the checked arguments (or their errors, reported
/// together with the item's).
pub(crate) fn declaration(
    args: syn::Result<CheckedArgs>,
    item: syn::Result<&KernelFn>,
) -> syn::Result<Declaration> {
    let mut errors = Errors::default();
    let ident = item.as_ref().ok().map(|item| item.sig.ident.clone());
    let args = errors.check(args);
    if args.as_ref().is_some_and(|args| args.code.is_none()) {
        errors.push(error::missing_code(ident.as_ref()));
    }
    let item = errors.check(item);
    let params = item.and_then(|item| errors.check(signature(item)));
    errors.finish()?;
    match (args, item, params) {
        (
            Some(CheckedArgs {
                code: Some(code),
                name,
                krate,
                block,
                shared,
            }),
            Some(item),
            Some(params),
        ) => Ok(Declaration {
            attrs: item.attrs.clone(),
            vis: item.vis.clone(),
            ident: item.sig.ident.clone(),
            cuda_name: name
                .unwrap_or_else(|| LitStr::new(&item.sig.ident.to_string(), item.sig.ident.span())),
            code,
            krate: krate.unwrap_or_else(|| syn::parse_quote!(::stream_core)),
            params,
            block,
            shared,
        }),
        // `finish` returned an error for each of these that is missing; this keeps the
        // macro panic-free anyway.
        _ => Err(error::missing_code(ident.as_ref())),
    }
}

/// Checks the signature and its parameters.
fn signature(item: &KernelFn) -> syn::Result<Vec<Param>> {
    let sig = &item.sig;
    let mut errors = Errors::default();
    if let Some(brace) = item.body {
        errors.push(error::body(brace));
    }
    if sig.unsafety.is_none() {
        errors.push(error::not_unsafe(sig.fn_token.span));
    }
    if let Some(t) = &sig.asyncness {
        errors.push(error::async_fn(t.span));
    }
    if let Some(t) = &sig.constness {
        errors.push(error::const_fn(t.span));
    }
    if let Some(abi) = &sig.abi {
        errors.push(error::abi(abi));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(error::generic(&sig.generics));
    }
    if let Some(v) = &sig.variadic {
        errors.push(error::variadic(v));
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        errors.push(error::return_type(ty));
    }
    let params: Vec<Param> = sig
        .inputs
        .iter()
        .filter_map(|input| errors.check(param(input)))
        .collect();
    errors.finish_with(params)
}

/// Checks one parameter and says how it is passed.
pub(crate) fn param(input: &FnArg) -> syn::Result<Param> {
    let typed = match input {
        FnArg::Receiver(r) => return Err(error::receiver(r)),
        FnArg::Typed(t) => t,
    };
    let name = match &*typed.pat {
        Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
        other => return Err(error::pattern(other)),
    };
    let kind = match &*typed.ty {
        Type::Reference(r) => {
            let elem = match &*r.elem {
                Type::Slice(s) => (*s.elem).clone(),
                other => return Err(error::not_a_slice(other)),
            };
            if let Some(lt) = &r.lifetime {
                return Err(error::lifetime(lt));
            }
            if r.mutability.is_some() {
                ParamKind::Write(elem)
            } else {
                ParamKind::Read(elem)
            }
        }
        Type::Ptr(p) => return Err(error::raw_pointer(p)),
        other => ParamKind::Scalar(other.clone()),
    };
    Ok(Param { name, kind })
}
