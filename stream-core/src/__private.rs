//! Items that macro expansions name (`::stream_core::__private::...`). Not public API:
//! anything here may change in any release.

pub use crate::scope::scope;
pub use crate::stream::Stream;
