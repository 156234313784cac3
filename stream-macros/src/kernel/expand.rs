//! Code generation for `#[kernel]`: a safe wrapper that checks the launch shape against
//! the declaration and launches the kernel on a scope's stream (or records it into a
//! graph capture: both implement `Enqueue`), with branded device memory and no
//! per-launch allocation.
//!
//! ```text
//! #[kernel(cuda = SRC, block = 256)]
//! pub unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]);
//! ```
//! becomes
//! ```text
//! pub fn axpy_f32<'s>(
//!     s: &'s impl Enqueue<'s>, config: LaunchConfig,
//!     a: f32, x: &impl DeviceMemory<'s, f32>, y: &mut impl DeviceMemoryMut<'s, f32>,
//! ) -> Result<()> {
//!     let kernel: &'static Kernel = {
//!         static __STREAM_CORE_KERNEL_: Kernel = Kernel::new("axpy_f32", KernelSource::Cuda(SRC),
//!             KernelShape { block: BlockRule::Exactly { .. }, shared: SharedRule::Any })
//!             .with_params(&[KernelParam::scalar::<f32>("a", "f32"), KernelParam::slice("x"), ...]);
//!         &__STREAM_CORE_KERNEL_
//!     };
//!     let a: f32 = scalar::<f32>(a);
//!     let parts_1 = read_parts::<f32>(x);
//!     let parts_2 = write_parts::<f32>(y);
//!     let mut args = [arg(&a), arg(&parts_1[0]), arg(&parts_1[1]), ...];
//!     unsafe { launch(s, kernel, config, &mut args) }
//! }
//! ```
//!
//! Hygiene: the wrapper's own parameters (`s`, `config`) and every local it binds
//! (`kernel`, `args`, `parts_N`) are spanned at [`Span::mixed_site`], so no parameter
//! name of the user's can refer to them or shadow them (a user parameter may itself be
//! called `s`, `args` or `parts_1`: rustc tells the two bindings apart). Items ignore
//! mixed-site hygiene, so the kernel's `static` sits in a block of its own, where no
//! user token but the code and shared-memory expressions and the scalar parameters'
//! types appears (their names go in as string literals), and is reached only through
//! the mixed-site `kernel`.

use proc_macro2::{Delimiter, Ident, Spacing, Span, TokenStream, TokenTree};
use quote::{quote, ToTokens};
use syn::{FnArg, Pat, Path};

use super::parse::KernelFn;
use super::validate::{self, Block, Code, Declaration, Param, ParamKind, Shared};

/// A local or parameter of the wrapper, out of the user's reach (mixed-site hygiene).
fn hidden(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// The wrapper of a valid declaration.
pub(crate) fn expand(decl: &Declaration) -> TokenStream {
    let Declaration {
        attrs,
        vis,
        ident,
        cuda_name,
        code,
        krate,
        params,
        block,
        shared,
    } = decl;
    let private = quote!(#krate::__private);
    let (s, config, kernel, args) = (
        hidden("s"),
        hidden("config"),
        hidden("kernel"),
        hidden("args"),
    );
    let source = match code {
        Code::Cuda(expr) => quote!(#private::KernelSource::Cuda(#expr)),
        Code::Ptx(expr) => quote!(#private::KernelSource::Ptx(#expr)),
    };
    let inputs = params.iter().map(|p| input(&private, p));
    let mut locals = Vec::new();
    let mut arg_pointers = Vec::new();
    for (index, p) in params.iter().enumerate() {
        let name = &p.name;
        let parts = hidden(&format!("parts_{index}"));
        match &p.kind {
            ParamKind::Scalar(ty) => {
                // Only `DeviceRepr` values may cross to the GPU: a plain-old-data check.
                locals.push(quote!(let #name: #ty = #private::scalar::<#ty>(#name);));
                arg_pointers.push(quote!(#private::arg(&#name)));
            }
            ParamKind::Read(ty) => {
                locals.push(quote!(let #parts = #private::read_parts::<#ty>(#name);));
                arg_pointers.push(quote!(#private::arg(&#parts[0]), #private::arg(&#parts[1])));
            }
            ParamKind::Write(ty) => {
                locals.push(quote!(let #parts = #private::write_parts::<#ty>(#name);));
                arg_pointers.push(quote!(#private::arg(&#parts[0]), #private::arg(&#parts[1])));
            }
        }
    }
    let arg_count = params
        .iter()
        .map(|p| match p.kind {
            ParamKind::Scalar(_) => 1,
            ParamKind::Read(_) | ParamKind::Write(_) => 2,
        })
        .sum::<usize>();
    let shape = kernel_shape(&private, ident, block, shared);
    let param_descriptions = params.iter().map(|p| {
        let name = p.name.to_string();
        match &p.kind {
            ParamKind::Scalar(ty) => {
                let written = render(ty.to_token_stream());
                quote!(#private::KernelParam::scalar::<#ty>(#name, #written))
            }
            ParamKind::Read(_) | ParamKind::Write(_) => quote!(#private::KernelParam::slice(#name)),
        }
    });
    let launch_doc = format!(
        " Launches the CUDA kernel `{}` on the scope's stream with `config`; no event is \
         recorded and nothing is allocated.",
        cuda_name.value()
    );
    let shape_doc = shape_doc(block, shared);
    let static_name = Ident::new("__STREAM_CORE_KERNEL_", Span::mixed_site());
    quote! {
        #(#attrs)*
        #[doc = ""]
        #[doc = #launch_doc]
        #[doc = ""]
        #[doc = #shape_doc]
        // The wrapper adds the scope and the launch shape to the kernel's own parameters.
        #[allow(clippy::too_many_arguments)]
        #vis fn #ident<'s>(
            #s: &'s impl #private::Enqueue<'s>,
            #config: #private::LaunchConfig,
            #(#inputs),*
        ) -> #private::Result<()> {
            let #kernel: &'static #private::Kernel = {
                static #static_name: #private::Kernel =
                    #private::Kernel::new(#cuda_name, #source, #shape)
                        .with_params(&[#(#param_descriptions),*]);
                &#static_name
            };
            #(#locals)*
            let mut #args: [*mut ::core::ffi::c_void; #arg_count] = [#(#arg_pointers),*];
            // SAFETY: the `unsafe fn` declaration of this kernel promises that its CUDA
            // parameters are exactly these (each slice as a pointer and a `size_t`
            // length), that it stays within those lengths and writes only through the
            // `&mut` slices, for every launch shape the declaration admits; `launch`
            // refuses any `config` outside the declared shape (`kernel`'s `KernelShape`,
            // made from this declaration's `block`, `max_threads` and `shared`) before
            // loading or enqueueing anything. Each device address comes from memory
            // branded by this scope and borrowed for the call (mutably where written, so
            // no argument aliases another that is written), and stays valid until the
            // launch has run: frees are ordered after it on the same stream.
            #[allow(unsafe_code)]
            unsafe {
                #private::launch(#s, #kernel, #config, &mut #args)
            }
        }
    }
}

/// The wrapper's input for one kernel parameter.
fn input(private: &TokenStream, p: &Param) -> TokenStream {
    let name = &p.name;
    match &p.kind {
        ParamKind::Scalar(ty) => quote!(#name: #ty),
        ParamKind::Read(ty) => quote!(#name: &impl #private::DeviceMemory<'s, #ty>),
        ParamKind::Write(ty) => quote!(#name: &mut impl #private::DeviceMemoryMut<'s, #ty>),
    }
}

/// The stand-in emitted next to the errors of a rejected declaration: a function with
/// the wrapper's signature, as far as the declaration gives one, so that call sites
/// keep type-checking. Parameters the declaration gets wrong take any value.
pub(crate) fn stand_in(krate: Option<&Path>, item: &KernelFn) -> TokenStream {
    let KernelFn {
        attrs, vis, sig, ..
    } = item;
    let private = match krate {
        Some(path) => quote!(#path::__private),
        None => quote!(::stream_core::__private),
    };
    let generic = !sig.generics.params.is_empty() || sig.generics.where_clause.is_some();
    let inputs = sig
        .inputs
        .iter()
        .filter_map(|arg| match validate::param(arg) {
            // Types of a generic declaration name parameters the stand-in does not have.
            Ok(p) if !generic => Some(input(&private, &p)),
            Ok(p) => {
                let name = p.name;
                Some(quote!(#name: impl ::core::marker::Sized))
            }
            Err(_) => match arg {
                FnArg::Receiver(_) => None,
                FnArg::Typed(typed) => Some(match &*typed.pat {
                    Pat::Ident(p) => {
                        let name = &p.ident;
                        quote!(#name: impl ::core::marker::Sized)
                    }
                    _ => quote!(_: impl ::core::marker::Sized),
                }),
            },
        });
    let ident = &sig.ident;
    let (s, config) = (hidden("s"), hidden("config"));
    // The body never runs: the crate does not compile (the `compile_error!`s emitted
    // beside this function say why), so nothing can call it. The function is here only
    // so that call sites keep type-checking and IDEs keep completing.
    quote! {
        #(#attrs)*
        #[allow(dead_code, unused_variables, clippy::too_many_arguments)]
        #vis fn #ident<'s>(
            #s: &'s impl #private::Enqueue<'s>,
            #config: #private::LaunchConfig,
            #(#inputs),*
        ) -> #private::Result<()> {
            ::core::unreachable!()
        }
    }
}

/// The `KernelShape` of the declaration: its block and shared-memory rules, each with
/// the declaration quoted for the launch errors.
fn kernel_shape(
    private: &TokenStream,
    ident: &Ident,
    block: &Block,
    shared: &Shared,
) -> TokenStream {
    let declared = |argument: String| format!("`#[kernel({argument})]` on `{ident}`");
    let block = match block {
        Block::Any => quote!(#private::BlockRule::Any),
        Block::Exactly { dims, written } => {
            let [x, y, z] = *dims;
            let text = declared(format!("block = {}", block_text(*dims, *written)));
            quote!(#private::BlockRule::Exactly { block: (#x, #y, #z), declared: #text })
        }
        Block::AtMost(threads) => {
            let text = declared(format!("max_threads = {threads}"));
            quote!(#private::BlockRule::AtMost { threads: #threads, declared: #text })
        }
    };
    let shared = match shared {
        Shared::Any => quote!(#private::SharedRule::Any),
        Shared::Literal(lit) => {
            let text = declared(format!("shared = {lit}"));
            quote!(#private::SharedRule::AtLeast { bytes: #lit, declared: #text })
        }
        Shared::Constant(expr) => {
            let text = declared(format!("shared = {}", render(expr.to_token_stream())));
            quote!(#private::SharedRule::AtLeast { bytes: #expr, declared: #text })
        }
        Shared::Rule(closure) => {
            let text = declared(format!("shared = {}", render_closure(closure)));
            quote!(#private::SharedRule::PerBlock { bytes: #closure, declared: #text })
        }
    };
    quote!(#private::KernelShape { block: #block, shared: #shared })
}

/// `256`, `(32, 8)` or `(32, 8, 2)`: the block as the user wrote it.
fn block_text(dims: [u32; 3], written: usize) -> String {
    let shown: Vec<String> = dims.iter().take(written).map(u32::to_string).collect();
    match shown.as_slice() {
        [x] => x.clone(),
        _ => format!("({})", shown.join(", ")),
    }
}

/// The wrapper's doc paragraph on the launches it admits.
fn shape_doc(block: &Block, shared: &Shared) -> String {
    if matches!((block, shared), (Block::Any, Shared::Any)) {
        return " Admitted launches: every shape the device accepts. The declaration has no \
                `block`, `max_threads` or `shared` argument, so it promises that the kernel is \
                memory-safe for any block and any dynamic shared memory; a shape beyond the \
                device's or the kernel's limits is an `Error::InvalidLaunch`."
            .to_owned();
    }
    let blocks = match block {
        Block::Any => "any block the device accepts".to_owned(),
        Block::Exactly {
            dims: [x, y, z], ..
        } => {
            format!("blocks of exactly {x} x {y} x {z} threads (`config.block == ({x}, {y}, {z})`)")
        }
        Block::AtMost(threads) => {
            format!("any block of at most {threads} threads (x * y * z) that the device accepts")
        }
    };
    let memory = match shared {
        Shared::Any => "any dynamic shared memory".to_owned(),
        Shared::Literal(lit) => {
            format!("at least {lit} bytes of dynamic shared memory (`config.shared_mem_bytes`)")
        }
        Shared::Constant(expr) => format!(
            "at least `{}` bytes of dynamic shared memory (`config.shared_mem_bytes`)",
            render(expr.to_token_stream())
        ),
        Shared::Rule(closure) => format!(
            "at least `({})(config.block)` bytes of dynamic shared memory \
             (`config.shared_mem_bytes`)",
            render_closure(closure)
        ),
    };
    format!(
        " Admitted launches: {blocks}, with {memory}. Any other `config` is an \
         `Error::InvalidLaunch` naming the declaration, returned before the kernel is loaded \
         or launched; so is a shape beyond the device's or the kernel's limits."
    )
}

/// A closure as the user would write it: `|(x, y, z)| 4 * x * y * z`.
fn render_closure(closure: &syn::ExprClosure) -> String {
    let inputs: Vec<String> = closure
        .inputs
        .iter()
        .map(|pat| render(pat.to_token_stream()))
        .collect();
    let prefix = if closure.capture.is_some() {
        "move "
    } else {
        ""
    };
    let output = match &closure.output {
        syn::ReturnType::Default => String::new(),
        syn::ReturnType::Type(_, ty) => format!(" -> {}", render(ty.to_token_stream())),
    };
    format!(
        "{prefix}|{}|{output} {}",
        inputs.join(", "),
        render(closure.body.to_token_stream())
    )
}

/// Tokens as a person would write them (for messages and docs): spaces between tokens,
/// none inside delimiters, before `,` `;` `.` `?`, or around `::` and other joint
/// punctuation.
fn render(tokens: TokenStream) -> String {
    let mut out = String::new();
    // Whether the next token follows without a space.
    let mut glued = true;
    // Whether the last token was a `:` that began a `::`.
    let mut path_colon = false;
    for tree in tokens {
        let (text, glue_before, glue_after) = match &tree {
            TokenTree::Group(group) => {
                let (open, close) = match group.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::Brace => ("{ ", " }"),
                    Delimiter::None => ("", ""),
                };
                (
                    format!("{open}{}{close}", render(group.stream())),
                    false,
                    false,
                )
            }
            TokenTree::Punct(punct) => {
                let c = punct.as_char();
                let joint = punct.spacing() == Spacing::Joint;
                let ends_path = c == ':' && path_colon;
                path_colon = c == ':' && joint;
                (
                    c.to_string(),
                    matches!(c, ',' | ';' | '.' | '?' | ':'),
                    joint || c == '.' || ends_path,
                )
            }
            other => (other.to_string(), false, false),
        };
        if !(glued || glue_before) {
            out.push(' ');
        }
        out.push_str(&text);
        glued = glue_after;
    }
    out
}
