//! A value that must never be shown: tokens, client secrets, authorization codes.

/// A secret string. Debug shows `<hidden>` and there is no Display: the only way to the value is
/// [`Secret::expose`], at the one place it goes on the wire or into the store.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for a header, a form field or the token file.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<hidden>")
    }
}

impl serde::Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// `n` random bytes from the OS, base64url without padding (PKCE verifiers, `state`).
pub(crate) fn random_token(n: usize) -> String {
    use base64::Engine;
    let mut buf = vec![0u8; n];
    // The OS has no entropy to give only on a broken system; nothing secure can be made there.
    getrandom::fill(&mut buf).expect("the OS random source failed");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(buf)
}
