//! Where clients come from: stdin/stdout ([`stdio`]), a Unix socket for shared (daemon) use
//! ([`unix`]), and HTTP ([`http`]).

pub mod http;
pub mod stdio;
pub mod unix;

pub use unix::{Bound, bind, listen};
