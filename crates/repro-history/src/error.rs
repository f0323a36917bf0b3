//! The one error type of the crate.
use std::fmt;

use serde::Serialize;

/// Where in a history something went wrong: the name given to [`crate::parse`] (a file name, or empty) and a
/// 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    pub name: String,
    pub line: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.name.is_empty() {
            write!(f, "line {}", self.line)
        } else {
            write!(f, "{}:{}", self.name, self.line)
        }
    }
}

/// Everything that can go wrong reading a history or checking it, each naming the line (and the field) at fault.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The line is not a JSON object.
    #[error("{at}: expected a JSON object, {message}")]
    Json { at: Location, message: String },
    /// A field is missing or has the wrong type or value (also raised by a checker: a `cas` whose value is not
    /// `[expected, new]`, an operation a model does not know, a negative counter delta).
    #[error("{at}: {field:?}: expected {expected}, got {got}")]
    Field { at: Location, field: String, expected: String, got: String },
    /// The lines of one process do not form invoke/complete pairs in time order.
    #[error("{at}: process {process}: {message}")]
    Sequence { at: Location, process: String, message: String },
    /// A line over [`crate::ParseOptions::max_line_bytes`].
    #[error("{at}: the line is longer than {max} bytes (the limit)")]
    LineTooLong { at: Location, max: usize },
    /// More operations than [`crate::ParseOptions::max_ops`].
    #[error("{at}: more than {max} operations (the limit, ParseOptions::max_ops)")]
    TooManyOps { at: Location, max: usize },
    /// Reading the input failed.
    #[error("{at}: {source}")]
    Io {
        at: Location,
        #[source]
        source: std::io::Error,
    },
}

impl HistoryError {
    /// The location the error names.
    pub fn location(&self) -> &Location {
        match self {
            HistoryError::Json { at, .. }
            | HistoryError::Field { at, .. }
            | HistoryError::Sequence { at, .. }
            | HistoryError::LineTooLong { at, .. }
            | HistoryError::TooManyOps { at, .. }
            | HistoryError::Io { at, .. } => at,
        }
    }

    pub(crate) fn field(at: Location, field: &str, expected: impl Into<String>, got: &serde_json::Value) -> Self {
        HistoryError::Field { at, field: field.to_string(), expected: expected.into(), got: shown(got) }
    }
}

/// A JSON value as an error message shows it: compact, cut at about 80 characters.
pub(crate) fn shown(v: &serde_json::Value) -> String {
    let s = v.to_string();
    const MAX: usize = 80;
    if s.len() <= MAX {
        return s;
    }
    let mut cut = MAX;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &s[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_with_and_without_a_name() {
        assert_eq!(Location { name: "h.jsonl".into(), line: 3 }.to_string(), "h.jsonl:3");
        assert_eq!(Location { name: String::new(), line: 3 }.to_string(), "line 3");
    }

    #[test]
    fn long_values_are_cut_on_a_character_boundary() {
        let v = serde_json::Value::String("é".repeat(100));
        let s = shown(&v);
        assert!(s.ends_with("..."));
        assert!(s.len() <= 84);
    }
}
