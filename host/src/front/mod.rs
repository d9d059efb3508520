//! The Streamable HTTP front of the daemon (`/mcp/NAME`): who may reach it ([`guard`]) and with
//! which bearer token ([`token`]).

pub mod guard;
pub mod token;
