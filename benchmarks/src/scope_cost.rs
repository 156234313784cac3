//! stub
use crate::{error::Result, report::Report, Env};
/// stub
pub fn run(_env: &Env, _rep: &mut Report) -> Result<()> { Ok(()) }
