//! [`scope_all!`](crate::scope_all): one block of work over several streams, possibly of
//! several devices, each with a scope of its own.

/// Opens one scope per stream, on one device or several, runs the body with all of
/// them, and ends with every stream's work done (and no device synchronised).
///
/// `scope_all!([&s0, &s1, &s2], |a, b, c| body)` is
/// `scope(&s0, |a| a.fork(&s1, (), |b, ()| a.fork(&s2, (), |c, ()| body)))`: the
/// first stream's scope is the parent; the others are forks of it, started after
/// nothing (the parent has enqueued nothing yet) and joined into it by events when the
/// body ends, so the one synchronisation of the first stream at the end covers them
/// all. Each scope has its own brand: memory moves between them only by
/// [`Scope::hand_off`](crate::Scope::hand_off) (ordered by an event), or by a further
/// [`fork`](crate::Scope::fork) that lends it. A stream of another device gets a scope on
/// that device, its context bound for the body (see [`Scope::fork`](crate::Scope::fork));
/// devices need peer access only when memory crosses between them.
///
/// The body returns `Result<T, E>` with `E: From<Error>`, like [`scope`](fn@crate::scope)'s
/// closure. It is a macro rather than a function because each scope needs a brand of its
/// own, which is one closure parameter lifetime per stream: a slice of scopes would share
/// one brand, and a buffer of one stream could then be used on another unordered.
///
/// ```no_run
/// use stream_core::{scope_all, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let (d0, d1) = (Device::new(0)?, Device::new(1)?);
/// let (s0, s1) = (d0.new_stream()?, d1.new_stream()?);
/// let (input, mut out0, mut out1) = (vec![1f32; 1024], vec![0f32; 1024], vec![0f32; 1024]);
/// scope_all!([&s0, &s1], |a, b| {
///     let x = a.upload(&input)?;               // on GPU 0
///     let y = b.upload(&input)?;               // on GPU 1, at the same time
///     let _ = a.copy_to_host(&x, &mut out0)?;
///     let _ = b.copy_to_host(&y, &mut out1)?;
///     Ok::<_, Error>(())
/// })?;                                         // both streams are done here
/// # Ok(()) }
/// ```
///
/// Each scope keeps its brand: a buffer of one used in another does not compile (see
/// `ui-tests/tests/ui/fork/scope-all-buffer-of-a-sibling.rs`):
///
/// ```compile_fail
/// # use stream_core::{scope_all, Error, Stream};
/// # fn f(s0: &Stream, s1: &Stream) -> Result<(), Error> {
/// scope_all!([s0, s1], |a, b| {
///     let x = a.alloc_zeroed::<f32>(16)?;
///     let mut y = b.alloc::<f32>(16)?;
///     b.copy_device(&x, &mut y)?; // error: `x` is `a`'s
///     Ok::<_, Error>(())
/// })
/// # }
/// ```
#[macro_export]
macro_rules! scope_all {
    ([$first:expr $(, $stream:expr)* $(,)?], |$parent:ident $(, $child:ident)* $(,)?| $body:expr) => {
        $crate::scope($first, |$parent| {
            $crate::__scope_all_forks!($parent; [$($stream),*]; [$($child),*]; $body)
        })
    };
}

/// The forks of [`scope_all!`](crate::scope_all), one per stream after the first.
#[doc(hidden)]
#[macro_export]
macro_rules! __scope_all_forks {
    ($parent:ident; []; []; $body:expr) => {
        $body
    };
    ($parent:ident; [$stream:expr $(, $rest:expr)*]; [$child:ident $(, $children:ident)*]; $body:expr) => {
        $parent.fork($stream, (), |$child, ()| {
            $crate::__scope_all_forks!($parent; [$($rest),*]; [$($children),*]; $body)
        })
    };
    ($parent:ident; [$($stream:expr),+]; []; $body:expr) => {
        ::core::compile_error!(
            "scope_all!: more streams than scope names; name one scope per stream, \
             e.g. scope_all!([&s0, &s1], |a, b| ...)"
        )
    };
    ($parent:ident; []; [$($child:ident),+]; $body:expr) => {
        ::core::compile_error!(
            "scope_all!: more scope names than streams; name one scope per stream, \
             e.g. scope_all!([&s0, &s1], |a, b| ...)"
        )
    };
}
