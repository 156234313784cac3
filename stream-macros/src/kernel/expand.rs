//! Code generation for `#[kernel]`: a safe wrapper that launches the kernel on a
//! scope's stream, with branded device memory and no per-launch allocation.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::parse::{Code, Declaration, ParamKind};

pub(crate) fn expand(decl: &Declaration) -> TokenStream {
    let Declaration {
        attrs,
        vis,
        ident,
        cuda_name,
        code,
        krate,
        params,
    } = decl;
    let private = quote!(#krate::__private);
    let source = match code {
        Code::Cuda(expr) => quote!(#private::KernelSource::Cuda(#expr)),
        Code::Ptx(expr) => quote!(#private::KernelSource::Ptx(#expr)),
    };
    let mut inputs = Vec::new();
    let mut locals = Vec::new();
    let mut args = Vec::new();
    for p in params {
        let name = &p.name;
        match &p.kind {
            ParamKind::Scalar(ty) => {
                inputs.push(quote!(#name: #ty));
                // Only `DeviceRepr` values may cross to the GPU: a plain-old-data check.
                locals.push(quote!(let #name: #ty = #private::scalar::<#ty>(#name);));
                args.push(quote!(#private::arg(&#name)));
            }
            ParamKind::Read(ty) => {
                let parts = format_ident!("__{}_parts", name);
                inputs.push(quote!(#name: &impl #private::DeviceMemory<'s, #ty>));
                locals.push(quote!(let #parts = #private::read_parts::<#ty>(#name);));
                args.push(quote!(#private::arg(&#parts[0]), #private::arg(&#parts[1])));
            }
            ParamKind::Write(ty) => {
                let parts = format_ident!("__{}_parts", name);
                inputs.push(quote!(#name: &mut impl #private::DeviceMemoryMut<'s, #ty>));
                locals.push(quote!(let #parts = #private::write_parts::<#ty>(#name);));
                args.push(quote!(#private::arg(&#parts[0]), #private::arg(&#parts[1])));
            }
        }
    }
    let launch_doc = format!(
        " Launches the CUDA kernel `{}` on the scope's stream with `config`; no event is recorded \
         and nothing is allocated.",
        cuda_name.value()
    );
    quote! {
        #(#attrs)*
        #[doc = ""]
        #[doc = #launch_doc]
        // The wrapper adds the scope and the launch shape to the kernel's own parameters.
        #[allow(clippy::too_many_arguments)]
        #vis fn #ident<'s>(
            s: &'s #private::Scope<'s, '_>,
            config: #private::LaunchConfig,
            #(#inputs),*
        ) -> #private::Result<()> {
            static KERNEL: #private::Kernel = #private::Kernel::new(#cuda_name, #source);
            #(#locals)*
            let mut args = [#(#args),*];
            // SAFETY: the `unsafe fn` declaration of this kernel promises that its CUDA
            // parameters are exactly these (each slice as a pointer and a `size_t`
            // length), that it stays within those lengths, and that it writes only
            // through the `&mut` slices. Each device address comes from memory branded
            // by this scope and borrowed for the call (mutably where written, so no
            // argument aliases another that is written), and stays valid until the
            // launch has run: frees are ordered after it on the same stream.
            #[allow(unsafe_code)]
            unsafe {
                #private::launch(s, &KERNEL, config, &mut args)
            }
        }
    }
}
