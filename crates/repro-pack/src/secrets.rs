//! Credentials in what a capture would write: files of the closure and the recorded output.
//!
//! A file is a secret when its path is a well-known credentials file (`.netrc`, `.pypirc`, `.git-credentials`,
//! `.docker/config.json`, `.aws/credentials`) or its content holds a well-known credential shape: a private key
//! header, an AWS access key id, a GitHub or a Slack token. Output is also searched for the values of the run's
//! secret variables. What is found is named, never shown. Content is scanned once per digest: the findings are
//! kept in a cache (`<cache>/repro/secret-scan.json`), so a file the capture already knows costs no read.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::bytes::Regex;

pub use repro_model::manifest::SecretsMode;

/// Credential files recognized by path (suffix of the absolute path) and what they are.
pub const CREDENTIAL_FILES: [(&str, &str); 5] = [
    ("/.netrc", "a .netrc credentials file"),
    ("/.pypirc", "a .pypirc credentials file"),
    ("/.git-credentials", "a git credentials file"),
    ("/.docker/config.json", "a Docker credentials file"),
    ("/.aws/credentials", "an AWS credentials file"),
];

/// What a credentials file at `path` is, if it is one.
pub fn credential_file(path: &str) -> Option<&'static str> {
    CREDENTIAL_FILES.iter().find(|(suffix, _)| path.ends_with(suffix)).map(|(_, what)| *what)
}

/// The credential shapes, in the order of [`KINDS`].
fn shapes() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(concat!(
            // A private key: the header to its end line, or, without one, the header and the base64 lines after it.
            r"(?-u)(?P<pk>-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY( BLOCK)?-----",
            r"(?:(?s:.{0,16384}?)-----END[A-Z0-9 ]{0,40} PRIVATE KEY( BLOCK)?-----|(?:\r?\n[A-Za-z0-9+/=]{4,})*))",
            r"|(?P<aws>\b(?:AKIA|ASIA)[A-Z0-9]{16}\b)",
            r"|(?P<gh>\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b)",
            r"|(?P<slack>\bxox[abprs]-[A-Za-z0-9-]{10,255})",
        ))
        .expect("the credential shapes are a valid regex")
    })
}

/// The kinds of credential found, by capture group name.
pub const KINDS: [(&str, &str); 4] =
    [("pk", "a private key"), ("aws", "an AWS access key id"), ("gh", "a GitHub token"), ("slack", "a Slack token")];

fn kind_of(c: &regex::bytes::Captures) -> &'static str {
    KINDS.iter().find(|(g, _)| c.name(g).is_some()).map(|(_, w)| *w).unwrap_or("a credential")
}

/// One credential found: what it is and on which line (1-based).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Finding {
    pub what: String,
    pub line: usize,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (line {})", self.what, self.line)
    }
}

fn line_at(data: &[u8], offset: usize) -> usize {
    1 + data[..offset].iter().filter(|&&b| b == b'\n').count()
}

/// The credentials in `data` ([`scan`]).
fn credentials(data: &[u8]) -> impl Iterator<Item = regex::bytes::Captures<'_>> {
    let elf = data.starts_with(b"\x7fELF");
    shapes().captures_iter(data).filter(move |c| !(elf && c.name("pk").is_some_and(|m| !m.as_bytes().contains(&b'\n'))))
}

/// The credential shapes in `data`. In an ELF file a private key's header alone (no base64 line after it, no end
/// line) is a string constant of a program that parses keys (cargo, ssh, openssl), not a key: it is not a
/// finding there; a key embedded in a program, with its body, still is.
pub fn scan(data: &[u8]) -> Vec<Finding> {
    credentials(data)
        .map(|c| Finding { what: kind_of(&c).into(), line: line_at(data, c.get(0).map_or(0, |m| m.start())) })
        .collect()
}

/// Where a distribution installs programs and libraries from its public packages (`/usr/local` is the host's own).
const DISTRIBUTED_DIRS: [&str; 6] = ["/usr/", "/lib/", "/lib64/", "/lib32/", "/bin/", "/sbin/"];

/// Whether `findings` in the file at `path` (whose content starts with `head`) are a distributed program's own test
/// vectors rather than anyone's secret: every finding is a private key, and the file is an ELF object installed in
/// a system directory outside `/usr/local`. GnuTLS's, OpenSSL's and NSS's self-tests embed whole keys; such a key
/// ships in a public package, and leaving the library out of a pack would make every replay of a program linking
/// it fail (cmake, curl, git's https helper).
pub fn is_distributed_test_vector(path: &str, head: &[u8], findings: &[Finding]) -> bool {
    !findings.is_empty()
        && findings.iter().all(|f| f.what == "a private key")
        && head.starts_with(b"\x7fELF")
        && !path.starts_with("/usr/local/")
        && DISTRIBUTED_DIRS.iter().any(|d| path.starts_with(d))
}

/// `data` with each credential shape and each of `values` (`(name, value)` of secret variables; values shorter
/// than 4 bytes are left alone: they would match everywhere) replaced by `<redacted:WHAT>`, and what was found.
pub fn redact(data: &[u8], values: &[(String, String)]) -> (Vec<u8>, Vec<Finding>) {
    let mut found = Vec::new();
    let mut out = Vec::with_capacity(data.len());
    let mut last = 0;
    for c in credentials(data) {
        let Some(m) = c.get(0) else { continue };
        let what = kind_of(&c);
        found.push(Finding { what: what.into(), line: line_at(data, m.start()) });
        out.extend_from_slice(&data[last..m.start()]);
        out.extend_from_slice(
            format!("<redacted:{}>", what.trim_start_matches("a ").trim_start_matches("an ")).as_bytes(),
        );
        last = m.end();
    }
    out.extend_from_slice(&data[last..]);
    for (name, value) in values.iter().filter(|(_, v)| v.len() >= 4) {
        let needle = value.as_bytes();
        let mut next = Vec::with_capacity(out.len());
        let mut i = 0;
        let mut first_line = None;
        while i < out.len() {
            if out[i..].starts_with(needle) {
                first_line.get_or_insert_with(|| line_at(&out, i));
                next.extend_from_slice(format!("<redacted:env:{name}>").as_bytes());
                i += needle.len();
            } else {
                next.push(out[i]);
                i += 1;
            }
        }
        if let Some(line) = first_line {
            found.push(Finding { what: format!("the value of {name}"), line });
            out = next;
        }
    }
    (out, found)
}

/// The secret variables of an environment whose values are real (not markers): what output is searched for.
pub fn secret_values(env: &BTreeMap<String, String>) -> Vec<(String, String)> {
    env.iter()
        .filter(|(k, v)| repro_model::secrets::is_secret_name(k) && !repro_model::secrets::is_marker(v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Findings by content digest, kept between captures (a pure cache, saved atomically, best effort).
#[derive(Debug, Default)]
pub struct ScanCache {
    path: Option<PathBuf>,
    entries: BTreeMap<String, Vec<Finding>>,
    dirty: bool,
}

impl ScanCache {
    /// The cache of this version of the shapes: a change of what is a finding (2: a key's header alone in a
    /// program is not) starts a new file, so no finding of older rules is reused.
    pub fn default_path() -> PathBuf {
        crate::store::cache_dir().join("secret-scan-2.json")
    }

    pub fn load(path: impl Into<PathBuf>) -> ScanCache {
        let path = path.into();
        // A pure cache: missing or damaged, it starts empty and files are scanned again.
        let entries = fs::read(&path).ok().and_then(|d| serde_json::from_slice(&d).ok()).unwrap_or_default();
        ScanCache { path: Some(path), entries, dirty: false }
    }

    /// The findings of the content with `digest`, scanning `read()` when it is not known yet.
    pub fn findings(&mut self, digest: &str, read: impl FnOnce() -> Option<Vec<u8>>) -> Option<Vec<Finding>> {
        if let Some(f) = self.entries.get(digest) {
            return Some(f.clone());
        }
        let data = read()?;
        let f = scan(&data);
        self.remember(digest, f.clone());
        Some(f)
    }

    pub fn known(&self, digest: &str) -> bool {
        self.entries.contains_key(digest)
    }

    pub fn remember(&mut self, digest: &str, findings: Vec<Finding>) {
        self.entries.insert(digest.to_string(), findings);
        self.dirty = true;
    }

    /// Saves the cache when it changed, merged with what another capture saved meanwhile.
    pub fn save(&self) {
        let Some(p) = &self.path else { return };
        if !self.dirty {
            return;
        }
        // What another capture saved, if it can be read (a damaged cache is replaced).
        let mut all: BTreeMap<String, Vec<Finding>> =
            fs::read(p).ok().and_then(|d| serde_json::from_slice(&d).ok()).unwrap_or_default();
        all.extend(self.entries.iter().map(|(k, v)| (k.clone(), v.clone())));
        let Ok(json) = serde_json::to_vec(&all) else { return };
        let dir = p.parent().unwrap_or(Path::new("."));
        // Best effort: a cache that cannot be saved only costs a scan next time.
        let _ = fs::create_dir_all(dir);
        if let Ok(mut tmp) = tempfile::NamedTempFile::new_in(dir) {
            use std::io::Write;
            if tmp.write_all(&json).is_ok() {
                let _ = tmp.persist(p); // best effort, as above
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GH: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";

    #[test]
    fn finds_each_shape_and_names_it() {
        let text = format!(
            "ok\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n-----END OPENSSH PRIVATE KEY-----\nid AKIAIOSFODNN7EXAMPLE\ntoken={GH}\nslack xoxb-123456789012-abc\npat github_pat_11ABCDEFG0123456789_abcdefghij\n"
        );
        let f = scan(text.as_bytes());
        let what: Vec<&str> = f.iter().map(|f| f.what.as_str()).collect();
        assert_eq!(
            what,
            ["a private key", "an AWS access key id", "a GitHub token", "a Slack token", "a GitHub token"],
            "{f:?}"
        );
        assert_eq!(f[0].line, 2);
        assert_eq!(f[1].line, 5);
        let (red, found) = redact(text.as_bytes(), &[]);
        let red = String::from_utf8(red).unwrap();
        assert_eq!(found, f);
        for secret in ["PRIVATE KEY", "b3BlbnNzaC1rZXk", "AKIAIOSFODNN7EXAMPLE", GH, "xoxb-1234", "github_pat_11"] {
            assert!(!red.contains(secret), "{secret} in {red}");
        }
        assert!(red.starts_with("ok\n<redacted:private key>\nid <redacted:AWS access key id>\n"), "{red}");
    }

    #[test]
    fn a_header_alone_is_redacted_and_ordinary_text_is_not() {
        let (red, found) = redact(b"x -----BEGIN RSA PRIVATE KEY----- y", &[]);
        assert_eq!(red, b"x <redacted:private key> y");
        assert_eq!(found.len(), 1);
        let (red, _) =
            redact(b"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBfakefakefakefake\nAwEHoUQDQgAE\nnot base64!\n", &[]);
        assert_eq!(red, b"<redacted:private key>\nnot base64!\n", "without an end line, the base64 lines go too");
        let mut program = b"\x7fELF\x02\x01\x01\0-----BEGIN OPENSSH PRIVATE KEY-----\0Multiple keys".to_vec();
        assert!(scan(&program).is_empty(), "a header alone in a program is a string constant");
        program.extend_from_slice(b"\0-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBfakefakefakefake\n");
        assert_eq!(scan(&program).len(), 1, "a key with its body in a program is found");
        for plain in [
            &b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"[..],
            b"AKIA too short",
            b"ghp_short",
            b"xoxb-",
            b"MYAKIAIOSFODNN7EXAMPLEX",
        ] {
            assert!(scan(plain).is_empty(), "{}", String::from_utf8_lossy(plain));
        }
    }

    #[test]
    fn keys_inside_a_distributed_library_are_its_test_vectors() {
        let mut lib = b"\x7fELF\x02\x01\x01\0".to_vec();
        lib.extend_from_slice(
            b"\0-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBfakefakefakefake\n-----END EC PRIVATE KEY-----\0",
        );
        let found = scan(&lib);
        assert_eq!(found.len(), 1);
        let gnutls = "/usr/lib/x86_64-linux-gnu/libgnutls.so.30";
        assert!(is_distributed_test_vector(gnutls, &lib, &found));
        assert!(is_distributed_test_vector("/lib/x86_64-linux-gnu/libx.so", &lib, &found));
        assert!(!is_distributed_test_vector("/usr/local/lib/libmine.so", &lib, &found), "the host's own install");
        assert!(!is_distributed_test_vector("/root/proj/target/debug/app", &lib, &found), "the user's program");
        let text = b"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBfakefakefakefake\n-----END EC PRIVATE KEY-----\n";
        assert!(!is_distributed_test_vector("/usr/share/doc/x/key.pem", text, &scan(text)), "not a program");
        let mut with_token = lib.clone();
        with_token.extend_from_slice(b" AKIAIOSFODNN7EXAMPLE ");
        assert!(!is_distributed_test_vector(gnutls, &with_token, &scan(&with_token)), "a token is no test vector");
        assert!(!is_distributed_test_vector(gnutls, &lib, &[]));
    }

    #[test]
    fn secret_values_are_redacted_by_name() {
        let values = vec![("API_TOKEN".to_string(), "hunter2-xyz".to_string()), ("PIN".to_string(), "1".to_string())];
        let (red, found) = redact(b"a hunter2-xyz b\nhunter2-xyz 1", &values);
        assert_eq!(String::from_utf8(red).unwrap(), "a <redacted:env:API_TOKEN> b\n<redacted:env:API_TOKEN> 1");
        assert_eq!(found, vec![Finding { what: "the value of API_TOKEN".into(), line: 1 }]);
    }

    #[test]
    fn credential_files_by_path() {
        assert!(credential_file("/root/.netrc").is_some());
        assert!(credential_file("/home/u/.docker/config.json").is_some());
        assert!(credential_file("/w/.aws/credentials").is_some());
        assert!(credential_file("/w/netrc").is_none());
        assert!(credential_file("/w/.docker/other.json").is_none());
    }

    #[test]
    fn scan_cache_remembers_by_digest() {
        let d = tempfile::tempdir().unwrap();
        let mut c = ScanCache::load(d.path().join("s.json"));
        assert_eq!(c.findings("d1", || Some(GH.as_bytes().to_vec())).unwrap().len(), 1);
        c.save();
        let mut c = ScanCache::load(d.path().join("s.json"));
        assert!(c.known("d1"));
        assert_eq!(c.findings("d1", || panic!("not read again")).unwrap().len(), 1);
    }

    proptest! {
        #[test]
        fn a_token_anywhere_in_any_bytes_is_found_and_removed(
            pre in proptest::collection::vec(any::<u8>(), 0..200),
            post in proptest::collection::vec(any::<u8>(), 0..200),
            body in "[A-Za-z0-9]{36}",
        ) {
            let token = format!("ghp_{body}");
            let mut data = pre.clone();
            data.push(b'\n');
            data.extend_from_slice(token.as_bytes());
            data.push(b' ');
            data.extend_from_slice(&post);
            let (red, found) = redact(&data, &[]);
            prop_assert!(!found.is_empty());
            prop_assert!(!red.windows(token.len()).any(|w| w == token.as_bytes()));
        }

        #[test]
        fn redact_never_panics_and_is_identity_without_findings(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let (red, found) = redact(&data, &[("K".into(), "zzzz".into())]);
            if found.is_empty() {
                prop_assert_eq!(red, data);
            }
        }
    }
}
