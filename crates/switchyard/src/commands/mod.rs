//! One module per `switchyard` subcommand; main.rs parses the arguments and calls into these.

pub mod audit;
pub mod calls;
pub mod check;
pub mod connect;
pub mod daemon;
#[cfg(unix)]
pub mod demo;
pub mod lines;
pub mod login;
pub mod run;
pub mod status;
pub mod stop;
