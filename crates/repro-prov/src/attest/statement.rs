//! in-toto Statement v1 and its ResourceDescriptor: the types, and the checks of a statement from anyone.
//!
//! Parsing follows the in-toto parsing rules: unknown fields are ignored (a producer may add extensions), the
//! known ones must have their types; the statement's `_type` must be v1, with at least one subject, each with a
//! digest (the hex digests of the algorithms repro knows must be well formed).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::StatementError;
use crate::identity::is_hex;

/// The `_type` of an in-toto Statement v1.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// The most subjects a statement may name.
pub const MAX_SUBJECTS: usize = 1 << 20;

/// An in-toto Statement v1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    #[serde(rename = "_type")]
    pub type_: String,
    pub subject: Vec<ResourceDescriptor>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    pub predicate: serde_json::Map<String, serde_json::Value>,
}

/// An in-toto ResourceDescriptor (a subject, a file access, a configuration, a policy).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDescriptor {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uri: String,
    /// Algorithm to lowercase hex digest (`sha256`, `blake3`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub digest: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub download_location: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub media_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<serde_json::Map<String, serde_json::Value>>,
}

impl ResourceDescriptor {
    /// A named resource with its sha256 and blake3.
    pub fn file(name: impl Into<String>, sha256: String, blake3: String) -> ResourceDescriptor {
        ResourceDescriptor {
            name: name.into(),
            digest: BTreeMap::from([("blake3".to_string(), blake3), ("sha256".to_string(), sha256)]),
            ..Default::default()
        }
    }
}

impl Statement {
    /// A statement of `predicate` (a JSON object) about `subject`.
    pub fn new(subject: Vec<ResourceDescriptor>, predicate_type: &str, predicate: &impl Serialize) -> Statement {
        let predicate = match serde_json::to_value(predicate) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        Statement { type_: STATEMENT_TYPE.into(), subject, predicate_type: predicate_type.into(), predicate }
    }

    /// The statement's JSON (compact): the envelope's payload.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses and checks a statement from anyone; the error is the reason it is not one.
    pub fn parse(bytes: &[u8]) -> Result<Statement, StatementError> {
        let s: Statement = serde_json::from_slice(bytes).map_err(StatementError::NotJson)?;
        if s.type_ != STATEMENT_TYPE {
            return Err(StatementError::Type { found: s.type_, expected: STATEMENT_TYPE });
        }
        if s.subject.is_empty() {
            return Err(StatementError::NoSubject);
        }
        if s.subject.len() > MAX_SUBJECTS {
            return Err(StatementError::TooManySubjects { count: s.subject.len(), limit: MAX_SUBJECTS });
        }
        for (index, sub) in s.subject.iter().enumerate() {
            if sub.digest.is_empty() {
                return Err(StatementError::NoDigest { index, name: sub.name.clone() });
            }
            for (alg, value) in &sub.digest {
                if matches!(alg.as_str(), "sha256" | "blake3") && !is_hex(value, 64) {
                    let (name, alg, value) = (sub.name.clone(), alg.clone(), value.clone());
                    return Err(StatementError::BadDigest { index, name, alg, value });
                }
            }
        }
        if s.predicate_type.is_empty() {
            return Err(StatementError::NoPredicateType);
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(c: char) -> String {
        std::iter::repeat_n(c, 64).collect()
    }

    #[test]
    fn a_statement_round_trips_with_the_spec_field_names() {
        let s = Statement::new(
            vec![ResourceDescriptor::file("a.repro", h('a'), h('b'))],
            "https://example.com/p",
            &serde_json::json!({"k": 1}),
        );
        let v: serde_json::Value = serde_json::from_slice(&s.to_json()).unwrap();
        assert_eq!(v["_type"], STATEMENT_TYPE);
        assert_eq!(v["predicateType"], "https://example.com/p");
        assert_eq!(
            v["subject"][0],
            serde_json::json!({"name": "a.repro", "digest": {"blake3": h('b'), "sha256": h('a')}})
        );
        assert_eq!(Statement::parse(&s.to_json()).unwrap(), s);
    }

    #[test]
    fn what_a_stranger_may_get_wrong() {
        let ok = serde_json::json!({"_type": STATEMENT_TYPE, "subject": [{"name": "x", "digest": {"sha256": h('0')}}],
            "predicateType": "p", "predicate": {}, "extension": true});
        assert!(Statement::parse(ok.to_string().as_bytes()).is_ok(), "unknown fields are ignored");
        let with = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v = ok.clone();
            f(&mut v);
            Statement::parse(v.to_string().as_bytes()).unwrap_err().to_string()
        };
        assert!(with(&|v| v["_type"] = "https://in-toto.io/Statement/v0.1".into()).contains("Statement v1"));
        assert!(with(&|v| v["subject"] = serde_json::json!([])).contains("no subject"));
        assert!(with(&|v| v["subject"][0]["digest"] = serde_json::json!({})).contains("no digest"));
        assert!(with(&|v| v["subject"][0]["digest"]["sha256"] = "ABC".into()).contains("hex"));
        assert!(with(&|v| v["predicate"] = "x".into()).contains("not an in-toto statement"));
        assert!(with(&|v| v["subject"][0]["digest"]["sha256"] = 5.into()).contains("not an in-toto statement"));
        assert!(Statement::parse(b"[").unwrap_err().to_string().contains("not an in-toto statement"));
    }
}
