//! Identifiers shared by every stage, defined below all of them so no stage imports upward.

/// Identifies a session inside the router (never sent to anyone).
pub type SessionId = u64;

pub use switchyard_os::random::random;
