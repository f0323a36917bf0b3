//! JUnit XML as CI systems read it (GitHub test-report actions, GitLab `artifacts:reports:junit`, Jenkins): typed
//! structs, a small writer that escapes every attribute and text node, and an atomic write.
//!
//! The shape: `<testsuites>` (totals) holding `<testsuite>`s (totals, `<properties>`), each holding
//! `<testcase classname name time>` with at most one of `<failure message type>`, `<error message type>` or
//! `<skipped message>`, and an optional `<system-out>`. XML 1.0 forbids most control characters even as character
//! references: they are written as the visible text `\xNN` (NUL is `\x00`, ESC `\x1b`).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// A whole report: the root `<testsuites>`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub name: String,
    pub suites: Vec<Suite>,
}

/// One `<testsuite>`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Suite {
    pub name: String,
    /// `<property name value>` pairs, in order (run id, seed, environment identity, ...).
    pub properties: Vec<(String, String)>,
    pub cases: Vec<Case>,
}

/// One `<testcase>`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Case {
    pub classname: String,
    pub name: String,
    /// Wall time in milliseconds (written as seconds with three decimals).
    pub time_ms: u64,
    pub outcome: Outcome,
    /// `<system-out>`: where the run's files are.
    pub system_out: Option<String>,
}

/// How a testcase ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Outcome {
    #[default]
    Passed,
    /// `<failure>`: the thing tested did not do what was expected.
    Failure(Problem),
    /// `<error>`: it could not be tested (repro could not set up, the command was not found, determinism was not
    /// enforced so the result is no evidence).
    Error(Problem),
    /// `<skipped message>`.
    Skipped(String),
}

/// The body of a `<failure>` or `<error>`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Problem {
    /// The one-line summary (`message` attribute).
    pub message: String,
    /// A short machine-friendly kind (`type` attribute): `exit-status`, `not-reproduced`, ...
    pub kind: String,
    /// The text: the failure signature (exit status, stderr tail), the pack path.
    pub text: String,
}

/// Counts of a suite or of the whole report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub tests: usize,
    pub failures: usize,
    pub errors: usize,
    pub skipped: usize,
    pub time_ms: u64,
}

impl Totals {
    fn add(&mut self, o: Totals) {
        self.tests += o.tests;
        self.failures += o.failures;
        self.errors += o.errors;
        self.skipped += o.skipped;
        self.time_ms += o.time_ms;
    }
}

impl Suite {
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for c in &self.cases {
            t.tests += 1;
            t.time_ms += c.time_ms;
            match c.outcome {
                Outcome::Passed => {}
                Outcome::Failure(_) => t.failures += 1,
                Outcome::Error(_) => t.errors += 1,
                Outcome::Skipped(_) => t.skipped += 1,
            }
        }
        t
    }
}

impl Report {
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for s in &self.suites {
            t.add(s.totals());
        }
        t
    }

    /// The document, UTF-8, ending with a newline.
    pub fn to_xml(&self) -> String {
        let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let t = self.totals();
        let _ = writeln!(
            o,
            "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{}\">",
            attr(&self.name),
            t.tests,
            t.failures,
            t.errors,
            t.skipped,
            seconds(t.time_ms)
        );
        for s in &self.suites {
            write_suite(&mut o, s);
        }
        o.push_str("</testsuites>\n");
        o
    }

    /// Writes the document to `path` atomically: a temporary file in the same directory, synced, then renamed
    /// over `path` (a reader sees the old file or the whole new one, never a part).
    pub fn write_atomic(&self, path: &Path) -> std::io::Result<()> {
        write_atomic(path, self.to_xml().as_bytes())
    }
}

fn write_suite(o: &mut String, s: &Suite) {
    let t = s.totals();
    let _ = writeln!(
        o,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{}\">",
        attr(&s.name),
        t.tests,
        t.failures,
        t.errors,
        t.skipped,
        seconds(t.time_ms)
    );
    if !s.properties.is_empty() {
        o.push_str("    <properties>\n");
        for (k, v) in &s.properties {
            let _ = writeln!(o, "      <property name=\"{}\" value=\"{}\"/>", attr(k), attr(v));
        }
        o.push_str("    </properties>\n");
    }
    for c in &s.cases {
        let head = format!(
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{}\"",
            attr(&c.classname),
            attr(&c.name),
            seconds(c.time_ms)
        );
        if c.outcome == Outcome::Passed && c.system_out.is_none() {
            let _ = writeln!(o, "{head}/>");
            continue;
        }
        let _ = writeln!(o, "{head}>");
        match &c.outcome {
            Outcome::Passed => {}
            Outcome::Failure(p) => problem(o, "failure", p),
            Outcome::Error(p) => problem(o, "error", p),
            Outcome::Skipped(m) => {
                let _ = writeln!(o, "      <skipped message=\"{}\"/>", attr(m));
            }
        }
        if let Some(out) = &c.system_out {
            let _ = writeln!(o, "      <system-out>{}</system-out>", text(out));
        }
        o.push_str("    </testcase>\n");
    }
    o.push_str("  </testsuite>\n");
}

fn problem(o: &mut String, tag: &str, p: &Problem) {
    let _ = writeln!(
        o,
        "      <{tag} message=\"{}\" type=\"{}\">{}</{tag}>",
        attr(&p.message),
        attr(&p.kind),
        text(&p.text)
    );
}

/// Milliseconds as seconds with three decimals.
fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// Whether XML 1.0 allows `c` at all (as a character or a reference).
fn allowed(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

/// Escapes text content: `&`, `<`, `>`; forbidden characters become the visible text `\xNN` (`\u{FFFE}` for the
/// two non-characters above 0xFF).
pub fn text(s: &str) -> String {
    escape(s, false)
}

/// Escapes an attribute value: as [`text`], plus both quotes, and tab, newline and carriage return as character
/// references (a parser would otherwise normalize them to spaces).
pub fn attr(s: &str) -> String {
    escape(s, true)
}

fn escape(s: &str, attribute: bool) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' if attribute => o.push_str("&quot;"),
            '\'' if attribute => o.push_str("&apos;"),
            '\t' if attribute => o.push_str("&#9;"),
            '\n' if attribute => o.push_str("&#10;"),
            '\r' if attribute => o.push_str("&#13;"),
            // A lone CR in text would be read as a newline: keep it.
            '\r' => o.push_str("&#13;"),
            c if allowed(c) => o.push(c),
            c if (c as u32) <= 0xFF => {
                let _ = write!(o, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(o, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    o
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_through_temporary(path, bytes, true)
}

/// Writes `bytes` to `path` atomically, refusing to replace an existing file: a temporary file in the same
/// directory, then a hard link to `path` (which fails if it exists), then the temporary name removed.
pub fn write_new_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_through_temporary(path, bytes, false)
}

/// A synced temporary file `.NAME.tmp-PID` beside `path`, then renamed over it (`replace`) or hard-linked to it.
fn write_through_temporary(path: &Path, bytes: &[u8], replace: bool) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| std::io::Error::other("not a file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        if replace {
            std::fs::rename(&tmp, path)
        } else {
            std::fs::hard_link(&tmp, path)
        }
    })();
    if result.is_err() || !replace {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_attributes_are_escaped() {
        assert_eq!(text("a<b>&c \"q\" 'a'"), "a&lt;b&gt;&amp;c \"q\" 'a'");
        assert_eq!(attr("a<b>&c \"q\" 'a'"), "a&lt;b&gt;&amp;c &quot;q&quot; &apos;a&apos;");
        assert_eq!(attr("l1\nl2\tx\r"), "l1&#10;l2&#9;x&#13;");
        assert_eq!(text("l1\nl2\tx"), "l1\nl2\tx");
    }

    #[test]
    fn forbidden_characters_become_visible_text() {
        assert_eq!(text("nul\0esc\u{1b}[31mred\u{7}"), "nul\\x00esc\\x1b[31mred\\x07");
        assert_eq!(attr("\u{1b}"), "\\x1b");
        assert_eq!(text("\u{FFFE}\u{FFFF}ok\u{FFFD}é"), "\\u{fffe}\\u{ffff}ok\u{FFFD}é");
        // DEL and C1 controls are allowed by XML 1.0 and kept.
        assert_eq!(text("\u{7f}\u{85}"), "\u{7f}\u{85}");
    }

    fn sample() -> Report {
        Report {
            name: "repro run".into(),
            suites: vec![Suite {
                name: "repro run".into(),
                properties: vec![("seed".into(), "0".into()), ("run_id".into(), "r\"1".into())],
                cases: vec![
                    Case { classname: "repro.run".into(), name: "ok".into(), time_ms: 1500, ..Default::default() },
                    Case {
                        classname: "repro.run".into(),
                        name: "sh -c 'exit 1'".into(),
                        time_ms: 7,
                        outcome: Outcome::Failure(Problem {
                            message: "exit 1: boom\0".into(),
                            kind: "exit-status".into(),
                            text: "stderr:\n  boom <here>\n".into(),
                        }),
                        system_out: Some("run: /x".into()),
                    },
                    Case {
                        classname: "repro.run".into(),
                        name: "skip".into(),
                        outcome: Outcome::Skipped("why".into()),
                        ..Default::default()
                    },
                    Case {
                        classname: "repro.run".into(),
                        name: "err".into(),
                        outcome: Outcome::Error(Problem { message: "m".into(), kind: "k".into(), text: "t".into() }),
                        ..Default::default()
                    },
                ],
            }],
        }
    }

    #[test]
    fn totals_count_each_outcome() {
        let t = sample().totals();
        assert_eq!(t, Totals { tests: 4, failures: 1, errors: 1, skipped: 1, time_ms: 1507 });
    }

    #[test]
    fn document_shape() {
        insta::assert_snapshot!(sample().to_xml());
    }

    #[test]
    fn atomic_writes_replace_or_refuse() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.xml");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let e = write_new_atomic(&p, b"three").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        write_new_atomic(&d.path().join("n.xml"), b"new").unwrap();
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
    }
}
