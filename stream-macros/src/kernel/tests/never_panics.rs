//! `#[kernel]` never panics, whatever it is given: every prefix, suffix and one-token
//! deletion of declarations and arguments it accepts, and deterministic token soup, in
//! the attribute's arguments and in the item. Each output is Rust the compiler can read
//! (a wrapper, or a stand-in and `compile_error!`s), and every message follows the
//! message rules.

use proc_macro2::TokenStream;

use super::{assert_well_formed, kernel};
use crate::fuzz::{assert_never_fails, Corpus};

/// Declarations and arguments `#[kernel]` accepts, mutated by the harness, and the
/// tokens its parser looks at.
const CORPUS: Corpus = Corpus {
    items: &[
        "pub unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]);",
        "#[doc = \" Adds.\"] pub(crate) unsafe fn k(n: u64, x: &[u8], y: &mut [u128], z: &mut [f64]);",
        "unsafe fn none();",
        "unsafe fn named_like_locals(s: u32, config: u32, args: u32, kernel: u32, parts_0: u64, x: &[u8]);",
    ],
    args: &[
        "cuda = SRC",
        "ptx = PTX, name = \"my_kernel\", crate = ::my::gpu",
        "cuda = include_str!(\"k.cu\"), name = \"k\",",
        "cuda = SRC, block = (32, 8, 2), shared = |(x, y, z)| 4 * x * y * z",
        "cuda = SRC, max_threads = 512, shared = 4 * TILE",
        "cuda = SRC, block = 256, shared = 4096,",
    ],
    words: &[
        "unsafe", "fn", "k", "(", ")", "[", "]", "&", "mut", "f32", "u64", "bool", ":", ",", ";",
        "=", "cuda", "ptx", "name", "crate", "\"n\"", "SRC", "->", "<", ">", "'a", "*", "const",
        "async", "extern", "\"C\"", "self", "s", "config", "{", "}", "#", "pub", "_", "block",
        "max_threads", "shared", "|", "0", "32", "1024", "2000", "232449", "(32, 8)", "x",
    ],
    seed: 0x2545_f491_4f6c_dd1d,
    max_len: 14,
    soup: 1500,
};

/// Checks what must hold of any result: the output is Rust, and a rejection's messages
/// follow the rules.
fn check(args: TokenStream, item: TokenStream) -> Result<(), String> {
    let output = match kernel(args, item) {
        Ok(wrapper) => wrapper,
        Err(rejected) => {
            for error in rejected.error().clone() {
                assert_well_formed(&error.to_string());
            }
            rejected.into_compile_error()
        }
    };
    syn::parse2::<syn::File>(output.clone())
        .map(drop)
        .map_err(|e| format!("the output is not Rust ({e}): {output}"))
}

#[test]
fn kernel_expansion_never_panics_and_always_emits_rust() {
    assert_never_fails("kernel", &CORPUS.inputs(), check);
}

#[test]
fn accepted_declarations_expand_to_a_wrapper_without_errors() {
    for item in CORPUS.items {
        for args in CORPUS.args {
            let output = kernel(args.parse().unwrap(), item.parse().unwrap());
            assert!(
                output.is_ok(),
                "#[kernel({args})] {item} was rejected: {}",
                output.map_or_else(|r| r.into_compile_error().to_string(), |_| String::new())
            );
        }
    }
}
