//! The request path: from a request to an answer, through the cache.

pub mod edge;
pub mod fill;
pub mod growing;
pub mod handle;
pub mod invalidate;
pub mod lookup;
pub mod outcome;
pub mod purge;
pub mod respond;
pub mod state;
pub mod tunnel;
pub mod warm;
