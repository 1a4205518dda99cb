//! The operator's side: the admin listener's endpoints (dashboard,
//! `/status`, `/metrics`, health probes, `POST /purge`, `POST /reload`)
//! and the `/status` model they all read.
//!
//! Owns: what an operator sees and asks. Imports: every folder of the
//! request path and below; never [`crate::run`] (a reload is asked through
//! the [`admin::Reload`] trait the run layer implements).

pub(crate) mod admin;
#[cfg(test)]
mod fixture;
pub(crate) mod prometheus;
pub(crate) mod status;
