//! What `redact` finds and how it replaces it: the built-in secret kinds, the configured
//! patterns, and one pass over a text that replaces every match with `[redacted: KIND]`.

use regex::Regex;
use serde_json::{Map, Value};

/// The built-in kinds, each a pattern. Where only part of a match is the secret (a key after
/// its name), the pattern names that part `secret` and only it is replaced.
const BUILT_IN: &[(&str, &str)] = &[
    // PEM private keys of any algorithm (RSA, EC, OPENSSH, ENCRYPTED, plain PKCS#8), also cut
    // off before their end line: what is there of a key is still a secret.
    (
        "private-key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?s:.*?)(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\z)",
    ),
    // A JSON Web Token: header and payload are base64url JSON objects (`{"` encodes as `eyJ`).
    ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
    // AWS access key ids (long-term AKIA, temporary ASIA, and the other documented prefixes),
    // 16 upper-case letters and digits after the prefix. The ids AWS issues use A-Z and 2-7
    // only, but a key written by hand or by a generator (a test fixture, a leaked example) may
    // have any digit, and a filter that lets those through teaches the wrong lesson.
    ("aws-access-key", r"\b(?:AKIA|ASIA|ABIA|ACCA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b"),
    // An AWS secret access key: 40 base64 characters named as one.
    (
        "aws-secret-key",
        r#"(?i)aws_?(?:secret_?access_?key|secret_?key)["']?\s*[:=]\s*["']?(?P<secret>[A-Za-z0-9/+]{40})\b"#,
    ),
    // Google API keys.
    ("gcp-api-key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
    // The private key id of a Google service-account key file (its key is a PEM, above).
    ("gcp-private-key-id", r#""private_key_id"\s*:\s*"(?P<secret>[0-9a-f]{40})""#),
    // Azure storage account keys and SAS signatures, in connection strings and URLs.
    ("azure-storage-key", r"(?i)AccountKey=(?P<secret>[A-Za-z0-9+/]{86}==)"),
    ("azure-sas", r"[?&]sig=(?P<secret>[A-Za-z0-9%+/=]{40,})"),
    // GitHub tokens: classic (ghp_, gho_, ghu_, ghs_, ghr_) and fine-grained (github_pat_).
    ("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"),
    // Slack tokens and incoming-webhook URLs.
    ("slack-token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("slack-webhook", r"https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+"),
    // Any bearer token, as an Authorization header or text that quotes one.
    ("bearer-token", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)"),
];

/// The names of the built-in kinds, as `[redacted: KIND]` names them and `skip` takes them.
pub fn built_in_kinds() -> impl Iterator<Item = &'static str> {
    BUILT_IN.iter().map(|(k, _)| *k)
}

/// One kind of secret and how to find it.
#[derive(Debug)]
struct Rule {
    kind: String,
    re: Regex,
    /// Whether the pattern names the part to replace `secret`.
    has_secret_group: bool,
}

/// Every rule in force, built-in first, then configured (in the order of their names).
#[derive(Debug)]
pub struct Redactor {
    rules: Vec<Rule>,
    /// All the patterns at once: one pass over a text says which rules to run on it (most texts
    /// hold no secret, and are read once instead of once per rule).
    set: regex::RegexSet,
}

/// The config keys `Redactor::from_config` reads (the plugin's own keys are checked there).
pub const KEYS: &[&str] = &["patterns", "skip"];

impl Redactor {
    /// Reads `patterns` (`{"KIND": "regex", ...}`, added to the built-in kinds) and `skip`
    /// (names of built-in kinds to leave alone).
    pub fn from_config(config: &Map<String, Value>) -> Result<Redactor, String> {
        let mut skip = Vec::new();
        if let Some(v) = config.get("skip") {
            let names = v.as_array().ok_or("`skip` must be an array of kind names")?;
            for n in names {
                let n = n.as_str().ok_or("`skip` must contain kind names (strings)")?;
                if !built_in_kinds().any(|k| k == n) {
                    let known: Vec<_> = built_in_kinds().collect();
                    return Err(format!("`skip`: no built-in kind `{n}` (they are {})", known.join(", ")));
                }
                skip.push(n);
            }
        }
        let mut rules = Vec::new();
        for (kind, pattern) in BUILT_IN.iter().filter(|(k, _)| !skip.contains(k)) {
            rules.push(rule(kind, pattern).map_err(|e| format!("internal: built-in `{kind}`: {e}"))?);
        }
        if let Some(v) = config.get("patterns") {
            let table = v.as_object().ok_or("`patterns` must be an object of kind -> regular expression")?;
            for (kind, pattern) in table {
                if kind.is_empty() || !kind.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                    return Err(format!("patterns.{kind}: a kind is named with ASCII letters, digits, `-` and `_`"));
                }
                let pattern = pattern
                    .as_str()
                    .ok_or_else(|| format!("patterns.{kind} must be a regular expression (a string)"))?;
                let r = rule(kind, pattern).map_err(|e| format!("patterns.{kind}: {e}"))?;
                if r.re.is_match("") {
                    return Err(format!("patterns.{kind} matches the empty text, so it would match everywhere"));
                }
                rules.push(r);
            }
        }
        let set = regex::RegexSetBuilder::new(rules.iter().map(|r| r.re.as_str()))
            .size_limit(1 << 24)
            .build()
            .map_err(|e| format!("the patterns together are too large to run ({e}); use fewer or simpler ones"))?;
        Ok(Redactor { rules, set })
    }

    /// `text` with every secret replaced, and the kinds found (one entry per replacement, in
    /// order); `None` when there was none. The same text always gives the same answer.
    pub fn redact(&self, text: &str) -> Option<(String, Vec<&str>)> {
        let mut found = self.spans(text);
        if found.is_empty() {
            return None;
        }
        // Earliest first; of two starting together, the longer (a PEM over the base64 in it).
        found.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)).then(a.rule.cmp(&b.rule)));
        let mut out = String::with_capacity(text.len());
        let (mut at, mut kinds) = (0, Vec::new());
        for s in found {
            if s.start < at {
                continue; // inside (or overlapping) a secret replaced already
            }
            let kind = self.rules[s.rule].kind.as_str();
            out.push_str(&text[at..s.start]);
            out.push_str("[redacted: ");
            out.push_str(kind);
            out.push(']');
            kinds.push(kind);
            at = s.end;
        }
        out.push_str(&text[at..]);
        Some((out, kinds))
    }

    fn spans(&self, text: &str) -> Vec<Span> {
        let mut found = Vec::new();
        for i in self.set.matches(text).iter() {
            let r = &self.rules[i];
            if r.has_secret_group {
                for c in r.re.captures_iter(text) {
                    if let Some(m) = c.name("secret").filter(|m| !m.is_empty()) {
                        found.push(Span { start: m.start(), end: m.end(), rule: i });
                    }
                }
            } else {
                found.extend(r.re.find_iter(text).filter(|m| !m.is_empty()).map(|m| Span {
                    start: m.start(),
                    end: m.end(),
                    rule: i,
                }));
            }
        }
        found
    }
}

struct Span {
    start: usize,
    end: usize,
    rule: usize,
}

fn rule(kind: &str, pattern: &str) -> Result<Rule, String> {
    let re = regex::RegexBuilder::new(pattern)
        // A hostile or careless pattern is refused at init rather than eating the deadline.
        .size_limit(1 << 20)
        .build()
        .map_err(|e| e.to_string())?;
    let has_secret_group = re.capture_names().any(|n| n == Some("secret"));
    Ok(Rule { kind: kind.to_string(), re, has_secret_group })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn redactor(config: Value) -> Redactor {
        Redactor::from_config(config.as_object().unwrap()).unwrap()
    }

    fn redacted(text: &str) -> String {
        redactor(json!({})).redact(text).map(|(t, _)| t).unwrap_or_else(|| text.to_string())
    }

    // Fake secrets of the documented shapes (none of them was ever issued).
    const AWS_ID: &str = "AKIAIOSFODNN7EXAMPLE";
    const AWS_SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    #[test]
    fn each_built_in_kind_is_found_and_named() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        let azure_key = format!("{}==", "A".repeat(86));
        let cases = [
            (format!("key {AWS_ID} here"), "key [redacted: aws-access-key] here".to_string()),
            // Digits outside AWS's own alphabet (2-7), as a hand-made key has them.
            ("id: AKIAIEQH524YNG5BY1A2".to_string(), "id: [redacted: aws-access-key]".to_string()),
            (
                format!("aws_secret_access_key = {AWS_SECRET}\n"),
                "aws_secret_access_key = [redacted: aws-secret-key]\n".to_string(),
            ),
            ("AIzaSyA-1234567890abcdefghijklmnopqrstu".to_string(), "[redacted: gcp-api-key]".to_string()),
            (
                format!(r#""private_key_id": "{}","#, "0123456789abcdef".repeat(3).get(..40).unwrap()),
                r#""private_key_id": "[redacted: gcp-private-key-id]","#.to_string(),
            ),
            (
                format!("DefaultEndpointsProtocol=https;AccountName=x;AccountKey={azure_key};"),
                "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=[redacted: azure-storage-key];".to_string(),
            ),
            (
                format!("https://x.blob.core.windows.net/c?sv=2022&sig={}", "a".repeat(44)),
                "https://x.blob.core.windows.net/c?sv=2022&sig=[redacted: azure-sas]".to_string(),
            ),
            (format!("token ghp_{}", "a1B2".repeat(9)), "token [redacted: github-token]".to_string()),
            (format!("github_pat_{}", "x".repeat(30)), "[redacted: github-token]".to_string()),
            ("xoxb-1234567890-abcdefghij".to_string(), "[redacted: slack-token]".to_string()),
            (
                "https://hooks.slack.com/services/T000/B000/XXXXXXXX".to_string(),
                "[redacted: slack-webhook]".to_string(),
            ),
            (
                "Authorization: Bearer abcdefghijklmnop1234".to_string(),
                "Authorization: Bearer [redacted: bearer-token]".to_string(),
            ),
            (format!("jwt={jwt};"), "jwt=[redacted: jwt];".to_string()),
        ];
        for (text, want) in cases {
            assert_eq!(redacted(&text), want, "{text}");
        }
    }

    #[test]
    fn a_private_key_goes_whole_and_a_cut_one_to_the_end() {
        let pem =
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nAKIAIOSFODNN7EXAMPLE\n-----END RSA PRIVATE KEY-----";
        assert_eq!(redacted(&format!("a\n{pem}\nb")), "a\n[redacted: private-key]\nb");
        assert_eq!(redacted("x -----BEGIN PRIVATE KEY-----\nMIIE"), "x [redacted: private-key]");
        // A public key or certificate is not a secret.
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----";
        assert_eq!(redacted(cert), cert);
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        for text in [
            "",
            "the AKIA prefix alone",
            "AKIAIOSFODNN7EXAMPL",
            "bearer of bad news",
            "eyJ is how JSON starts in base64",
            "ghp_short",
            "a plain sentence about keys and tokens",
        ] {
            assert_eq!(redactor(json!({})).redact(text).map(|(t, _)| t), None, "{text}");
        }
    }

    #[test]
    fn a_bearer_jwt_is_replaced_once() {
        let text = "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijk";
        let r = redactor(json!({}));
        let (out, kinds) = r.redact(text).unwrap();
        assert_eq!(kinds.len(), 1, "{out}");
        assert!(out.starts_with("Bearer [redacted: "), "{out}");
    }

    #[test]
    fn configured_patterns_add_kinds_and_skip_removes_built_in_ones() {
        let r = redactor(json!({
            "patterns": {"employee-id": "EMP-[0-9]{6}", "api-key": "api_key=(?P<secret>[a-z0-9]{12})"},
            "skip": ["aws-access-key"]
        }));
        let (out, kinds) = r.redact(&format!("EMP-123456 api_key=abcdefabcdef {AWS_ID}")).unwrap();
        assert_eq!(out, format!("[redacted: employee-id] api_key=[redacted: api-key] {AWS_ID}"));
        assert_eq!(kinds, ["employee-id", "api-key"]);
    }

    #[test]
    fn the_same_text_gives_the_same_answer() {
        let r = redactor(json!({"patterns": {"a": "k[0-9]+", "b": "k1[0-9]"}}));
        let first = r.redact("k123 k12 k1").unwrap();
        for _ in 0..10 {
            assert_eq!(r.redact("k123 k12 k1").unwrap(), first);
        }
        assert_eq!(first.0, "[redacted: a] [redacted: a] [redacted: a]");
    }

    #[test]
    fn a_bad_config_is_named() {
        for (config, says) in [
            (json!({"patterns": {"x": "("}}), "patterns.x"),
            (json!({"patterns": {"x": "a*"}}), "empty text"),
            (json!({"patterns": {"x y": "a"}}), "ASCII letters"),
            (json!({"patterns": ["a"]}), "must be an object"),
            (json!({"skip": ["aws"]}), "aws-access-key"),
        ] {
            let e = Redactor::from_config(config.as_object().unwrap()).unwrap_err();
            assert!(e.contains(says), "{config}: {e}");
        }
    }
}
