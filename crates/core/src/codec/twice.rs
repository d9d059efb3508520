//! A key given twice in any object of a JSON text. Parsers disagree on which of the two values
//! counts (serde_json and JavaScript take the last, some take the first), so a value a policy
//! plugin judged may not be the one the server acts on.

use std::fmt;

use serde::Deserializer;
use serde::de::{DeserializeSeed, Error, MapAccess, SeqAccess, Visitor};

/// The first key given twice in one object of `json` (compared as decoded, so `"a"` and
/// `"\u0061"` are the same key), at any depth. None also when `json` is not JSON that can be
/// read (too deep, malformed): whoever reads it finds that out itself.
pub fn key_given_twice(json: &str) -> Option<String> {
    let mut de = serde_json::Deserializer::from_str(json);
    match Twice.deserialize(&mut de) {
        // serde_json ends the message with where it was: " at line L column C".
        Err(e) => e
            .to_string()
            .strip_prefix(MARK)
            .map(|rest| rest.rsplit_once(" at line ").map_or(rest, |(k, _)| k).to_string()),
        Ok(()) => None,
    }
}

/// Starts the error that carries the key out of the visitor.
const MARK: &str = "key given twice: ";

/// Walks a value, checking each object's keys.
struct Twice;

impl<'de> DeserializeSeed<'de> for Twice {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Twice {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i128<E>(self, _: i128) -> Result<(), E> {
        Ok(())
    }
    fn visit_u128<E>(self, _: u128) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Twice)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Most objects have a handful of keys: a scan of those seen beats hashing them.
        let mut seen: Vec<String> = Vec::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if seen.iter().any(|k| *k == key) {
                return Err(A::Error::custom(format!("{MARK}{key}")));
            }
            seen.push(key.into_owned());
            map.next_value_seed(Twice)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::key_given_twice;

    #[test]
    fn a_key_given_twice_at_any_depth_is_found_as_decoded() {
        assert_eq!(key_given_twice(r#"{"path":"/etc/passwd","path":"/tmp/ok"}"#).as_deref(), Some("path"));
        assert_eq!(key_given_twice(r#"{"a":[1,{"b":{"c":1,"c":2}}]}"#).as_deref(), Some("c"));
        assert_eq!(key_given_twice(r#"{"path":1,"p\u0061th":2}"#).as_deref(), Some("path"));
        // A key with " at line " in it is still named whole.
        assert_eq!(key_given_twice(r#"{"x at line y":1,"x at line y":2}"#).as_deref(), Some("x at line y"));
    }

    #[test]
    fn keys_given_once_or_text_that_is_no_json_find_nothing() {
        assert_eq!(key_given_twice(r#"{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}"#), None);
        assert_eq!(key_given_twice(r#"[1,"two",null,true,1.5,{}]"#), None);
        assert_eq!(key_given_twice(r#"{"a":"#), None);
        assert_eq!(key_given_twice(&format!("{}1{}", "[".repeat(200), "]".repeat(200))), None);
    }
}
