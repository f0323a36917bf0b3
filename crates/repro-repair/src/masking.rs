//! Masking constructs: patterns, as data, that an added line of an honest fix should not hold (`|| true`,
//! `@pytest.mark.skip`, `#[ignore]`, `t.Skip(`, `it.skip(`, a timeout raised tenfold, ...). The defaults are
//! `masking.toml` beside this file; a user file of the same shape is merged over them.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use regex::{Regex, RegexBuilder};
use repro_model::repair::MaskingHit;

use crate::glob::GlobList;
use crate::tree::{DiffLine, FileDiff, FileDiffKind, LineTag, TreeDiff};
use crate::{RepairError, Result};

/// The default patterns (docs/repair-gates.md lists them).
pub const DEFAULT_MASKING: &str = include_str!("masking.toml");

/// The name the default file's errors carry.
pub const DEFAULT_MASKING_NAME: &str = "masking.toml (built in)";

/// A user file larger than this is refused.
pub const MAX_MASKING_FILE_BYTES: u64 = 1 << 20;

/// What an entry checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternKind {
    /// An added line matching `regex` (and the next added line matching `next`, when set).
    AddedLine,
    /// An added line matching `regex` whose numbers grew by `factor` or more against the removed line it
    /// replaced.
    TimeoutRaise,
}

/// One entry of a masking file, as written.
#[derive(Debug, Clone, PartialEq)]
pub struct PatternDef {
    pub id: String,
    pub language: Option<String>,
    pub files: Option<Vec<String>>,
    pub regex: String,
    pub next: Option<String>,
    pub description: String,
    pub kind: PatternKind,
    pub factor: f64,
    /// The file it came from and its index there, for errors.
    pub source: (String, usize),
}

/// A masking file: language globs and entries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MaskingFile {
    pub languages: BTreeMap<String, Vec<String>>,
    pub patterns: Vec<PatternDef>,
}

fn file_err(file: &str, reason: impl Into<String>) -> RepairError {
    RepairError::MaskingFile { file: file.to_string(), reason: reason.into() }
}

impl MaskingFile {
    /// Parses a masking file's text; `file` names it in errors (which also name the entry's index, its id and the
    /// field).
    pub fn parse(text: &str, file: &str) -> Result<MaskingFile> {
        let doc: toml::Table =
            toml::from_str(text).map_err(|e| file_err(file, e.to_string().trim_end().to_string()))?;
        let mut out = MaskingFile::default();
        for (k, v) in &doc {
            match k.as_str() {
                "languages" => {
                    let t = v.as_table().ok_or_else(|| file_err(file, "languages: expected a table"))?;
                    for (lang, globs) in t {
                        let globs = string_list(globs)
                            .ok_or_else(|| file_err(file, format!("languages.{lang}: expected a list of globs")))?;
                        for g in &globs {
                            crate::glob::Glob::new(g)
                                .map_err(|e| file_err(file, format!("languages.{lang}: glob {g:?}: {e}")))?;
                        }
                        out.languages.insert(lang.clone(), globs);
                    }
                }
                "pattern" => {
                    let arr = v
                        .as_array()
                        .ok_or_else(|| file_err(file, "pattern: expected an array of tables ([[pattern]])"))?;
                    for (i, e) in arr.iter().enumerate() {
                        out.patterns.push(parse_entry(e, file, i)?);
                    }
                }
                other => {
                    return Err(file_err(file, format!("unknown key `{other}` (expected `languages` or `pattern`)")))
                }
            }
        }
        Ok(out)
    }
}

fn string_list(v: &toml::Value) -> Option<Vec<String>> {
    v.as_array()?.iter().map(|x| x.as_str().map(str::to_string)).collect()
}

fn parse_entry(v: &toml::Value, file: &str, index: usize) -> Result<PatternDef> {
    let id = v.get("id").and_then(|x| x.as_str()).unwrap_or("").to_string();
    let err = |field: &str, reason: &str| RepairError::MaskingEntry {
        file: file.to_string(),
        index,
        id: id.clone(),
        field: field.to_string(),
        reason: reason.to_string(),
    };
    let t = v.as_table().ok_or_else(|| err("(entry)", "expected a table"))?;
    const KNOWN: &[&str] = &["id", "language", "files", "regex", "next", "description", "kind", "factor"];
    for k in t.keys() {
        if !KNOWN.contains(&k.as_str()) {
            return Err(err(k, &format!("unknown field (expected one of {})", KNOWN.join(", "))));
        }
    }
    let string = |name: &str, required: bool| -> Result<Option<String>> {
        match t.get(name) {
            None if required => Err(err(name, "missing")),
            None => Ok(None),
            Some(x) => match x.as_str() {
                Some(s) => Ok(Some(s.to_string())),
                None => Err(err(name, "expected a string")),
            },
        }
    };
    if id.is_empty() {
        return Err(err("id", if t.contains_key("id") { "expected a non-empty string" } else { "missing" }));
    }
    if !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.') {
        return Err(err("id", "only letters, digits, '-', '_' and '.'"));
    }
    let regex = string("regex", true)?.unwrap_or_default();
    compile(&regex).map_err(|e| err("regex", &e))?;
    let next = string("next", false)?;
    if let Some(n) = &next {
        compile(n).map_err(|e| err("next", &e))?;
    }
    let files = match t.get("files") {
        None => None,
        Some(x) => {
            let l = string_list(x).ok_or_else(|| err("files", "expected a list of globs"))?;
            GlobList::new(&l).map_err(|(g, e)| err("files", &format!("glob {g:?}: {e}")))?;
            Some(l)
        }
    };
    let kind = match string("kind", false)?.as_deref() {
        None | Some("added-line") => PatternKind::AddedLine,
        Some("timeout-raise") => PatternKind::TimeoutRaise,
        Some(_) => return Err(err("kind", "expected \"added-line\" or \"timeout-raise\"")),
    };
    let factor = match t.get("factor") {
        None => 10.0,
        Some(x) => {
            let f = x
                .as_float()
                .or_else(|| x.as_integer().map(|i| i as f64))
                .ok_or_else(|| err("factor", "expected a number"))?;
            if !(f.is_finite() && f > 1.0) {
                return Err(err("factor", "expected a number greater than 1"));
            }
            f
        }
    };
    if t.contains_key("factor") && kind != PatternKind::TimeoutRaise {
        return Err(err("factor", "only for kind = \"timeout-raise\""));
    }
    if next.is_some() && kind != PatternKind::AddedLine {
        return Err(err("next", "only for kind = \"added-line\""));
    }
    Ok(PatternDef {
        id: id.clone(),
        language: string("language", false)?,
        files,
        regex,
        next,
        description: string("description", true)?.unwrap_or_default(),
        kind,
        factor,
        source: (file.to_string(), index),
    })
}

fn compile(re: &str) -> std::result::Result<Regex, String> {
    if re.is_empty() {
        return Err("an empty regex matches every line".into());
    }
    RegexBuilder::new(re).size_limit(1 << 20).dfa_size_limit(1 << 20).build().map_err(|e| e.to_string())
}

/// A compiled pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub def: PatternDef,
    globs: GlobList,
    re: Regex,
    next: Option<Regex>,
}

impl Pattern {
    /// Whether the pattern applies to `path` (a pattern without globs applies to every file).
    pub fn applies_to(&self, path: &str) -> bool {
        self.globs.is_empty() || self.globs.first_match(path).is_some()
    }
}

/// The patterns in force: the defaults with user files merged over them.
#[derive(Debug, Clone)]
pub struct MaskingSet {
    patterns: Vec<Pattern>,
}

impl MaskingSet {
    /// Merges `files` in order (an entry with an id already present replaces it where it stood; a language's
    /// globs are replaced whole) and compiles the result.
    pub fn new(files: &[MaskingFile]) -> Result<MaskingSet> {
        let mut languages: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut defs: Vec<PatternDef> = Vec::new();
        for f in files {
            for (k, v) in &f.languages {
                languages.insert(k.clone(), v.clone());
            }
            for p in &f.patterns {
                match defs.iter_mut().find(|d| d.id == p.id) {
                    Some(d) => *d = p.clone(),
                    None => defs.push(p.clone()),
                }
            }
        }
        let mut patterns = Vec::with_capacity(defs.len());
        // A language's globs compiled once, shared by its patterns.
        let mut compiled_languages: BTreeMap<String, GlobList> = BTreeMap::new();
        for def in defs {
            let err = |field: &str, reason: String| RepairError::MaskingEntry {
                file: def.source.0.clone(),
                index: def.source.1,
                id: def.id.clone(),
                field: field.to_string(),
                reason,
            };
            let globs = match (&def.files, &def.language) {
                (Some(f), _) => GlobList::new(f).map_err(|(g, e)| err("files", format!("glob {g:?}: {e}")))?,
                (None, Some(l)) => match compiled_languages.get(l) {
                    Some(g) => g.clone(),
                    None => {
                        let list = languages.get(l).ok_or_else(|| {
                            err("language", format!("no such language in [languages] (nor `files` given): {l:?}"))
                        })?;
                        let g = GlobList::new(list).map_err(|(g, e)| err("language", format!("glob {g:?}: {e}")))?;
                        compiled_languages.insert(l.clone(), g.clone());
                        g
                    }
                },
                (None, None) => GlobList::default(),
            };
            let re = compile(&def.regex).map_err(|e| err("regex", e))?;
            let next = def.next.as_deref().map(compile).transpose().map_err(|e| err("next", e))?;
            patterns.push(Pattern { def, globs, re, next });
        }
        Ok(MaskingSet { patterns })
    }

    /// The default patterns alone (compiled once per process).
    pub fn defaults() -> Result<MaskingSet> {
        static CACHE: OnceLock<MaskingSet> = OnceLock::new();
        if let Some(s) = CACHE.get() {
            return Ok(s.clone());
        }
        let s = MaskingSet::new(&[MaskingFile::parse(DEFAULT_MASKING, DEFAULT_MASKING_NAME)?])?;
        Ok(CACHE.get_or_init(|| s).clone())
    }

    /// The defaults with the user file at `path` merged over them.
    pub fn with_user_file(path: &Path) -> Result<MaskingSet> {
        let name = path.display().to_string();
        let io = |e| RepairError::Io { path: path.to_path_buf(), source: e };
        let f = std::fs::File::open(path).map_err(io)?;
        let mut text = String::new();
        use std::io::Read;
        let n = f.take(MAX_MASKING_FILE_BYTES + 1).read_to_string(&mut text).map_err(io)?;
        if n as u64 > MAX_MASKING_FILE_BYTES {
            return Err(file_err(&name, format!("larger than {MAX_MASKING_FILE_BYTES} bytes")));
        }
        let user = MaskingFile::parse(&text, &name)?;
        MaskingSet::new(&[MaskingFile::parse(DEFAULT_MASKING, DEFAULT_MASKING_NAME)?, user])
    }

    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// Every added line of `diff` that matches a pattern.
    pub fn scan(&self, diff: &TreeDiff) -> Vec<MaskingHit> {
        diff.files.iter().flat_map(|f| self.scan_file(f)).collect()
    }

    /// The hits of one file's diff, in line order.
    pub fn scan_file(&self, fd: &FileDiff) -> Vec<MaskingHit> {
        let FileDiffKind::Text { hunks } = &fd.kind else { return Vec::new() };
        let path = fd.path.to_string_lossy();
        let mut hits = Vec::new();
        for p in self.patterns.iter().filter(|p| p.applies_to(&path)) {
            for h in hunks {
                match p.def.kind {
                    PatternKind::AddedLine => added_line_hits(p, h, &path, &mut hits),
                    PatternKind::TimeoutRaise => timeout_hits(p, h, &path, &mut hits),
                }
            }
        }
        hits.sort_by(|a, b| (a.line, &a.pattern).cmp(&(b.line, &b.pattern)));
        hits
    }
}

fn hit(p: &Pattern, path: &str, l: &DiffLine) -> MaskingHit {
    let t = l.text.trim();
    let text = match t.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &t[..i]),
        None => t.to_string(),
    };
    MaskingHit { pattern: p.def.id.clone(), path: path.to_string(), line: l.new_line.unwrap_or(0), text }
}

fn added_line_hits(p: &Pattern, h: &[DiffLine], path: &str, hits: &mut Vec<MaskingHit>) {
    for (i, l) in h.iter().enumerate() {
        if l.tag != LineTag::Added || !p.re.is_match(&l.text) {
            continue;
        }
        if let Some(next) = &p.next {
            // The line right after it in the new file, when added too.
            let following = h[i + 1..].iter().find(|x| x.tag != LineTag::Removed);
            match following {
                Some(x) if x.tag == LineTag::Added && next.is_match(&x.text) => {}
                _ => continue,
            }
        }
        hits.push(hit(p, path, l));
    }
}

/// Pairs each run of removed lines with the run of added lines right after it, line by line, and fires on an
/// added line matching the pattern whose n-th number is `factor` times the removed line's n-th or more.
fn timeout_hits(p: &Pattern, h: &[DiffLine], path: &str, hits: &mut Vec<MaskingHit>) {
    let mut i = 0;
    while i < h.len() {
        if h[i].tag != LineTag::Removed {
            i += 1;
            continue;
        }
        let rs = i;
        while i < h.len() && h[i].tag == LineTag::Removed {
            i += 1;
        }
        let a_start = i;
        while i < h.len() && h[i].tag == LineTag::Added {
            i += 1;
        }
        for (old, new) in h[rs..a_start].iter().zip(&h[a_start..i]) {
            if !p.re.is_match(&new.text) {
                continue;
            }
            let (o, n) = (numbers(&old.text), numbers(&new.text));
            if o.iter().zip(&n).any(|(&a, &b)| a > 0.0 && b / a >= p.def.factor) {
                hits.push(hit(p, path, new));
            }
        }
    }
}

/// The numbers of a line, in order, durations with a unit in seconds.
fn numbers(line: &str) -> Vec<f64> {
    static NUM: OnceLock<Regex> = OnceLock::new();
    let re = NUM.get_or_init(|| {
        Regex::new(r"(\d[\d_]*(?:\.\d+)?)\s*(ns|us|µs|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|h)?\b")
            .unwrap_or_else(|e| panic!("built-in number pattern: {e}"))
    });
    re.captures_iter(line)
        .filter_map(|c| {
            let v: f64 = c[1].replace('_', "").parse().ok()?;
            let unit = match c.get(2).map(|m| m.as_str()) {
                Some("ns") => 1e-9,
                Some("us" | "µs") => 1e-6,
                Some("ms") => 1e-3,
                Some("m" | "min" | "mins" | "minute" | "minutes") => 60.0,
                Some("h" | "hour" | "hours") => 3600.0,
                _ => 1.0,
            };
            Some(v * unit)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{text_hunks, ChangeKind, DiffLimits};
    use proptest::prelude::*;

    fn fd(path: &str, old: &str, new: &str) -> FileDiff {
        FileDiff {
            path: path.into(),
            change: ChangeKind::Modified,
            old_mode: Some(0o644),
            new_mode: Some(0o644),
            kind: FileDiffKind::Text { hunks: text_hunks(old, new, &DiffLimits::default()) },
            lines_added: 0,
            lines_removed: 0,
        }
    }

    fn ids(set: &MaskingSet, path: &str, old: &str, new: &str) -> Vec<String> {
        set.scan_file(&fd(path, old, new)).into_iter().map(|h| h.pattern).collect()
    }

    #[test]
    fn defaults_parse_and_hold_the_required_patterns() {
        let set = MaskingSet::defaults().unwrap();
        let have: Vec<&str> = set.patterns().iter().map(|p| p.def.id.as_str()).collect();
        for want in [
            "shell-or-true",
            "shell-or-colon",
            "shell-exit-0",
            "python-pytest-skip",
            "python-pytest-skipif",
            "python-pytest-xfail-mark",
            "python-pytest-skip-call",
            "python-unittest-skip",
            "python-assert-true",
            "python-bare-except",
            "python-except-pass",
            "rust-ignore",
            "rust-should-panic",
            "rust-autotests-off",
            "python-pytest-report-hook",
            "python-pytest-collection-hook",
            "python-test-early-return",
            "go-skip",
            "js-skip",
            "js-skip-option",
            "js-todo",
            "timeout-raised-10x",
        ] {
            assert!(have.contains(&want), "{want} missing from {have:?}");
        }
    }

    #[test]
    fn added_lines_fire_removed_lines_do_not() {
        let set = MaskingSet::defaults().unwrap();
        let cases: &[(&str, &str, &str)] = &[
            ("ci/run.sh", "pytest\n", "pytest || true\n"),
            ("Makefile", "test:\n\tpytest\n", "test:\n\tpytest || :\n"),
            ("scripts/check.sh", "make\n", "make\nexit 0\n"),
            (".github/workflows/ci.yml", "run: x\n", "run: x\ncontinue-on-error: true\n"),
            ("tests/test_a.py", "def test_a():\n", "@pytest.mark.skip(reason='x')\ndef test_a():\n"),
            ("tests/test_a.py", "def test_a():\n", "@pytest.mark.skipif(True, reason='x')\ndef test_a():\n"),
            ("tests/test_a.py", "def test_a():\n", "@pytest.mark.xfail\ndef test_a():\n"),
            ("src/m.py", "    x()\n", "    pytest.skip('later')\n"),
            ("src/m.py", "class T:\n", "@unittest.skip('x')\nclass T:\n"),
            ("tests/test_b.py", "    assert f() == 3\n", "    assert True\n"),
            ("src/m.py", "    f()\n", "    try:\n        f()\n    except:\n        pass\n"),
            ("src/m.py", "    f()\n", "    try:\n        f()\n    except Exception: pass\n"),
            ("src/m.py", "    f()\n", "    try:\n        f()\n    except Exception as e:\n        pass\n"),
            ("src/lib.rs", "#[test]\nfn t() {}\n", "#[test]\n#[ignore]\nfn t() {}\n"),
            ("src/lib.rs", "#[test]\nfn t() {}\n", "#[test]\n#[ignore = \"flaky\"]\nfn t() {}\n"),
            ("src/lib.rs", "#[test]\nfn t() {}\n", "#[test]\n#[should_panic]\nfn t() {}\n"),
            ("a_test.go", "func TestA(t *testing.T) {\n", "func TestA(t *testing.T) {\n\tt.Skip(\"x\")\n"),
            ("a_test.go", "func TestA(t *testing.T) {\n", "func TestA(t *testing.T) {\n\tt.SkipNow()\n"),
            ("a.test.js", "it('a', () => {});\n", "it.skip('a', () => {});\n"),
            ("a.test.mjs", "test('a', () => {});\n", "test.skip('a', () => {});\n"),
            ("a.test.ts", "describe('a', () => {});\n", "describe.skip('a', () => {});\n"),
            ("a.test.mjs", "test('a', () => {});\n", "test('a', { skip: true }, () => {});\n"),
            ("a.test.mjs", "test('a', () => {});\n", "test.todo('a');\n"),
            ("pyproject.toml", "addopts = \"-q\"\n", "addopts = \"-q --deselect tests/test_a.py::test_b\"\n"),
            ("tests/conftest.py", "", "def pytest_runtest_makereport(item, call):\n"),
            ("conftest.py", "", "    report.outcome = 'passed'\n"),
            ("conftest.py", "", "def pytest_collection_modifyitems(config, items):\n"),
            ("tests/test_a.py", "def test_a():\n    assert f()\n", "def test_a():\n    return\n    assert f()\n"),
            ("Cargo.toml", "[package]\n", "[package]\nautotests = false\n"),
            ("crates/x/Cargo.toml", "[lib]\n", "[lib]\ntest = false\n"),
        ];
        for (path, old, new) in cases {
            assert_eq!(
                ids(&set, path, old, new).len(),
                1,
                "{path}: {new:?} fires once: {:?}",
                ids(&set, path, old, new)
            );
            assert!(ids(&set, path, new, old).is_empty(), "{path}: removing {new:?} fires nothing");
        }
    }

    #[test]
    fn honest_lines_and_other_languages_do_not_fire() {
        let set = MaskingSet::defaults().unwrap();
        for (path, old, new) in [
            ("src/m.py", "    return a - b\n", "    return a + b\n"),
            ("src/m.py", "    f()\n", "    try:\n        f()\n    except ValueError:\n        log()\n"),
            ("src/m.py", "x = 1\n", "skip = True  # || true\n"),
            ("src/lib.rs", "fn a() {}\n", "fn a() { ignore_this(); }\n"),
            ("README.md", "x\n", "use `|| true` and #[ignore]\n"),
            ("src/app.js", "let a;\n", "let skipped = list.filter(x => x.skip);\n"),
            ("src/m.py", "def f():\n    g()\n", "def f():\n    if x:\n        return\n    g()\n"),
            ("Cargo.toml", "[package]\n", "[package]\ntest_threads = false\n"),
        ] {
            assert!(ids(&set, path, old, new).is_empty(), "{path}: {new:?} fired {:?}", ids(&set, path, old, new));
        }
    }

    #[test]
    fn hits_name_the_pattern_file_and_line() {
        let set = MaskingSet::defaults().unwrap();
        let old = "import pytest\n\n\ndef test_a():\n    assert f() == 3\n";
        let new = "import pytest\n\n\n@pytest.mark.skip\ndef test_a():\n    assert f() == 3\n";
        let h = set.scan_file(&fd("tests/test_x.py", old, new));
        assert_eq!(
            h,
            [MaskingHit {
                pattern: "python-pytest-skip".into(),
                path: "tests/test_x.py".into(),
                line: 4,
                text: "@pytest.mark.skip".into()
            }]
        );
    }

    #[test]
    fn timeouts_raised_tenfold_fire() {
        let set = MaskingSet::defaults().unwrap();
        let t = |old: &str, new: &str| ids(&set, "src/conf.py", old, new);
        assert_eq!(t("TIMEOUT = 5\n", "TIMEOUT = 50\n"), ["timeout-raised-10x"]);
        assert_eq!(t("timeout: 30s\n", "timeout: 5m\n"), ["timeout-raised-10x"]);
        assert_eq!(t("@pytest.mark.timeout(2)\n", "@pytest.mark.timeout(600)\n"), ["timeout-raised-10x"]);
        assert!(t("TIMEOUT = 5\n", "TIMEOUT = 49\n").is_empty(), "less than tenfold");
        assert!(t("TIMEOUT = 50\n", "TIMEOUT = 5\n").is_empty(), "lowered");
        assert!(t("x = 1\n", "x = 1\nTIMEOUT = 500\n").is_empty(), "a new line replaces nothing");
        assert!(t("TIMEOUT = 0\n", "TIMEOUT = 30\n").is_empty(), "0 is no timeout to raise");
        assert_eq!(
            ids(
                &set,
                "src/x_test.go",
                "ctx, _ := context.WithTimeout(ctx, 1*time.Second)\n",
                "ctx, _ := context.WithTimeout(ctx, 100*time.Second)\n"
            ),
            ["timeout-raised-10x"]
        );
    }

    #[test]
    fn user_file_adds_and_replaces() {
        let user = r#"
[languages]
python = ["**/*.py", "**/*.pyx"]

[[pattern]]
id = "python-assert-true"
language = "python"
regex = 'assert\s+True\b'
description = "stricter: anywhere"

[[pattern]]
id = "project-no-retry"
files = ["src/**"]
regex = '@retry\('
description = "no retries around flaky code"
"#;
        let set = MaskingSet::new(&[
            MaskingFile::parse(DEFAULT_MASKING, DEFAULT_MASKING_NAME).unwrap(),
            MaskingFile::parse(user, "user.toml").unwrap(),
        ])
        .unwrap();
        let n_default = MaskingSet::defaults().unwrap().patterns().len();
        assert_eq!(set.patterns().len(), n_default + 1);
        let p = set.patterns().iter().find(|p| p.def.id == "python-assert-true").unwrap();
        assert_eq!(p.def.description, "stricter: anywhere");
        assert_eq!(ids(&set, "src/a.pyx", "x\n", "x; assert True\n"), ["python-assert-true"]);
        assert_eq!(ids(&set, "src/a.py", "x\n", "@retry(3)\n"), ["project-no-retry"]);
        assert!(ids(&set, "lib/a.py", "x\n", "@retry(3)\n").is_empty());
    }

    #[test]
    fn errors_name_the_file_entry_and_field() {
        let e = |text: &str| MaskingFile::parse(text, "user.toml").unwrap_err().to_string();
        let m = e("[[pattern]]\nid = \"a\"\nregex = \"(\"\ndescription = \"d\"\n");
        assert!(m.starts_with("user.toml: pattern[0] (id \"a\"): regex: "), "{m}");
        let m =
            e("[[pattern]]\nid = \"a\"\nregex = \"x\"\ndescription = \"d\"\n[[pattern]]\nid = \"b\"\nregx = \"x\"\n");
        assert!(m.starts_with("user.toml: pattern[1] (id \"b\"): regx: unknown field"), "{m}");
        let m = e("[[pattern]]\nid = \"b\"\ndescription = \"d\"\n");
        assert_eq!(m, "user.toml: pattern[0] (id \"b\"): regex: missing");
        let m = e("[[pattern]]\nregex = \"x\"\n");
        assert_eq!(m, "user.toml: pattern[0] (id \"\"): id: missing");
        let m = e("[[pattern]]\nid = \"c\"\nregex = \"x\"\ndescription = 3\n");
        assert_eq!(m, "user.toml: pattern[0] (id \"c\"): description: expected a string");
        let m =
            e("[[pattern]]\nid = \"c\"\nregex = \"x\"\ndescription = \"d\"\nkind = \"timeout-raise\"\nfactor = 0.5\n");
        assert!(m.contains("factor: expected a number greater than 1"), "{m}");
        let m = e("[[pattern]]\nid = \"c\"\nregex = \"x\"\ndescription = \"d\"\nfiles = [\"/abs\"]\n");
        assert!(m.contains("pattern[0] (id \"c\"): files: glob \"/abs\""), "{m}");
        let m = e("patterns = 1\n");
        assert!(m.contains("unknown key `patterns`"), "{m}");
        let m = e("[[pattern]\n");
        assert!(m.starts_with("user.toml: ") && m.contains("line 1"), "{m}");
        let f = MaskingFile::parse(
            "[[pattern]]\nid = \"d\"\nlanguage = \"cobol\"\nregex = \"x\"\ndescription = \"d\"\n",
            "u.toml",
        )
        .unwrap();
        let m = MaskingSet::new(&[f]).unwrap_err().to_string();
        assert!(m.starts_with("u.toml: pattern[0] (id \"d\"): language: no such language"), "{m}");
    }

    #[test]
    fn the_docs_list_every_default_pattern_and_language() {
        let doc = include_str!("../../../docs/repair-gates.md");
        let set = MaskingSet::defaults().unwrap();
        for p in set.patterns() {
            assert!(doc.contains(&format!("| `{}` |", p.def.id)), "docs/repair-gates.md lacks pattern {}", p.def.id);
        }
        for l in MaskingFile::parse(DEFAULT_MASKING, DEFAULT_MASKING_NAME).unwrap().languages.keys() {
            assert!(doc.contains(&format!("| `{l}` |")), "docs/repair-gates.md lacks language {l}");
        }
    }

    #[test]
    fn user_file_from_disk() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("m.toml");
        std::fs::write(&p, "[[pattern]]\nid = \"x\"\nregex = \"XYZZY\"\ndescription = \"d\"\n").unwrap();
        let set = MaskingSet::with_user_file(&p).unwrap();
        assert!(set.patterns().iter().any(|p| p.def.id == "x"));
        let e = MaskingSet::with_user_file(&t.path().join("none.toml")).unwrap_err();
        assert!(e.to_string().contains("none.toml"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn masking_file_parser_never_panics(s in "\\PC{0,300}") {
            if let Ok(f) = MaskingFile::parse(&s, "f.toml") {
                let _ = MaskingSet::new(&[f]);
            }
        }

        #[test]
        fn entry_shaped_files_never_panic(id in "[a-z-]{0,8}", re in "\\PC{0,12}", lang in "(python|rust|x)?", glob in "\\PC{0,8}") {
            let text = format!(
                "[languages]\nx = [{glob:?}]\n[[pattern]]\nid = {id:?}\nlanguage = {lang:?}\nregex = {re:?}\ndescription = \"d\"\n"
            );
            if let Ok(f) = MaskingFile::parse(&text, "f.toml") {
                let languages = MaskingFile { languages: MaskingFile::parse(DEFAULT_MASKING, "d").unwrap().languages, patterns: vec![] };
                if let Ok(set) = MaskingSet::new(&[languages, f]) {
                    let _ = set.scan_file(&fd("src/a.py", "a\n", "b\n"));
                }
            }
        }

        #[test]
        fn scanning_never_panics(old in "\\PC{0,200}", new in "\\PC{0,200}") {
            let set = MaskingSet::defaults().unwrap();
            for path in ["a.py", "a.rs", "a_test.go", "a.test.js", "run.sh", "conf.toml"] {
                let _ = set.scan_file(&fd(path, &old, &new));
            }
        }
    }
}
