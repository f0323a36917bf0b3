//! The history format: JSON lines, one event each, as in Jepsen/Knossos histories.
//!
//! ```text
//! {"process": 0, "type": "invoke", "f": "write", "value": 3, "time": 1000}
//! {"process": 0, "type": "ok", "f": "write", "value": 3, "time": 2000}
//! {"process": "web-1", "type": "invoke", "f": "read", "key": "a", "value": null, "time": 1500}
//! {"process": "web-1", "type": "ok", "f": "read", "key": "a", "value": 3, "time": 2500}
//! ```
//!
//! `invoke` opens an operation of its process; the next `ok`, `fail` or `info` of that process completes it.
//! `fail`: it certainly did not happen; `info`: it may or may not have happened (it stays open forever, as in
//! Knossos). An invoke never completed by the end of the history is `info` too. Blank lines are skipped.
use std::collections::HashMap;
use std::fmt;
use std::io::BufRead;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{HistoryError, Location};

/// Who ran an operation: a number (Jepsen's process) or a name (an instance).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Process {
    Int(i64),
    Name(String),
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Process::Int(n) => write!(f, "{n}"),
            Process::Name(s) => write!(f, "{s:?}"),
        }
    }
}

/// How an operation completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It happened, with the completion's value as its result.
    Ok,
    /// It certainly did not happen.
    Fail,
    /// It may or may not have happened (also: never completed).
    Info,
}

/// One operation: an invoke and its completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// Its position in [`History::ops`] (the order of the invokes in the file).
    pub index: usize,
    pub process: Process,
    pub f: String,
    /// The invoke's key (or the completion's, if only it has one).
    pub key: Option<String>,
    /// The invoke's value (`null` when absent).
    pub value: Value,
    /// The completion's value (`null` when absent or never completed).
    pub result: Value,
    pub outcome: Outcome,
    /// The invoke's time (monotonic nanoseconds).
    pub call: u64,
    /// The completion's time; `None` for `info` and for an operation never completed.
    pub ret: Option<u64>,
    /// The invoke's line (1-based).
    pub line: usize,
    /// The completion's line, if there was one.
    pub complete_line: Option<usize>,
}

/// A parsed history: its name (as given to [`parse`]) and its operations in invoke order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    pub name: String,
    pub ops: Vec<Op>,
}

impl History {
    /// A history of the given operations (renumbering their `index`), for checkers fed by code rather than text.
    pub fn from_ops(name: &str, mut ops: Vec<Op>) -> History {
        for (i, op) in ops.iter_mut().enumerate() {
            op.index = i;
        }
        History { name: name.to_string(), ops }
    }

    pub(crate) fn at(&self, line: usize) -> Location {
        Location { name: self.name.clone(), line }
    }
}

/// Limits of the parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseOptions {
    /// The most operations (invokes) a history may hold.
    pub max_ops: usize,
    /// The longest line, in bytes, without its newline.
    pub max_line_bytes: usize,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions { max_ops: 1_000_000, max_line_bytes: 1 << 20 }
    }
}

/// Parses a history with the default limits. `name` (a file name, or empty) starts every error message.
pub fn parse(name: &str, text: &str) -> Result<History, HistoryError> {
    parse_reader(name, text.as_bytes(), &ParseOptions::default())
}

/// Parses a history from a reader, within `opts`.
pub fn parse_reader(name: &str, mut reader: impl BufRead, opts: &ParseOptions) -> Result<History, HistoryError> {
    let mut p = Parser { name, opts, ops: Vec::new(), open: HashMap::new(), last_time: HashMap::new() };
    let mut buf = Vec::new();
    let mut line = 0usize;
    loop {
        line = line.saturating_add(1);
        buf.clear();
        let at = || Location { name: name.to_string(), line };
        let limit = (opts.max_line_bytes as u64).saturating_add(1);
        let n = std::io::Read::take(&mut reader, limit)
            .read_until(b'\n', &mut buf)
            .map_err(|source| HistoryError::Io { at: at(), source })?;
        if n == 0 {
            break;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if buf.len() > opts.max_line_bytes {
            return Err(HistoryError::LineTooLong { at: at(), max: opts.max_line_bytes });
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        p.line(line, &buf)?;
    }
    Ok(History { name: name.to_string(), ops: p.ops })
}

struct Parser<'a> {
    name: &'a str,
    opts: &'a ParseOptions,
    ops: Vec<Op>,
    /// The open operation of each process (an index into `ops`).
    open: HashMap<Process, usize>,
    /// The last time seen for each process, and its line.
    last_time: HashMap<Process, (u64, usize)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Invoke,
    Complete(Outcome),
}

impl Parser<'_> {
    fn at(&self, line: usize) -> Location {
        Location { name: self.name.to_string(), line }
    }

    fn line(&mut self, line: usize, bytes: &[u8]) -> Result<(), HistoryError> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| HistoryError::Json { at: self.at(line), message: format!("not valid JSON: {e}") })?;
        let Value::Object(obj) = v else {
            return Err(HistoryError::Json { at: self.at(line), message: format!("got {}", crate::error::shown(&v)) });
        };
        let field = |name: &str| obj.get(name).unwrap_or(&Value::Null);
        let process = match field("process") {
            Value::Number(n) if n.as_i64().is_some() => Process::Int(n.as_i64().unwrap_or_default()),
            Value::String(s) => Process::Name(s.clone()),
            other => return Err(HistoryError::field(self.at(line), "process", "an integer or a string", other)),
        };
        let kind = match field("type") {
            Value::String(s) if s == "invoke" => Kind::Invoke,
            Value::String(s) if s == "ok" => Kind::Complete(Outcome::Ok),
            Value::String(s) if s == "fail" => Kind::Complete(Outcome::Fail),
            Value::String(s) if s == "info" => Kind::Complete(Outcome::Info),
            other => {
                return Err(HistoryError::field(self.at(line), "type", "one of invoke, ok, fail, info", other));
            }
        };
        let f = match field("f") {
            Value::String(s) => s.clone(),
            other => return Err(HistoryError::field(self.at(line), "f", "a string (write, read, cas, ...)", other)),
        };
        let key = match field("key") {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => return Err(HistoryError::field(self.at(line), "key", "a string or no key", other)),
        };
        let time = match field("time") {
            Value::Number(n) if n.as_u64().is_some() => n.as_u64().unwrap_or_default(),
            other => {
                return Err(HistoryError::field(
                    self.at(line),
                    "time",
                    "a non-negative integer (monotonic nanoseconds)",
                    other,
                ));
            }
        };
        let value = field("value").clone();
        if let Some(&(last, last_line)) = self.last_time.get(&process) {
            if time < last {
                return Err(HistoryError::Sequence {
                    at: self.at(line),
                    process: process.to_string(),
                    message: format!("time goes backwards: {time} after {last} at line {last_line}"),
                });
            }
        }
        self.last_time.insert(process.clone(), (time, line));
        match kind {
            Kind::Invoke => {
                if let Some(&open) = self.open.get(&process) {
                    let prev = &self.ops[open];
                    return Err(HistoryError::Sequence {
                        at: self.at(line),
                        process: process.to_string(),
                        message: format!(
                            "an invoke while the process has one open (its {:?} invoked at line {})",
                            prev.f, prev.line
                        ),
                    });
                }
                if self.ops.len() >= self.opts.max_ops {
                    return Err(HistoryError::TooManyOps { at: self.at(line), max: self.opts.max_ops });
                }
                let index = self.ops.len();
                self.open.insert(process.clone(), index);
                self.ops.push(Op {
                    index,
                    process,
                    f,
                    key,
                    value,
                    result: Value::Null,
                    outcome: Outcome::Info,
                    call: time,
                    ret: None,
                    line,
                    complete_line: None,
                });
            }
            Kind::Complete(outcome) => {
                let Some(open) = self.open.remove(&process) else {
                    return Err(HistoryError::Sequence {
                        at: self.at(line),
                        process: process.to_string(),
                        message: format!("a completion ({f:?}) without an open invoke of this process"),
                    });
                };
                let at = self.at(line);
                let op = &mut self.ops[open];
                if op.f != f {
                    return Err(HistoryError::Field {
                        at,
                        field: "f".to_string(),
                        expected: format!("{:?} (the invoke's, line {})", op.f, op.line),
                        got: format!("{f:?}"),
                    });
                }
                if op.key.is_none() {
                    op.key = key;
                }
                op.result = value;
                op.outcome = outcome;
                op.ret = if outcome == Outcome::Info { None } else { Some(time) };
                op.complete_line = Some(line);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse("history.jsonl", text).unwrap_err().to_string()
    }

    #[test]
    fn parses_pairs_and_keeps_invoke_order() {
        let h = parse(
            "h",
            r#"{"process": 0, "type": "invoke", "f": "write", "value": 3, "time": 10}
{"process": "web-1", "type": "invoke", "f": "read", "key": "a", "value": null, "time": 15}

{"process": 0, "type": "ok", "f": "write", "value": 3, "time": 20}
{"process": "web-1", "type": "ok", "f": "read", "key": "a", "value": 3, "time": 25}
{"process": 0, "type": "invoke", "f": "cas", "value": [3, 4], "time": 30}
{"process": 0, "type": "info", "f": "cas", "time": 40}
{"process": 0, "type": "invoke", "f": "write", "value": 5, "time": 50}
{"process": 0, "type": "fail", "f": "write", "value": 5, "time": 60}
{"process": 1, "type": "invoke", "f": "write", "value": 6, "time": 70}
"#,
        )
        .unwrap();
        assert_eq!(h.ops.len(), 5);
        let w = &h.ops[0];
        assert_eq!((w.call, w.ret, w.line, w.complete_line, w.outcome), (10, Some(20), 1, Some(4), Outcome::Ok));
        let r = &h.ops[1];
        assert_eq!(r.process, Process::Name("web-1".into()));
        assert_eq!(r.key.as_deref(), Some("a"));
        assert_eq!(r.result, serde_json::json!(3));
        assert_eq!((h.ops[2].outcome, h.ops[2].ret), (Outcome::Info, None));
        assert_eq!(h.ops[2].value, serde_json::json!([3, 4]));
        assert_eq!(h.ops[3].outcome, Outcome::Fail);
        assert_eq!((h.ops[4].outcome, h.ops[4].ret, h.ops[4].complete_line), (Outcome::Info, None, None));
    }

    #[test]
    fn errors_name_the_line_and_field() {
        assert_eq!(
            err("\n{\"process\": 0, \"type\": \"okk\", \"f\": \"read\", \"time\": 1}"),
            r#"history.jsonl:2: "type": expected one of invoke, ok, fail, info, got "okk""#
        );
        assert!(err(r#"{"process": 0.5, "type": "ok", "f": "read", "time": 1}"#).contains(r#""process": expected"#));
        assert!(err(r#"{"process": 0, "type": "ok", "f": 1, "time": 1}"#).contains(r#""f": expected a string"#));
        assert!(err(r#"{"process": 0, "type": "ok", "f": "r", "key": 1, "time": 1}"#).contains(r#""key""#));
        assert!(err(r#"{"process": 0, "type": "invoke", "f": "r", "time": -1}"#).contains(r#""time": expected"#));
        assert!(err(r#"{"process": 0, "type": "invoke", "f": "r"}"#).contains("got null"));
        assert!(err("[1]").starts_with("history.jsonl:1: expected a JSON object, got [1]"));
        assert!(err("{nope").starts_with("history.jsonl:1: expected a JSON object, not valid JSON"));
    }

    #[test]
    fn sequence_errors() {
        let m = err(r#"{"process": 0, "type": "ok", "f": "read", "time": 1}"#);
        assert!(m.contains("history.jsonl:1: process 0: a completion"), "{m}");
        let m = err("{\"process\": \"a\", \"type\": \"invoke\", \"f\": \"read\", \"time\": 1}\n\
                     {\"process\": \"a\", \"type\": \"invoke\", \"f\": \"read\", \"time\": 2}");
        assert!(m.contains("history.jsonl:2: process \"a\": an invoke while the process has one open"), "{m}");
        let m = err("{\"process\": 0, \"type\": \"invoke\", \"f\": \"read\", \"time\": 5}\n\
                     {\"process\": 0, \"type\": \"ok\", \"f\": \"read\", \"time\": 4}");
        assert!(m.contains("history.jsonl:2: process 0: time goes backwards: 4 after 5 at line 1"), "{m}");
        let m = err("{\"process\": 0, \"type\": \"invoke\", \"f\": \"read\", \"time\": 5}\n\
                     {\"process\": 0, \"type\": \"ok\", \"f\": \"write\", \"time\": 6}");
        assert!(m.contains(r#"history.jsonl:2: "f": expected "read" (the invoke's, line 1), got "write""#), "{m}");
    }

    #[test]
    fn limits() {
        let opts = ParseOptions { max_ops: 1, max_line_bytes: 100 };
        let two = "{\"process\": 0, \"type\": \"invoke\", \"f\": \"r\", \"time\": 1}\n\
                   {\"process\": 1, \"type\": \"invoke\", \"f\": \"r\", \"time\": 1}\n";
        let e = parse_reader("h", two.as_bytes(), &opts).unwrap_err();
        assert!(matches!(e, HistoryError::TooManyOps { max: 1, .. }), "{e}");
        assert_eq!(e.location().line, 2);
        let long = format!("{{\"process\": 0, \"type\": \"invoke\", \"f\": \"{}\", \"time\": 1}}", "x".repeat(100));
        let e = parse_reader("h", long.as_bytes(), &opts).unwrap_err();
        assert_eq!(e.to_string(), "h:1: the line is longer than 100 bytes (the limit)");
        // Exactly at the limit, with and without a newline.
        let line = format!("{{\"process\": 0, \"type\": \"invoke\", \"f\": \"r\", \"time\": 1}}{}", " ".repeat(50));
        let opts = ParseOptions { max_ops: 1, max_line_bytes: line.len() };
        parse_reader("h", line.as_bytes(), &opts).unwrap();
        parse_reader("h", format!("{line}\n").as_bytes(), &opts).unwrap();
    }

    #[test]
    fn crlf_and_unnamed() {
        let h = parse("", "{\"process\": 0, \"type\": \"invoke\", \"f\": \"r\", \"time\": 1}\r\n\r\n").unwrap();
        assert_eq!(h.ops.len(), 1);
        assert!(parse("", "x").unwrap_err().to_string().starts_with("line 1: "));
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_errors(text in "\\PC{0,200}") {
            let _ = parse("h", &text);
        }

        #[test]
        fn any_bytes_parse_or_error(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let opts = ParseOptions { max_ops: 3, max_line_bytes: 40 };
            if let Err(e) = parse_reader("h", &bytes[..], &opts) {
                proptest::prop_assert!(e.to_string().starts_with("h:"));
            }
        }
    }
}
