//! The driver layer: the only code that calls cudarc's `result`/`sys` layers directly
//! (being completed by the restructuring of issue 12; today it holds context binding).

pub(crate) mod context;
