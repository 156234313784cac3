//! Compile-fail and compile-pass tests of stream_core, run with trybuild (`tests/ui.rs`).
