//! File names that are not UTF-8 in JSON records.
//!
//! Linux file names are bytes; JSON strings are Unicode. A record keeps every path in its `path` field as text
//! (invalid bytes shown as U+FFFD, for people) and, only when the name is not valid UTF-8, the exact bytes in
//! `path_hex` (lowercase hex). Readers use `path_hex` when it is present, so such files are kept, not dropped.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// `(text, hex)`: the path as text and, when it is not valid UTF-8, its bytes in hex.
pub fn encode(p: &OsStr) -> (String, Option<String>) {
    match p.to_str() {
        Some(s) => (s.to_string(), None),
        None => (p.to_string_lossy().into_owned(), Some(to_hex(p.as_bytes()))),
    }
}

/// Lowercase hex of `b`.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of a hex string; `None` when it is not an even number of hex digits (a sign, as `from_str_radix`
/// would take, is not one).
pub fn from_hex(h: &str) -> Option<Vec<u8>> {
    if !h.len().is_multiple_of(2) || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..h.len()).step_by(2).map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok()).collect()
}

/// A `path_hex` that is not the hexadecimal of a file name (odd length, not hex, or a NUL byte).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("path_hex of '{text}': '{hex}' is not the hex of a file name")]
pub struct BadPathHex {
    pub text: String,
    pub hex: String,
}

/// The path a record means: `hex` when present, else `text`. An invalid `hex` is an error naming it.
pub fn decode(text: &str, hex: Option<&str>) -> Result<PathBuf, BadPathHex> {
    match hex {
        None => Ok(PathBuf::from(text)),
        Some(h) => from_hex(h)
            .filter(|b| !b.contains(&0))
            .map(|b| PathBuf::from(OsString::from_vec(b)))
            .ok_or_else(|| BadPathHex { text: text.to_string(), hex: h.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_names_have_no_hex_and_others_round_trip() {
        assert_eq!(encode(OsStr::new("a/b.txt")), ("a/b.txt".to_string(), None));
        let raw = OsStr::from_bytes(b"dir/na\xffme");
        let (text, hex) = encode(raw);
        assert_eq!(text, "dir/na\u{fffd}me");
        assert_eq!(hex.as_deref(), Some("6469722f6e61ff6d65"));
        assert_eq!(decode(&text, hex.as_deref()).unwrap().as_os_str(), raw);
        assert!(decode("x", Some("zz")).is_err());
        assert!(decode("x", Some("610")).is_err());
        assert!(decode("x", Some("+f")).is_err(), "a sign is not a hex digit");
        assert_eq!(from_hex("+f"), None);
        assert_eq!(from_hex("é1"), None);
        assert!(decode("x", Some("6100")).is_err(), "a NUL byte is no file name");
    }
}
