//! YAML text to typed values with serde-saphyr, every error mapped to file, line, column and field path.
use std::path::Path;

use serde::de::DeserializeOwned;

use crate::error::{ChaosError, Result};

/// Parses YAML text into `T`, mapping every error to file, line, column, field path and message.
pub fn parse_yaml<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T> {
    let mut field = String::new();
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    let res =
        serde_saphyr::with_deserializer_from_str_with_options(
            text,
            options,
            |de| match serde_path_to_error::deserialize::<_, T>(de) {
                Ok(v) => Ok(v),
                Err(e) => {
                    field = e.path().to_string();
                    Err(e.into_inner())
                }
            },
        );
    res.map_err(|e| {
        let (line, column) = e.location().map(|l| (l.line(), l.column())).unwrap_or((0, 0));
        let message = clean_message(&e.to_string());
        let field = field_path(&field, &message);
        ChaosError::Yaml { path: path.to_path_buf(), line, column, field, message }
    })
}

/// The dotted field path of an error: serde-saphyr's span wrappers add `.value` segments, which are
/// dropped; a missing field is named after its parent.
fn field_path(raw: &str, message: &str) -> String {
    let mut p = raw.to_string();
    let keep_tail = regex::Regex::new(r"checks\[\d+\]\.value$").expect("static regex");
    let tail = if keep_tail.is_match(&p) {
        p.truncate(p.len() - ".value".len());
        ".value"
    } else {
        ""
    };
    p = p.replace(".value.", ".").replace(".value[", "[");
    if let Some(stripped) = p.strip_suffix(".value") {
        p = stripped.to_string();
    }
    if p == "." {
        p.clear();
    }
    p.push_str(tail);
    let missing = regex::Regex::new(r"missing field `([^`]+)`").expect("static regex");
    if let Some(c) = missing.captures(message) {
        if p.is_empty() {
            p = c[1].to_string();
        } else {
            p = format!("{p}.{}", &c[1]);
        }
    }
    if p.is_empty() {
        "(document)".to_string()
    } else {
        p
    }
}

/// serde-saphyr appends " at line X column Y" to some messages; the location is reported separately.
fn clean_message(msg: &str) -> String {
    let first = msg.lines().next().unwrap_or(msg).trim();
    let re = regex::Regex::new(r"\s*(at )?line \d+,? column \d+\s*$").expect("static regex");
    let out = re.replace(first, "").to_string();
    let out = out.trim_start_matches("error: ").to_string();
    if out.is_empty() {
        msg.trim().to_string()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use repro_model::chaos::At;

    #[derive(Debug, serde::Deserialize)]
    struct Doc {
        name: At<String>,
        list: Vec<At<u32>>,
        nested: Nested,
        alias: At<String>,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Nested {
        inner: At<std::collections::BTreeMap<String, u8>>,
    }

    #[derive(serde::Deserialize)]
    struct Reference {
        name: serde_saphyr::Spanned<String>,
        list: Vec<serde_saphyr::Spanned<u32>>,
        nested: ReferenceNested,
        alias: serde_saphyr::Spanned<String>,
    }

    #[derive(serde::Deserialize)]
    struct ReferenceNested {
        inner: serde_saphyr::Spanned<std::collections::BTreeMap<String, u8>>,
    }

    /// repro_model's `At` speaks serde-saphyr's located-value protocol without depending on the crate: it must
    /// give the same line and column as serde-saphyr's own `Spanned` (this fails if an upgrade changes it).
    #[test]
    fn at_locates_like_serde_saphyr_spanned() {
        let text = "name: &n hello\nlist:\n  - 1\n  -   22\nnested:\n  inner: {a: 1, b: 2}\nalias: *n\n";
        let d: Doc = parse_yaml(Path::new("d.yaml"), text).unwrap();
        let r: Reference = serde_saphyr::from_str(text).unwrap();
        let pos = |l: u64, c: u64| (l, c);
        assert_eq!(pos(d.name.line, d.name.column), (r.name.referenced.line(), r.name.referenced.column()));
        assert_eq!(pos(d.name.line, d.name.column), (1, 10));
        assert_eq!(d.list.len(), 2);
        for (a, b) in d.list.iter().zip(&r.list) {
            assert_eq!((a.value, a.line, a.column), (b.value, b.referenced.line(), b.referenced.column()));
        }
        assert_eq!(pos(d.list[1].line, d.list[1].column), (4, 7));
        let (a, b) = (&d.nested.inner, &r.nested.inner);
        assert_eq!((&a.value, a.line, a.column), (&b.value, b.referenced.line(), b.referenced.column()));
        assert_eq!((d.alias.value.as_str(), d.alias.line, d.alias.column), ("hello", 7, 8));
        assert_eq!((d.alias.line, d.alias.column), (r.alias.referenced.line(), r.alias.referenced.column()));
    }

    #[test]
    fn errors_inside_located_values_name_the_field_without_span_segments() {
        let e = parse_yaml::<Doc>(Path::new("d.yaml"), "name: x\nlist: [1, nope]\nnested: {inner: {}}\nalias: y\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("d.yaml:2:11: list[1]: "), "{e}");
    }
}
