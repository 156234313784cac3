//! The never-panics harness shared by `#[gpu_scope]` and `#[kernel]`: input mutators
//! (cuts, deletions, token soup) of inputs an attribute accepts, and a runner that
//! expands every mutant, catching panics, and reports all failures at once.

use std::any::Any;
use std::panic;

use proc_macro2::TokenStream;

/// What the never-panics test of one attribute mutates.
pub(crate) struct Corpus {
    /// Items the attribute accepts; mutated arguments are tried on the first.
    pub(crate) items: &'static [&'static str],
    /// Arguments the attribute accepts; mutated items are tried with the first.
    pub(crate) args: &'static [&'static str],
    /// The vocabulary of the token soup: the tokens the parsers look at.
    pub(crate) words: &'static [&'static str],
    /// The soup's seed, so that failures reproduce.
    pub(crate) seed: u64,
    /// The soup's strings have fewer tokens than this.
    pub(crate) max_len: u64,
    /// How many soup strings are tried, each as arguments and as the item.
    pub(crate) soup: usize,
}

impl Corpus {
    /// `(args, item)` pairs: every cut and one-token deletion of each accepted item
    /// (with the first accepted arguments) and of each accepted argument list (with the
    /// first accepted item), then the soup in both places.
    pub(crate) fn inputs(&self) -> Vec<(String, String)> {
        let (first_args, first_item) = (self.args[0], self.items[0]);
        let mut inputs: Vec<(String, String)> = Vec::new();
        for item in self.items {
            inputs.extend(cuts(item).map(|cut| (first_args.to_owned(), cut.to_owned())));
            inputs.extend(
                deletions(item)
                    .into_iter()
                    .map(|cut| (first_args.to_owned(), cut)),
            );
        }
        for args in self.args {
            inputs.extend(cuts(args).map(|cut| (cut.to_owned(), first_item.to_owned())));
            inputs.extend(
                deletions(args)
                    .into_iter()
                    .map(|cut| (cut, first_item.to_owned())),
            );
        }
        for tokens in soup(self.words, self.seed, self.max_len, self.soup) {
            inputs.push((first_args.to_owned(), tokens.clone()));
            inputs.push((tokens, first_item.to_owned()));
        }
        inputs
    }
}

/// Runs `check` on every `(args, item)` pair that lexes (the compiler never sends
/// anything else), catching panics, and fails with every input that panicked or whose
/// check failed. `attr` names the attribute in the report.
pub(crate) fn assert_never_fails(
    attr: &str,
    inputs: &[(String, String)],
    check: fn(TokenStream, TokenStream) -> Result<(), String>,
) {
    let failures: Vec<String> = inputs
        .iter()
        .filter_map(|(args, item)| {
            let (Ok(lexed_args), Ok(lexed_item)) =
                (args.parse::<TokenStream>(), item.parse::<TokenStream>())
            else {
                return None;
            };
            let outcome = panic::catch_unwind(move || check(lexed_args, lexed_item))
                .unwrap_or_else(|payload| Err(panic_text(payload.as_ref(), "a panic")));
            outcome
                .err()
                .map(|why| format!("#[{attr}({args})] {item}\n    {why}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} inputs failed:\n{}",
        failures.len(),
        inputs.len(),
        failures.join("\n")
    );
    assert!(inputs.len() > 1000, "only {} inputs", inputs.len());
}

/// Every prefix and suffix of `source` cut at a character boundary.
pub(crate) fn cuts(source: &str) -> impl Iterator<Item = &str> {
    source
        .char_indices()
        .map(|(index, _)| index)
        .flat_map(move |index| [&source[..index], &source[index..]])
}

/// `source` with one top-level token tree removed, for every token tree.
fn deletions(source: &str) -> Vec<String> {
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
fn soup(words: &[&str], seed: u64, max_len: u64, count: usize) -> Vec<String> {
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
fn panic_text(payload: &(dyn Any + Send), fallback: &str) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| fallback.to_owned())
}
