//! Input mutators shared by the never-panics tests of `#[gpu_scope]` and `#[kernel]`.

use std::any::Any;

use proc_macro2::TokenStream;

/// Every prefix and suffix of `source` cut at a character boundary.
pub(crate) fn cuts(source: &str) -> impl Iterator<Item = &str> {
    source
        .char_indices()
        .map(|(index, _)| index)
        .flat_map(move |index| [&source[..index], &source[index..]])
}

/// `source` with one top-level token tree removed, for every token tree.
pub(crate) fn deletions(source: &str) -> Vec<String> {
    let Ok(tokens) = source.parse::<TokenStream>() else {
        return Vec::new();
    };
    let trees: Vec<_> = tokens.into_iter().collect();
    (0..trees.len())
        .map(|skip| {
            let kept = trees
                .iter()
                .enumerate()
                .filter(|(index, _)| *index != skip)
                .map(|(_, tree)| tree.clone());
            kept.collect::<TokenStream>().to_string()
        })
        .collect()
}

/// `count` strings of fewer than `max_len` tokens drawn from `words`, by xorshift from
/// `seed`, so that failures reproduce.
pub(crate) fn soup(words: &[&str], seed: u64, max_len: u64, count: usize) -> Vec<String> {
    let mut state = seed;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|_| {
            let len = next() % max_len;
            (0..len)
                .filter_map(|_| {
                    let pick = usize::try_from(next() % words.len() as u64).ok()?;
                    words.get(pick).copied()
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The message of a caught panic (`fallback` when it carries no text).
pub(crate) fn panic_text(payload: &(dyn Any + Send), fallback: &str) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| fallback.to_owned())
}
