//! Functions `#[gpu_scope]` accepts, against the exact expansion they get.

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream};
use quote::quote;

use super::{as_file, assert_expands, expand_ok, lex};

#[test]
fn free_function_takes_a_stream_and_runs_its_body_in_a_scope() {
    assert_expands(
        quote!(),
        quote! {
            pub fn step(s: &Scope, input: &[f32], out: &mut [f32]) -> Result<()> {
                let x = s.upload(input)?;
                s.copy_to_host(&x, out)?;
                Ok(())
            }
        },
        quote! {
            pub fn step(s: &::stream_core::__private::Stream, input: &[f32], out: &mut [f32]) -> Result<()> {
                #[allow(unused_imports)]
                use Scope as _;
                ::stream_core::__private::scope(s, move |s| -> Result<()> {
                    let x = s.upload(input)?;
                    s.copy_to_host(&x, out)?;
                    Ok(())
                })
            }
        },
    );
}

#[test]
fn generics_and_where_clause_are_kept() {
    assert_expands(
        quote!(),
        quote! {
            pub(crate) fn run<'a, T: Copy, E, const N: usize>(s: &Scope, x: &'a [T; N]) -> Result<Vec<T>, E>
            where
                E: From<stream_core::Error> + core::fmt::Debug,
            {
                Ok(x.to_vec())
            }
        },
        quote! {
            pub(crate) fn run<'a, T: Copy, E, const N: usize>(s: &::stream_core::__private::Stream, x: &'a [T; N]) -> Result<Vec<T>, E>
            where
                E: From<stream_core::Error> + core::fmt::Debug,
            {
                #[allow(unused_imports)]
                use Scope as _;
                ::stream_core::__private::scope(s, move |s| -> Result<Vec<T>, E> { Ok(x.to_vec()) })
            }
        },
    );
}

#[test]
fn method_with_shared_self_takes_the_scope_after_self() {
    assert_expands(
        quote!(),
        quote! {
            pub fn apply(&self, s: &Scope, n: usize) -> Result<usize> { Ok(self.n + n) }
        },
        quote! {
            pub fn apply(&self, s: &::stream_core::__private::Stream, n: usize) -> Result<usize> {
                #[allow(unused_imports)]
                use Scope as _;
                ::stream_core::__private::scope(s, move |s| -> Result<usize> { Ok(self.n + n) })
            }
        },
    );
}

#[test]
fn every_receiver_kind_is_skipped() {
    for receiver in [
        quote!(self),
        quote!(mut self),
        quote!(&mut self),
        quote!(&'a self),
        quote!(self: Box<Self>),
        quote!(self: &Arc<Self>),
    ] {
        assert_expands(
            quote!(),
            quote! { fn m(#receiver, s: &Scope) -> Result<()> { Ok(()) } },
            quote! {
                fn m(#receiver, s: &::stream_core::__private::Stream) -> Result<()> {
                    #[allow(unused_imports)]
                    use Scope as _;
                    ::stream_core::__private::scope(s, move |s| -> Result<()> { Ok(()) })
                }
            },
        );
    }
}

#[test]
fn named_reference_lifetime_is_kept_and_scope_arguments_are_dropped() {
    assert_expands(
        quote!(),
        quote! {
            fn f<'s, 'e>(s: &'s Scope<'s, 'e>, x: &'s [f32]) -> Result<()> { Ok(()) }
        },
        quote! {
            fn f<'s, 'e>(s: &'s ::stream_core::__private::Stream, x: &'s [f32]) -> Result<()> {
                #[allow(unused_imports)]
                use Scope as _;
                ::stream_core::__private::scope(s, move |s| -> Result<()> { Ok(()) })
            }
        },
    );
}

#[test]
fn qualified_scope_paths_are_accepted_and_kept_in_use() {
    for (scope, path) in [
        (quote!(stream_core::Scope), quote!(stream_core::Scope)),
        (quote!(Scope<'_, '_>), quote!(Scope)),
        (
            quote!(::stream_core::Scope<'s, 'e>),
            quote!(::stream_core::Scope),
        ),
        (quote!(crate::gpu::Scope<'_, '_>), quote!(crate::gpu::Scope)),
    ] {
        assert_expands(
            quote!(),
            quote! { fn f(s: &#scope) -> Result<()> { Ok(()) } },
            quote! {
                fn f(s: &::stream_core::__private::Stream) -> Result<()> {
                    #[allow(unused_imports)]
                    use #path as _;
                    ::stream_core::__private::scope(s, move |s| -> Result<()> { Ok(()) })
                }
            },
        );
    }
}

#[test]
fn crate_argument_overrides_the_path_generated_code_names() {
    for krate in [
        quote!(my_lib::gpu),
        quote!(::my_lib),
        quote!(crate::gpu),
        quote!(self::reexport),
    ] {
        assert_expands(
            quote!(crate = #krate),
            quote! { fn f(s: &Scope) -> Result<()> { Ok(()) } },
            quote! {
                fn f(s: &#krate::__private::Stream) -> Result<()> {
                    #[allow(unused_imports)]
                    use Scope as _;
                    #krate::__private::scope(s, move |s| -> Result<()> { Ok(()) })
                }
            },
        );
    }
}

#[test]
fn empty_arguments_and_a_trailing_comma_are_accepted() {
    let item = quote! { fn f(s: &Scope) -> Result<()> { Ok(()) } };
    let plain = expand_ok(quote!(), item.clone());
    assert_eq!(
        expand_ok(lex(""), item.clone()).to_string(),
        plain.to_string()
    );
    let with_comma = expand_ok(quote!(crate = my_lib,), item.clone());
    let without = expand_ok(quote!(crate = my_lib), item);
    assert_eq!(with_comma.to_string(), without.to_string());
}

#[test]
fn underscore_pattern_gets_a_hidden_stream_name() {
    let hidden = Ident::new("__gpu_scope_stream", Span::call_site());
    assert_expands(
        quote!(),
        quote! { fn f(_: &Scope, n: u32) -> Result<u32> { Ok(n) } },
        quote! {
            fn f(#hidden: &::stream_core::__private::Stream, n: u32) -> Result<u32> {
                #[allow(unused_imports)]
                use Scope as _;
                ::stream_core::__private::scope(#hidden, move |_| -> Result<u32> { Ok(n) })
            }
        },
    );
}

#[test]
fn non_plain_pattern_moves_to_the_closure() {
    let hidden = Ident::new("__gpu_scope_stream", Span::call_site());
    assert_expands(
        quote!(),
        quote! { fn f(mut s: &Scope) -> Result<()> { Ok(()) } },
        quote! {
            fn f(#hidden: &::stream_core::__private::Stream) -> Result<()> {
                #[allow(unused_imports)]
                use Scope as _;
                ::stream_core::__private::scope(#hidden, move |mut s| -> Result<()> { Ok(()) })
            }
        },
    );
}

#[test]
fn attributes_docs_and_unsafe_are_kept() {
    assert_expands(
        quote!(),
        quote! {
            /// Adds one.
            #[inline]
            #[allow(clippy::too_many_arguments)]
            pub unsafe extern "Rust" fn f(#[allow(unused_variables)] s: &Scope, p: *const f32) -> Result<f32> {
                Ok(*p)
            }
        },
        quote! {
            /// Adds one.
            #[inline]
            #[allow(clippy::too_many_arguments)]
            pub unsafe extern "Rust" fn f(s: &::stream_core::__private::Stream, p: *const f32) -> Result<f32> {
                #[allow(unused_imports)]
                use Scope as _;
                ::stream_core::__private::scope(s, move |#[allow(unused_variables)] s| -> Result<f32> {
                    Ok(*p)
                })
            }
        },
    );
}

#[test]
fn inner_attributes_stay_on_the_function() {
    assert_expands(
        quote!(),
        lex("fn f(s: &Scope) -> Result<()> { //! Inner doc.\n #![allow(unused_mut)] let mut x = 1; Ok(()) }"),
        quote! {
            fn f(s: &::stream_core::__private::Stream) -> Result<()> {
                #![doc = " Inner doc."]
                #![allow(unused_mut)]
                #[allow(unused_imports)]
                use Scope as _;
                ::stream_core::__private::scope(s, move |s| -> Result<()> { let mut x = 1; Ok(()) })
            }
        },
    );
}

#[test]
fn accepted_result_paths() {
    for output in [
        quote!(Result<()>),
        quote!(stream_core::Result<u32>),
        quote!(std::result::Result<u32, MyError>),
        quote!(::core::result::Result<(), E>),
        quote!(anyhow::Result<()>),
        quote!(Result),
    ] {
        assert_expands(
            quote!(),
            quote! { fn f(s: &Scope) -> #output { todo!() } },
            quote! {
                fn f(s: &::stream_core::__private::Stream) -> #output {
                    #[allow(unused_imports)]
                    use Scope as _;
                    ::stream_core::__private::scope(s, move |s| -> #output { todo!() })
                }
            },
        );
    }
}

#[test]
fn impl_trait_in_the_return_type_is_inferred_by_the_closure() {
    assert_expands(
        quote!(),
        quote! {
            fn f(s: &Scope) -> Result<(impl Iterator<Item = u32>, Vec<impl Fn()>)> { todo!() }
        },
        quote! {
            fn f(s: &::stream_core::__private::Stream) -> Result<(impl Iterator<Item = u32>, Vec<impl Fn()>)> {
                #[allow(unused_imports)]
                use Scope as _;
                ::stream_core::__private::scope(s, move |s| -> Result<(_, Vec<_>)> { todo!() })
            }
        },
    );
}

#[test]
fn scope_type_in_an_invisible_group_is_recognised() {
    // `macro_rules!` wraps a `$ty` fragment in a group without delimiters.
    let grouped = Group::new(Delimiter::None, quote!(&Scope));
    assert_expands(
        quote!(),
        quote! { fn f(s: #grouped) -> Result<()> { Ok(()) } },
        quote! {
            fn f(s: &::stream_core::__private::Stream) -> Result<()> {
                #[allow(unused_imports)]
                use Scope as _;
                ::stream_core::__private::scope(s, move |s| -> Result<()> { Ok(()) })
            }
        },
    );
}

#[test]
fn body_with_syntax_errors_is_passed_through_unparsed() {
    // What an IDE sends while the user is typing: the compiler reports the
    // syntax error itself, at its place in the closure's body.
    let expanded = expand_ok(
        quote!(),
        lex("fn f(s: &Scope) -> Result<()> { let x = ; s. }"),
    );
    let expected: TokenStream = lex(
        "fn f(s: &::stream_core::__private::Stream) -> Result<()> { \
         #[allow(unused_imports)] use Scope as _; \
         ::stream_core::__private::scope(s, move |s| -> Result<()> { let x = ; s. }) }",
    );
    let squash = |tokens: TokenStream| tokens.to_string().replace(' ', "");
    assert_eq!(squash(expanded), squash(expected));
}

#[test]
fn trait_method_with_a_default_body_is_accepted() {
    let expanded = expand_ok(
        quote!(),
        quote! { fn provided(&self, s: &Scope) -> Result<()> { self.required(s) } },
    );
    let file = as_file(&expanded);
    assert_eq!(file.items.len(), 1, "{expanded}");
}

#[test]
fn closure_body_keeps_the_span_of_the_users_braces() {
    let source = "fn f(s: &Scope) -> Result<()> { Ok(()) }";
    let expanded = expand_ok(quote!(), lex(source));
    let file = as_file(&expanded);
    let text = quote!(#file).to_string();
    assert!(
        text.contains("move | s | -> Result < () > { Ok (()) }"),
        "{text}"
    );
    // The braces of the closure's body are the user's: find that group.
    let body = expanded
        .into_iter()
        .filter_map(|tree| match tree {
            proc_macro2::TokenTree::Group(group) if group.delimiter() == Delimiter::Brace => {
                Some(group)
            }
            _ => None,
        })
        .flat_map(|outer| outer.stream())
        .filter_map(|tree| match tree {
            proc_macro2::TokenTree::Group(group) if group.delimiter() == Delimiter::Parenthesis => {
                Some(group)
            }
            _ => None,
        })
        .flat_map(|call| call.stream())
        .find_map(|tree| match tree {
            proc_macro2::TokenTree::Group(group) if group.delimiter() == Delimiter::Brace => {
                Some(group)
            }
            _ => None,
        });
    let body = body.unwrap_or_else(|| panic!("no closure body in the expansion"));
    assert_eq!(body.span().source_text().as_deref(), Some("{ Ok(()) }"));
}

#[test]
fn raw_and_underscore_prefixed_names_are_reused() {
    for name in [quote!(r#type), quote!(_s)] {
        assert_expands(
            quote!(),
            quote! { fn f(#name: &Scope) -> Result<()> { Ok(()) } },
            quote! {
                fn f(#name: &::stream_core::__private::Stream) -> Result<()> {
                    #[allow(unused_imports)]
                    use Scope as _;
                    ::stream_core::__private::scope(#name, move |#name| -> Result<()> { Ok(()) })
                }
            },
        );
    }
}

#[test]
fn scope_named_through_self_is_not_imported() {
    // `use Self::Scope` is not valid Rust, so no `use` is generated for it.
    assert_expands(
        quote!(),
        quote! { fn f(&self, s: &Self::Scope) -> Result<()> { Ok(()) } },
        quote! {
            fn f(&self, s: &::stream_core::__private::Stream) -> Result<()> {
                ::stream_core::__private::scope(s, move |s| -> Result<()> { Ok(()) })
            }
        },
    );
}
