//! Every kernel of this crate declares its launch shape, and its CUDA code says the same
//! thing to the compiler: `__launch_bounds__(N)` where N is the declared number of
//! threads per block. A declaration without a shape would promise that the kernel is
//! memory-safe for every block, which none of these kernels is; a `__launch_bounds__`
//! that disagrees with the declaration means one of the two was changed alone.
//!
//! The files are embedded with `include_str!`, so the test reads no path at run time.

use std::collections::BTreeMap;

use crate::declarations;

/// The declarations, as written.
const DECLARATIONS: &str = include_str!("declarations.rs");

/// Every CUDA file of the crate that holds kernels, by the path `declarations.rs`
/// includes it with, as its module has it (what precedes the file first: the shared
/// header with its `#define`s, an SGEMM form's two `#define`s).
const SOURCES: &[(&str, &str)] = &[
    ("../cuda/elementwise_f32.cu", declarations::ELEMENTWISE_F32),
    ("../cuda/elementwise_f64.cu", declarations::ELEMENTWISE_F64),
    (
        "../cuda/elementwise_half.cu",
        declarations::ELEMENTWISE_HALF,
    ),
    ("../cuda/reduce_f32.cu", declarations::REDUCE_F32),
    ("../cuda/reduce_f64.cu", declarations::REDUCE_F64),
    ("../cuda/reduce_half.cu", declarations::REDUCE_HALF),
    ("../cuda/transpose.cu", include_str!("../cuda/transpose.cu")),
    ("../cuda/sgemm.cu", declarations::SGEMM_AS_STORED),
    ("../cuda/sgemm_split_k.cu", declarations::SPLIT_K_AS_STORED),
    (
        "../cuda/sgemm_split_k_sum.cu",
        include_str!("../cuda/sgemm_split_k_sum.cu"),
    ),
];

/// One `#[kernel(...)]` declaration.
#[derive(Debug)]
struct Declaration {
    /// The Rust name.
    rust: String,
    /// The CUDA name (`name = "..."`, or the Rust name).
    cuda: String,
    /// The constant named by `cuda = ...`.
    source: String,
    /// Threads per block the declaration admits at most (`block` or `max_threads`), or
    /// `None` without a shape.
    threads: Option<u64>,
}

/// One `extern "C" __global__` function of a CUDA file.
#[derive(Debug)]
struct CudaKernel {
    name: String,
    /// The evaluated `__launch_bounds__` argument, `None` without one, `Err` with the
    /// text when it cannot be evaluated.
    launch_bounds: Option<Result<u64, String>>,
}

/// The text between `open` (just consumed) and its matching close, and the rest after
/// the close; `None` when it never closes.
fn balanced(text: &str, open: char, close: char) -> Option<(&str, &str)> {
    let mut depth = 1usize;
    for (index, c) in text.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some((&text[..index], &text[index + 1..]));
            }
        }
    }
    None
}

/// `text` split at top-level commas (outside parentheses and closures' `|..|`).
fn top_level_args(text: &str) -> Vec<&str> {
    let mut args = Vec::new();
    let (mut depth, mut start, mut in_pipes) = (0i32, 0usize, false);
    for (index, c) in text.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            '|' => in_pipes = !in_pipes,
            ',' if depth == 0 && !in_pipes => {
                args.push(text[start..index].trim());
                start = index + 1;
            }
            _ => {}
        }
    }
    args.push(text[start..].trim());
    args.retain(|arg| !arg.is_empty());
    args
}

/// The product of the integer literals in `256`, `(32, 8)`, `(32, 8, 2)`.
fn block_threads(value: &str) -> Result<u64, String> {
    value
        .trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(str::trim)
        .filter(|dim| !dim.is_empty())
        .map(|dim| {
            dim.trim_end_matches("u32")
                .parse::<u64>()
                .map_err(|e| format!("block dimension `{dim}`: {e}"))
        })
        .product()
}

/// The `#[kernel(...)]` declarations of `text`.
fn declarations(text: &str) -> Result<Vec<Declaration>, String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[kernel(") {
        let (args, after) = balanced(&rest[at + "#[kernel(".len()..], '(', ')')
            .ok_or_else(|| "a `#[kernel(` that never closes".to_owned())?;
        let fn_at = after
            .find("fn ")
            .ok_or_else(|| format!("no `fn` after #[kernel({args})]"))?;
        let rust: String = after[fn_at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let mut declaration = Declaration {
            cuda: rust.clone(),
            rust,
            source: String::new(),
            threads: None,
        };
        for arg in top_level_args(args) {
            let (key, value) = arg
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| format!("`{arg}` is not `key = value`"))?;
            match key {
                "cuda" => declaration.source = value.to_owned(),
                "name" => declaration.cuda = value.trim_matches('"').to_owned(),
                "block" => declaration.threads = Some(block_threads(value)?),
                "max_threads" => {
                    declaration.threads = Some(
                        value
                            .parse()
                            .map_err(|e| format!("max_threads `{value}`: {e}"))?,
                    );
                }
                _ => {}
            }
        }
        found.push(declaration);
        rest = after;
    }
    Ok(found)
}

/// `const NAME: &str = include_str!("PATH");` of `text`, as NAME -> PATH. A source made
/// of several files (`concat!(include_str!("header"), include_str!("PATH"))`, the
/// headers first, or `sgemm_module!(A, B, "PATH")`, whose header the macro adds) maps
/// to its last `../cuda/` file, which holds the kernels.
fn included_sources(text: &str) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim();
        let Some(declaration) = line
            .strip_prefix("pub(crate) ")
            .unwrap_or(line)
            .strip_prefix("const ")
        else {
            continue;
        };
        let Some((name, rest)) = declaration.split_once(':') else {
            continue;
        };
        let mut statement = rest.to_owned();
        while !statement.contains(';') {
            match lines.next() {
                Some(more) => statement.push_str(more),
                None => break,
            }
        }
        let last = statement
            .rsplit_once("\"../cuda/")
            .and_then(|(_, after)| after.split_once('"'));
        if let Some((file, _)) = last {
            found.insert(name.trim().to_owned(), format!("../cuda/{file}"));
        }
    }
    found
}

/// `#define NAME VALUE` lines of a CUDA file.
fn defines(source: &str) -> BTreeMap<&str, &str> {
    source
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("#define ")?;
            let (name, value) = rest.split_once(char::is_whitespace)?;
            Some((name, value.trim()))
        })
        .collect()
}

/// Evaluates a `__launch_bounds__` argument: a product of integer literals and
/// `#define`d names, in parentheses or not.
fn evaluate(expr: &str, defines: &BTreeMap<&str, &str>, depth: u32) -> Result<u64, String> {
    if depth > 8 {
        return Err(format!("`{expr}`: #defines nested too deep"));
    }
    expr.trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split('*')
        .map(str::trim)
        .map(|term| match term.parse::<u64>() {
            Ok(value) => Ok(value),
            Err(_) => match defines.get(term) {
                Some(value) => evaluate(value, defines, depth + 1),
                None => Err(format!("`{term}` is neither a number nor a #define")),
            },
        })
        .product()
}

/// The `extern "C" __global__` functions of a CUDA file.
fn cuda_kernels(source: &str) -> Vec<CudaKernel> {
    const HEAD: &str = "extern \"C\" __global__ void";
    let defines = defines(source);
    let mut kernels = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(HEAD) {
        let mut after = rest[at + HEAD.len()..].trim_start();
        let mut launch_bounds = None;
        if let Some(bounds) = after.strip_prefix("__launch_bounds__(") {
            match balanced(bounds, '(', ')') {
                Some((expr, tail)) => {
                    launch_bounds =
                        Some(evaluate(expr, &defines, 0).map_err(|e| format!("{expr}: {e}")));
                    after = tail.trim_start();
                }
                None => launch_bounds = Some(Err("unclosed __launch_bounds__(".to_owned())),
            }
        }
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        kernels.push(CudaKernel {
            name,
            launch_bounds,
        });
        rest = after;
    }
    kernels
}

/// Everything wrong with `declarations_text` against `sources`, one line each.
fn problems(declarations_text: &str, sources: &[(&str, &str)]) -> Vec<String> {
    let declared = match declarations(declarations_text) {
        Ok(declared) => declared,
        Err(e) => return vec![format!("declarations.rs does not parse: {e}")],
    };
    let included = included_sources(declarations_text);
    let mut problems = Vec::new();
    if declared.is_empty() {
        problems.push("declarations.rs declares no kernel".to_owned());
    }
    let mut kernels_by_file = BTreeMap::new();
    for (path, text) in sources {
        kernels_by_file.insert(*path, cuda_kernels(text));
    }
    for declaration in &declared {
        let name = &declaration.rust;
        let Some(threads) = declaration.threads else {
            problems.push(format!(
                "`{name}` declares no launch shape: without `block` or `max_threads` it \
                 promises to be memory-safe for every block"
            ));
            continue;
        };
        let Some(kernels) = included
            .get(&declaration.source)
            .and_then(|path| kernels_by_file.get(path.as_str()))
        else {
            problems.push(format!(
                "`{name}`: its source `{}` is not one of this test's SOURCES",
                declaration.source
            ));
            continue;
        };
        match kernels.iter().find(|k| k.name == declaration.cuda) {
            None => problems.push(format!(
                "`{name}`: `{}` has no `extern \"C\" __global__ void {}`",
                declaration.source, declaration.cuda
            )),
            Some(CudaKernel {
                launch_bounds: None,
                ..
            }) => problems.push(format!(
                "`{}` has no `__launch_bounds__({threads})`, but `{name}` declares {threads} \
                 threads",
                declaration.cuda
            )),
            Some(CudaKernel {
                launch_bounds: Some(Err(e)),
                ..
            }) => problems.push(format!(
                "`{}`: cannot evaluate its __launch_bounds__: {e}",
                declaration.cuda
            )),
            Some(CudaKernel {
                launch_bounds: Some(Ok(bounds)),
                ..
            }) if *bounds != threads => problems.push(format!(
                "`{}` has `__launch_bounds__` of {bounds} threads, but `{name}` declares \
                 {threads}",
                declaration.cuda
            )),
            Some(_) => {}
        }
    }
    for (path, kernels) in &kernels_by_file {
        for kernel in kernels {
            if !declared.iter().any(|d| d.cuda == kernel.name) {
                problems.push(format!(
                    "{path}: `{}` has no declaration in declarations.rs",
                    kernel.name
                ));
            }
        }
    }
    problems
}

#[test]
fn every_kernel_declares_its_shape_and_its_launch_bounds_match() {
    let problems = problems(DECLARATIONS, SOURCES);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let declared = declarations(DECLARATIONS).unwrap_or_default();
    assert!(
        declared.len() >= 15,
        "found only {} declarations: {declared:?}",
        declared.len()
    );
}

#[test]
fn a_mismatch_a_missing_shape_and_a_missing_bound_are_each_found() {
    let wrong_block = DECLARATIONS.replace("block = (64, 4)", "block = (64, 16)");
    let found = problems(&wrong_block, SOURCES);
    assert!(
        found.len() == 1
            && found[0].contains("`transpose_f32` has `__launch_bounds__` of 256 threads")
            && found[0].contains("declares 1024"),
        "{found:?}"
    );

    let no_shape = DECLARATIONS.replacen(
        "#[kernel(cuda = SGEMM_NN, name = \"sgemm_tiled\", block = 256)]",
        "#[kernel(cuda = SGEMM_NN, name = \"sgemm_tiled\")]",
        1,
    );
    let found = problems(&no_shape, SOURCES);
    assert!(
        found.len() == 1 && found[0].contains("`sgemm_tiled_nn` declares no launch shape"),
        "{found:?}"
    );

    let sources: Vec<(&str, String)> = SOURCES
        .iter()
        .map(|(path, text)| {
            (
                *path,
                text.replace("__launch_bounds__(THREADS)", "")
                    .replace("REDUCE_THREADS 256", "REDUCE_THREADS 128"),
            )
        })
        .collect();
    let sources: Vec<(&str, &str)> = sources.iter().map(|(p, t)| (*p, t.as_str())).collect();
    let found = problems(DECLARATIONS, &sources);
    assert!(
        found
            .iter()
            .any(|p| p.contains("`sgemm_tiled` has no `__launch_bounds__(256)`")),
        "{found:?}"
    );
    assert_eq!(
        found
            .iter()
            .filter(|p| p.contains("of 128 threads, but"))
            .count(),
        DECLARATIONS.matches("cuda = REDUCE").count(),
        "{found:?}"
    );

    let undeclared: Vec<(&str, String)> = SOURCES
        .iter()
        .map(|(path, text)| {
            (
                *path,
                format!(
                    "{text}\nextern \"C\" __global__ void __launch_bounds__(32) stray() {{}}\n"
                ),
            )
        })
        .take(1)
        .collect();
    let mut sources: Vec<(&str, &str)> = undeclared.iter().map(|(p, t)| (*p, t.as_str())).collect();
    sources.extend(SOURCES.iter().skip(1).copied());
    let found = problems(DECLARATIONS, &sources);
    assert!(
        found.len() == 1 && found[0].contains("`stray` has no declaration"),
        "{found:?}"
    );
}

/// The SGEMM's forms are named three times: a module's constant (`SGEMM_TN`), the form
/// of its `sgemm_module!(T, N, ..)` (A transposed, B as stored), and the Rust name of the
/// kernel declared on it (`sgemm_tiled_tn`). A mix-up would compute another product
/// (the lengths checked are the same for every form), so the three must agree.
#[test]
fn every_sgemm_form_is_named_alike_by_its_module_its_defines_and_its_kernel() {
    let mut modules = 0;
    for line in DECLARATIONS.lines() {
        let Some((name, form)) = line
            .strip_prefix("pub(crate) ")
            .unwrap_or(line)
            .strip_prefix("const ")
            .and_then(|rest| rest.split_once(": &str = sgemm_module!("))
        else {
            continue;
        };
        let letters: String = form
            .split(',')
            .take(2)
            .flat_map(|letter| letter.trim().chars())
            .collect();
        assert!(
            name.ends_with(&format!("_{letters}")),
            "`{name}` is sgemm_module!({form}"
        );
        modules += 1;
    }
    assert_eq!(
        modules, 8,
        "the SGEMM's modules: one pass and split k, four forms each"
    );

    let declared = declarations(DECLARATIONS).unwrap_or_default();
    let mut kernels = 0;
    for declaration in declared.iter().filter(|d| d.cuda.starts_with("sgemm_")) {
        let Some((_, form)) = declaration.source.rsplit_once('_') else {
            continue;
        };
        if form.chars().all(|c| matches!(c, 'N' | 'T')) {
            assert!(
                declaration
                    .rust
                    .ends_with(&format!("_{}", form.to_lowercase())),
                "`{}` is declared on `{}`",
                declaration.rust,
                declaration.source
            );
            kernels += 1;
        }
    }
    assert_eq!(kernels, 8, "{declared:?}");
}
