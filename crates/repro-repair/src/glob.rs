//! A small glob matcher over relative paths with `/` separators, compiled to an anchored regex.
//!
//! `*` matches within one path component, `?` one character but `/`, `[abc]`, `[a-z]` and `[!a]` a character
//! class, `{a,b}` either alternative, and `**` any number of whole components: `**/x` matches `x` at any depth
//! (including the top), `x/**` everything below `x`, `a/**/b` `a/b` and `a/.../b`. A glob matches the whole
//! relative path: `tests` matches the file `tests`, `tests/**` what is below the directory.

use regex::Regex;

/// A compiled glob.
#[derive(Debug, Clone)]
pub struct Glob {
    text: String,
    re: Regex,
}

impl Glob {
    /// Compiles `glob`; an error says what is wrong with it.
    pub fn new(glob: &str) -> Result<Glob, String> {
        if glob.is_empty() {
            return Err("empty glob".into());
        }
        if glob.starts_with('/') {
            return Err("a glob is relative to the working tree: no leading '/'".into());
        }
        let re = to_regex(glob)?;
        let re = regex::RegexBuilder::new(&re).size_limit(1 << 20).build().map_err(|e| e.to_string())?;
        Ok(Glob { text: glob.to_string(), re })
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `path` (relative, `/`-separated) matches.
    pub fn is_match(&self, path: &str) -> bool {
        self.re.is_match(path)
    }
}

/// A list of globs: matches when one does.
#[derive(Debug, Clone, Default)]
pub struct GlobList {
    globs: Vec<Glob>,
}

impl GlobList {
    pub fn new<S: AsRef<str>>(globs: &[S]) -> Result<GlobList, (String, String)> {
        let mut v = Vec::with_capacity(globs.len());
        for g in globs {
            v.push(Glob::new(g.as_ref()).map_err(|e| (g.as_ref().to_string(), e))?);
        }
        Ok(GlobList { globs: v })
    }

    /// The first glob matching `path`.
    pub fn first_match(&self, path: &str) -> Option<&Glob> {
        self.globs.iter().find(|g| g.is_match(path))
    }

    pub fn is_empty(&self) -> bool {
        self.globs.is_empty()
    }

    pub fn globs(&self) -> &[Glob] {
        &self.globs
    }
}

fn to_regex(glob: &str) -> Result<String, String> {
    let chars: Vec<char> = glob.chars().collect();
    let mut out = String::from("^");
    let mut i = 0;
    let mut depth = 0usize; // open `{`
    while i < chars.len() {
        let c = chars[i];
        match c {
            '*' if chars.get(i + 1) == Some(&'*') => {
                let at_start = i == 0 || chars[i - 1] == '/';
                let after = chars.get(i + 2).copied();
                if !at_start || !(after.is_none() || after == Some('/')) {
                    return Err(format!("'**' must be a whole path component (at character {})", i + 1));
                }
                if after == Some('/') {
                    // `**/`: zero or more components.
                    out.push_str("(?:[^/]*/)*");
                    i += 3;
                } else if i == 0 {
                    out.push_str(".*");
                    i += 2;
                } else {
                    // `x/**`: below x. The '/' before was already written: make it part of the match.
                    out.truncate(out.len() - 1);
                    out.push_str("(?:/.*)?");
                    i += 2;
                }
                continue;
            }
            '*' => out.push_str("[^/]*"),
            '?' => out.push_str("[^/]"),
            '[' => {
                let mut j = i + 1;
                let mut class = String::from("[");
                if matches!(chars.get(j), Some('!') | Some('^')) {
                    class.push('^');
                    j += 1;
                }
                let start = j;
                while j < chars.len() && (chars[j] != ']' || j == start) {
                    let ch = chars[j];
                    if ch == '/' {
                        return Err("a character class cannot hold '/'".into());
                    }
                    if matches!(ch, '\\' | '[' | '&' | '~' | '^') || (ch == ']' && j == start) {
                        class.push('\\');
                    }
                    class.push(ch);
                    j += 1;
                }
                if j >= chars.len() {
                    return Err(format!("unclosed '[' at character {}", i + 1));
                }
                class.push(']');
                if !class.starts_with("[^") {
                    out.push_str(&class);
                } else {
                    // A negated class never matches '/'.
                    out.push_str(&class[..class.len() - 1]);
                    out.push_str("/]");
                }
                i = j + 1;
                continue;
            }
            '{' => {
                depth += 1;
                if depth > 8 {
                    return Err("more than 8 nested '{'".into());
                }
                out.push_str("(?:");
            }
            ',' if depth > 0 => out.push('|'),
            '}' if depth > 0 => {
                depth -= 1;
                out.push(')');
            }
            '\\' => {
                let Some(&n) = chars.get(i + 1) else {
                    return Err("a trailing '\\'".into());
                };
                out.push_str(&regex::escape(&n.to_string()));
                i += 2;
                continue;
            }
            c => out.push_str(&regex::escape(&c.to_string())),
        }
        i += 1;
    }
    if depth > 0 {
        return Err("unclosed '{'".into());
    }
    out.push('$');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(g: &str, p: &str) -> bool {
        Glob::new(g).unwrap().is_match(p)
    }

    #[test]
    fn stars_and_double_stars() {
        assert!(m("tests/**", "tests/a.py"));
        assert!(m("tests/**", "tests/x/y/z.py"));
        assert!(m("tests/**", "tests"));
        assert!(!m("tests/**", "src/tests.py"));
        assert!(!m("tests/**", "testsuite/a"));
        assert!(m("**/tests/**", "tests/a.py"));
        assert!(m("**/tests/**", "crates/x/tests/it.rs"));
        assert!(!m("**/tests/**", "crates/x/src/tests.rs"));
        assert!(m("**/*_test.go", "a_test.go"));
        assert!(m("**/*_test.go", "pkg/sub/a_test.go"));
        assert!(!m("**/*_test.go", "pkg/a_test.go.orig"));
        assert!(m("**/test_*.py", "x/test_a.py"));
        assert!(!m("*.py", "x/a.py"), "* stays within a component");
        assert!(m("a/**/b", "a/b"));
        assert!(m("a/**/b", "a/x/y/b"));
        assert!(!m("a/**/b", "a/xb"));
        assert!(m("**", "anything/at/all"));
        assert!(m(".github/**", ".github/workflows/ci.yml"));
        assert!(m("repro.toml", "repro.toml"));
        assert!(!m("repro.toml", "sub/repro.toml"));
        assert!(!m("repro.toml", "reproXtoml"), "'.' is literal");
    }

    #[test]
    fn classes_alternatives_and_escapes() {
        assert!(m("**/*.{test,spec}.js", "web/a.spec.js"));
        assert!(m("**/*.{test,spec}.js", "a.test.js"));
        assert!(!m("**/*.{test,spec}.js", "a.js"));
        assert!(m("[Mm]akefile", "Makefile"));
        assert!(m("file[0-9]", "file7"));
        assert!(!m("file[!0-9]", "file7"));
        assert!(!m("a[!x]b", "a/b"), "a negated class never matches '/'");
        assert!(m("a?c", "abc"));
        assert!(!m("a?c", "a/c"));
        assert!(m(r"a\*b", "a*b"));
        assert!(!m(r"a\*b", "axb"));
    }

    #[test]
    fn bad_globs_are_errors() {
        for g in ["", "/abs", "a**", "**b", "a[bc", "a{b,c", "trail\\"] {
            assert!(Glob::new(g).is_err(), "{g}");
        }
        let e = GlobList::new(&["ok/**", "x[y"]).unwrap_err();
        assert_eq!(e.0, "x[y");
    }

    proptest! {
        #[test]
        fn never_panics(g in "\\PC{0,40}", p in "[a-z/._]{0,30}") {
            if let Ok(g) = Glob::new(&g) {
                let _ = g.is_match(&p);
            }
        }

        #[test]
        fn literal_paths_match_themselves(p in "[a-z][a-z0-9_.]{0,8}(/[a-z][a-z0-9_.]{0,8}){0,3}") {
            prop_assert!(m(&p, &p));
        }
    }
}
