//! Inputs `#[gpu_scope]` rejects: each must produce exactly the expected
//! errors, in source order, each spanned on the offending token and with a
//! message that says what is expected, and the output must still hold the
//! user's item (STYLE.md rule 3).

use super::expand_gpu_scope;
use super::{assert_well_formed, lex, messages};

/// One expected error: the source text its span covers (`None` when there is
/// no token to point at) and words its message contains.
type Expected = (Option<&'static str>, &'static str);

/// A rejected input: the attribute's arguments, the item, the errors.
pub(super) struct Case {
    pub(super) args: &'static str,
    pub(super) item: &'static str,
    pub(super) errors: &'static [Expected],
}

/// A function `#[gpu_scope]` accepts, for the cases about the arguments.
const GOOD_FN: &str = "fn f(s: &Scope) -> Result<()> { Ok(()) }";

/// Shorthand for a case with arguments and a correct function.
const fn args(args: &'static str, errors: &'static [Expected]) -> Case {
    Case {
        args,
        item: GOOD_FN,
        errors,
    }
}

/// Shorthand for a case with no arguments.
const fn item(item: &'static str, errors: &'static [Expected]) -> Case {
    Case {
        args: "",
        item,
        errors,
    }
}

const ONLY_ARG: &str = "the only valid argument is `crate = path`";
const NOT_A_FN: &str = "can only be applied to a function with a body";
const SCOPE_FIRST: &str =
    "expects the first parameter (after `self`) to be the scope, written `name: &Scope`";
const RESULT: &str =
    "must return a `Result<T, E>` with `E: From<stream_core::Error>`, because the final stream synchronisation can fail";

/// Every rejected input, grouped by what is wrong.
pub(super) const CASES: &[Case] = &[
    // The attribute's arguments.
    args("foo", &[(Some("foo"), "does not take an argument `foo`")]),
    args("foo", &[(Some("foo"), ONLY_ARG)]),
    args(
        "foo = bar, baz(1)",
        &[(Some("foo = bar"), ONLY_ARG), (Some("baz(1)"), "argument `baz`")],
    ),
    args("krate = x", &[(Some("krate = x"), "argument `krate`")]),
    args("crate", &[(Some("crate"), "expects a path after `crate`")]),
    args("crate =", &[(Some("="), "expects a path after `crate =`")]),
    args("crate = ,", &[(Some("="), "expects a path after `crate =`")]),
    args("crate = 1", &[(Some("1"), "expects a path after `crate =`")]),
    args(
        "crate = \"my_lib\"",
        &[(Some("\"my_lib\""), "path without quotes")],
    ),
    args("crate = a::", &[(Some("a::"), "expects a path after `crate =`")]),
    args(
        "crate = a::<T>",
        &[(Some("a::<T>"), "expects a path after `crate =`")],
    ),
    args("crate: a", &[(Some(":"), "expects `=` after `crate`")]),
    args("crate(a)", &[(Some("(a)"), "expects `=` after `crate`")]),
    args(
        "crate = a, crate = b",
        &[(Some("crate"), "takes the `crate` argument once")],
    ),
    args("crate = a b", &[(Some("b"), "separated by `,`")]),
    args("crate = a; b", &[(Some(";"), "separated by `,`")]),
    args(", crate = a", &[(Some(","), "expects an argument before this `,`")]),
    args("crate = a,,", &[(Some(","), "expects an argument before this `,`")]),
    args(
        "crate = 1, foo, crate = a, crate = b",
        &[
            (Some("1"), "expects a path"),
            (Some("foo"), ONLY_ARG),
            (Some("crate"), "once"),
        ],
    ),
    // Items that are not functions with a body.
    item("", &[(None, "found nothing")]),
    item("struct S;", &[(Some("struct S"), "found a struct")]),
    item(
        "pub(crate) struct S { x: u32 }",
        &[(Some("struct S"), "found a struct")],
    ),
    item("#[derive(Debug)] enum E { A }", &[(Some("enum E"), "found an enum")]),
    item("union U { a: u32 }", &[(Some("union U"), "found a union")]),
    item("const X: u32 = 1;", &[(Some("const X"), "found a const")]),
    item("static X: u32 = 1;", &[(Some("static X"), "found a static")]),
    item("impl Foo { fn f(&self) {} }", &[(Some("impl Foo"), "found an impl block")]),
    item("trait T { fn f(&self); }", &[(Some("trait T"), "found a trait")]),
    item("type A = B;", &[(Some("type A"), "found a type alias")]),
    item("mod m {}", &[(Some("mod m"), "found a module")]),
    item("use a::b;", &[(Some("use"), "found a `use` item")]),
    item("extern crate foo;", &[(Some("extern crate foo"), "`extern crate`")]),
    item("extern \"C\" { fn g(); }", &[(Some("extern \"C\""), "an `extern` block")]),
    item("macro_rules! m { () => {} }", &[(Some("macro_rules"), "a macro invocation")]),
    item(
        "fn f(s: &Scope) -> Result<()>;",
        &[(Some("fn f"), "found a function declaration without a body")],
    ),
    item(
        "fn f(s: &Scope) -> Result<()> = 1;",
        &[(Some("fn f(s: &Scope) -> Result<()>"), NOT_A_FN)],
    ),
    item("|s| s", &[(Some("|"), "found something that is not an item")]),
    item("move |s: &Scope| { Ok(()) }", &[(Some("move"), NOT_A_FN)]),
    item("1 + 2", &[(Some("1"), NOT_A_FN)]),
    item("pub", &[(Some("pub"), NOT_A_FN)]),
    item("#[inline]", &[(Some("#"), NOT_A_FN)]),
    item(
        "fn f(s: &Scope) -> Result<()> {} fn g() {}",
        &[(Some("fn g() {}"), "found more tokens after its body")],
    ),
    // Signatures that do not parse (only an IDE sends these).
    item("fn", &[(None, "could not parse this function")]),
    item(
        "fn (s: &Scope) -> Result<()> {}",
        &[(Some("("), "could not parse this function: expected identifier")],
    ),
    item(
        "fn f(s: &Scope x) -> Result<()> {}",
        &[(Some("x"), "could not parse this function: expected `,`")],
    ),
    // Qualifiers.
    item(
        "async fn f(s: &Scope) -> Result<()> {}",
        &[(Some("async"), "cannot be applied to an `async fn`: a scope synchronises its stream before returning, remove `async`")],
    ),
    item(
        "pub const fn f(s: &Scope) -> Result<()> {}",
        &[(Some("const"), "cannot be applied to a `const fn`")],
    ),
    item(
        "extern \"C\" fn f(s: &Scope) -> Result<()> {}",
        &[(Some("extern \"C\""), "cannot be applied to an `extern \"C\"` function")],
    ),
    item(
        "extern fn f(s: &Scope) -> Result<()> {}",
        &[(Some("extern"), "cannot be applied to an `extern` function")],
    ),
    item(
        "unsafe extern \"C\" fn f(s: &Scope, ...) -> Result<()> {}",
        &[
            (Some("extern \"C\""), "remove `extern \"C\"`"),
            (Some("..."), "cannot be applied to a variadic function"),
        ],
    ),
    // The scope parameter.
    item(
        "fn f() -> Result<()> {}",
        &[(Some("()"), "but this function has none: add `s: &Scope`")],
    ),
    item("fn f(&self) -> Result<()> {}", &[(Some("(&self)"), SCOPE_FIRST)]),
    item(
        "fn f(self: Box<Self>) -> Result<()> {}",
        &[(Some("(self: Box<Self>)"), SCOPE_FIRST)],
    ),
    item(
        "fn f(s: Scope) -> Result<()> {}",
        &[(Some("Scope"), "take the scope by reference, `&Scope`")],
    ),
    item(
        "fn f(s: stream_core::Scope<'_, '_>) -> Result<()> {}",
        &[(Some("stream_core::Scope<'_, '_>"), "by reference")],
    ),
    item(
        "fn f(s: &mut Scope) -> Result<()> {}",
        &[(Some("mut"), "use `&Scope` instead of `&mut Scope`")],
    ),
    item(
        "fn f(&self, s: &'a mut Scope<'a, 'b>) -> Result<()> {}",
        &[(Some("mut"), "instead of `&mut Scope`")],
    ),
    item(
        "fn f(x: u32, s: &Scope) -> Result<()> {}",
        &[(Some("x: u32"), "move the `&Scope` parameter to the front")],
    ),
    item("fn f(x: u32) -> Result<()> {}", &[(Some("x: u32"), SCOPE_FIRST)]),
    item(
        "fn f(s: &dyn Scope) -> Result<()> {}",
        &[(Some("s: &dyn Scope"), SCOPE_FIRST)],
    ),
    item("fn f(s: &&Scope) -> Result<()> {}", &[(Some("s: &&Scope"), SCOPE_FIRST)]),
    item(
        "fn f(s: *const Scope) -> Result<()> {}",
        &[(Some("s: *const Scope"), SCOPE_FIRST)],
    ),
    item(
        "fn f(s: &<T as X>::Scope) -> Result<()> {}",
        &[(Some("s: &<T as X>::Scope"), SCOPE_FIRST)],
    ),
    item(
        "fn f(s: &[Scope]) -> Result<()> {}",
        &[(Some("s: &[Scope]"), SCOPE_FIRST)],
    ),
    // The return type.
    item(
        "fn f(s: &Scope) {}",
        &[(Some("f"), "add a return type such as `-> stream_core::Result<()>`")],
    ),
    item("fn f(s: &Scope) -> u32 { 1 }", &[(Some("u32"), RESULT)]),
    item(
        "fn f(s: &Scope) -> Option<Result<()>> { None }",
        &[(Some("Option<Result<()>>"), RESULT)],
    ),
    item(
        "fn f(s: &Scope) -> impl Future<Output = Result<()>> { todo!() }",
        &[(Some("impl Future<Output = Result<()>>"), RESULT)],
    ),
    item(
        "fn f(s: &Scope) -> <T as X>::Result { todo!() }",
        &[(Some("<T as X>::Result"), RESULT)],
    ),
    item(
        "fn f(s: &Scope) -> &Result<()> { todo!() }",
        &[(Some("&Result<()>"), RESULT)],
    ),
    // Several mistakes are reported together, in source order.
    item(
        "async fn f() {}",
        &[(Some("async"), "`async fn`"), (Some("()"), SCOPE_FIRST), (Some("f"), RESULT)],
    ),
    item(
        "const async unsafe extern \"C\" fn f(x: u8, ...) -> u8 {}",
        &[
            (Some("const"), "`const fn`"),
            (Some("async"), "`async fn`"),
            (Some("extern \"C\""), "`extern \"C\"` function"),
            (Some("x: u8"), SCOPE_FIRST),
            (Some("..."), "variadic"),
            (Some("u8"), RESULT),
        ],
    ),
    Case {
        args: "foo",
        item: "struct S;",
        errors: &[(Some("foo"), ONLY_ARG), (Some("struct S"), "found a struct")],
    },
    Case {
        args: "crate = 1",
        item: "async fn f(s: &mut Scope) -> Result<()> {}",
        errors: &[
            (Some("1"), "expects a path after `crate =`"),
            (Some("async"), "`async fn`"),
            (Some("mut"), "instead of `&mut Scope`"),
        ],
    },
];

#[test]
fn every_rejection_points_at_the_offending_token_and_says_what_is_expected() {
    for case in CASES {
        let context = format!("#[gpu_scope({})] {}", case.args, case.item);
        let Err(rejected) = expand_gpu_scope(lex(case.args), lex(case.item)) else {
            panic!("accepted: {context}");
        };
        let errors: Vec<_> = rejected.error().clone().into_iter().collect();
        assert_eq!(
            errors.len(),
            case.errors.len(),
            "{context}: got {:#?}",
            messages(&rejected)
        );
        for (error, (span, words)) in errors.iter().zip(case.errors) {
            let message = error.to_string();
            assert_well_formed(&message);
            assert!(
                message.contains(words),
                "{context}: `{message}` does not contain `{words}`"
            );
            assert_eq!(
                error.span().source_text().as_deref(),
                *span,
                "{context}: `{message}` points at the wrong tokens"
            );
        }
    }
}

#[test]
fn rejected_output_is_the_item_unchanged_followed_by_the_errors() {
    for case in CASES {
        let item = lex(case.item);
        let Err(rejected) = expand_gpu_scope(lex(case.args), item.clone()) else {
            panic!("accepted: {}", case.item);
        };
        let output = rejected.into_compile_error().to_string();
        assert!(
            output.starts_with(&item.to_string()),
            "{}: the item is not kept: {output}",
            case.item
        );
        let rest = &output[item.to_string().len()..];
        assert_eq!(
            rest.matches("compile_error").count(),
            case.errors.len(),
            "{}: {output}",
            case.item
        );
    }
}

#[test]
fn there_are_at_least_thirty_rejected_inputs() {
    assert!(CASES.len() >= 30, "{}", CASES.len());
}

#[test]
fn a_scope_parameter_later_is_only_hinted_when_there_is_one() {
    let Err(rejected) = expand_gpu_scope(lex(""), lex("fn f(x: u32, y: u32) -> Result<()> {}"))
    else {
        panic!("accepted");
    };
    let message = rejected.error().to_string();
    assert!(!message.contains("move"), "{message}");
}
