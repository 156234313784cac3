//! The launch-shape arguments of `#[kernel]`: what each becomes in the kernel's
//! `KernelShape` and docs, and every shape no device can launch, rejected at its token.

use quote::quote;

use super::{assert_well_formed, errors_of, expand, rejected, Expected};

/// The `KernelShape` expression of `#[kernel(cuda = S, shape)] unsafe fn k(..);`.
fn shape_of(shape: proc_macro2::TokenStream) -> String {
    let out = expand(
        quote!(cuda = S, #shape),
        quote!(
            unsafe fn k(x: &mut [f32]);
        ),
    );
    assert!(!out.contains("compile_error"), "{out}");
    let start = out
        .find(":: stream_core :: __private :: KernelShape {")
        .unwrap_or_else(|| panic!("no KernelShape in {out}"));
    out[start..].to_owned()
}

#[test]
fn block_literals_become_the_exact_block_missing_dimensions_one() {
    for (shape, block, declared) in [
        (quote!(block = 256), "(256u32 , 1u32 , 1u32)", "block = 256"),
        (
            quote!(block = (32, 8)),
            "(32u32 , 8u32 , 1u32)",
            "block = (32, 8)",
        ),
        (
            quote!(block = (32, 8, 2)),
            "(32u32 , 8u32 , 2u32)",
            "block = (32, 8, 2)",
        ),
        (quote!(block = (64,)), "(64u32 , 1u32 , 1u32)", "block = 64"),
        (
            quote!(block = 128u32),
            "(128u32 , 1u32 , 1u32)",
            "block = 128",
        ),
    ] {
        let out = shape_of(shape);
        assert!(
            out.contains(&format!(
                "BlockRule :: Exactly {{ block : {block} , declared : \"`#[kernel({declared})]` on `k`\" }}"
            )),
            "{out}"
        );
        assert!(out.contains("SharedRule :: Any"), "{out}");
    }
}

#[test]
fn max_threads_becomes_an_upper_bound() {
    let out = shape_of(quote!(max_threads = 512));
    assert!(
        out.contains(
            "BlockRule :: AtMost { threads : 512u32 , declared : \"`#[kernel(max_threads = 512)]` on `k`\" }"
        ),
        "{out}"
    );
}

#[test]
fn shared_constants_and_rules_become_lower_bounds() {
    let out = shape_of(quote!(shared = 4096));
    assert!(
        out.contains(
            "SharedRule :: AtLeast { bytes : 4096 , declared : \"`#[kernel(shared = 4096)]` on `k`\" }"
        ),
        "{out}"
    );
    let out = shape_of(quote!(shared = 4 * TILE * (TILE + 1)));
    assert!(
        out.contains(
            "SharedRule :: AtLeast { bytes : 4 * TILE * (TILE + 1) , declared : \"`#[kernel(shared = 4 * TILE * (TILE + 1))]` on `k`\" }"
        ),
        "{out}"
    );
    let out = shape_of(quote!(block = (32, 8), shared = |(x, y, z)| 4 * x * y * z));
    assert!(out.contains("BlockRule :: Exactly"), "{out}");
    assert!(
        out.contains(
            "SharedRule :: PerBlock { bytes : | (x , y , z) | 4 * x * y * z , declared : \"`#[kernel(shared = |(x, y, z)| 4 * x * y * z)]` on `k`\" }"
        ),
        "{out}"
    );
}

#[test]
fn the_wrapper_docs_state_the_admitted_shape() {
    let doc = |args: proc_macro2::TokenStream| {
        expand(
            args,
            quote!(
                unsafe fn k(x: &mut [f32]);
            ),
        )
    };
    let out = doc(quote!(cuda = S));
    assert!(out.contains("every shape the device accepts"), "{out}");
    assert!(out.contains("memory-safe for any block"), "{out}");
    let out = doc(quote!(cuda = S, block = (32, 8), shared = 1024));
    assert!(
        out.contains("blocks of exactly 32 x 8 x 1 threads"),
        "{out}"
    );
    assert!(
        out.contains("at least 1024 bytes of dynamic shared memory"),
        "{out}"
    );
    let out = doc(quote!(
        cuda = S,
        max_threads = 512,
        shared = |(x, y, z)| 4 * x * y * z
    ));
    assert!(out.contains("at most 512 threads"), "{out}");
    assert!(
        out.contains("at least `(|(x, y, z)| 4 * x * y * z)(config.block)` bytes"),
        "{out}"
    );
}

#[test]
fn shapes_no_device_launches_are_rejected_at_their_token() {
    let cases: &[(&str, &[Expected])] = &[
        (
            "block = (32, 0)",
            &[("0", "`block` dimension y is 0, but a block has at least one thread")],
        ),
        (
            "block = 2000",
            &[("2000", "`block` dimension x is 2000, but no CUDA device launches more than 1024")],
        ),
        (
            "block = (1, 1025)",
            &[("1025", "dimension y is 1025")],
        ),
        (
            "block = (1, 1, 65)",
            &[("65", "dimension z is 65, but no CUDA device launches more than 64")],
        ),
        (
            "block = (64, 32)",
            &[("(64, 32)", "`block` has 2048 threads (x * y * z)")],
        ),
        (
            "block = (0, 2000, 65)",
            &[("0", "dimension x is 0"), ("2000", "dimension y is 2000"), ("65", "dimension z is 65")],
        ),
        (
            "block = 99999999999999999999999",
            &[("99999999999999999999999", "no CUDA device launches more than 1024")],
        ),
        ("block = THREADS", &[("THREADS", "`block` takes integer literals")]),
        ("block = (32, N)", &[("(32, N)", "`block` takes integer literals")]),
        ("block = ()", &[("()", "`block` takes integer literals")]),
        ("block = (1, 2, 3, 4)", &[("(1, 2, 3, 4)", "at most three dimensions")]),
        ("block = 256i64", &[("256i64", "remove the `i64` suffix")]),
        ("max_threads = 0", &[("0", "`max_threads` is 0")]),
        ("max_threads = 2048", &[("2048", "`max_threads` is 2048, but no CUDA device")]),
        ("max_threads = N", &[("N", "`max_threads` takes an integer literal")]),
        (
            "block = 256, max_threads = 512",
            &[("max_threads", "takes `block = ...` or `max_threads = ...`, not both")],
        ),
        (
            "max_threads = 512, block = 256",
            &[("block", "not both")],
        ),
        ("block = 256, block = 128", &[("block", "takes `block = ...` at most once")]),
        ("shared = 1, shared = 2", &[("shared", "takes `shared = ...` at most once")]),
        (
            "shared = 232449",
            &[("232449", "`shared` is 232449 bytes, but no CUDA device gives a block more than 232448 bytes (227 KiB)")],
        ),
        ("shared = || 4", &[("|", "takes one parameter, the block")]),
        ("shared = |x, y| 4", &[("x", "takes one parameter, the block")]),
    ];
    for (shape, expected) in cases {
        let args = format!("cuda = S, {shape}");
        let found = errors_of(&rejected(&args, "unsafe fn k(x: &mut [f32]);"));
        assert_eq!(found.len(), expected.len(), "#[kernel({args})]: {found:?}");
        for ((span, message), (text, words)) in found.iter().zip(expected.iter()) {
            assert_well_formed(message);
            assert!(
                message.contains(words),
                "#[kernel({args})]: `{message}` does not contain `{words}`"
            );
            assert!(
                span.as_deref().is_some_and(|span| span.starts_with(text)),
                "#[kernel({args})]: `{message}` points at {span:?}, expected {text:?}"
            );
        }
    }
}

#[test]
fn the_largest_shapes_any_device_launches_are_accepted() {
    for shape in [
        quote!(block = 1024),
        quote!(block = (1, 1024)),
        quote!(block = (16, 1, 64)),
        quote!(block = (1, 1, 1)),
        quote!(max_threads = 1024),
        quote!(max_threads = 1),
        quote!(shared = 232448),
        quote!(shared = 0),
        quote!(shared = u32::MAX),
    ] {
        shape_of(shape);
    }
}
