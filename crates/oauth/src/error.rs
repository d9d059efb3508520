//! What a failed sign-in reports: the step that failed and why, never a token or a secret.

/// The step of a sign-in that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The whole of it (a bound on all the steps).
    SignIn,
    Discovery,
    Registration,
    Authorization,
    Token,
    Refresh,
    StepUp,
    Store,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::SignIn => "signing in",
            Step::Discovery => "finding the authorization server",
            Step::Registration => "registering switchyard as a client",
            Step::Authorization => "the browser sign-in",
            Step::Token => "exchanging the code for a token",
            Step::Refresh => "refreshing the token",
            Step::StepUp => "asking for more scopes",
            Step::Store => "saving the tokens",
        })
    }
}

/// A failed sign-in: its step and cause (which never hold a token, a code or a secret).
#[derive(Debug, Clone)]
pub struct Error {
    pub step: Step,
    pub cause: String,
    /// Nobody signed in within the time allowed: a `switchyard login` is what helps.
    pub timed_out: bool,
    /// The OAuth error code a token endpoint answered with (`invalid_client`, `invalid_grant`).
    pub oauth_error: Option<String>,
}

impl Error {
    pub fn new(step: Step, cause: impl Into<String>) -> Error {
        Error { step, cause: cause.into(), timed_out: false, oauth_error: None }
    }

    /// The token endpoint does not know the client: its registration is gone (servers expire
    /// dynamic registrations, and some forget them when they restart).
    pub(crate) fn unknown_client(&self) -> bool {
        self.oauth_error.as_deref() == Some("invalid_client")
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.step, self.cause)
    }
}

impl std::error::Error for Error {}
