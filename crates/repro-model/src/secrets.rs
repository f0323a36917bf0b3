//! Secret environment values: which variables count as secret, and the marker their values are stored as.
//!
//! A variable is secret when its name contains, ignoring case, one of [`SECRET_NAME_PARTS`] (AUTHOR aside, which
//! is not AUTH) or one of the
//! comma-separated entries of `$REPRO_SECRET_ENV` (read by the repro process, e.g. `REPRO_SECRET_ENV=DSN,PRIVATE`).
//! Its value is stored in `run.json`, in packs and in every report as `<redacted:blake3:XXXXXXXX>`: the first
//! 32 bits of a blake3 *keyed* hash of the value. The key is 32 random bytes kept in
//! `$XDG_CONFIG_HOME/repro/secret.key` (else `~/.config/repro/secret.key`, mode 0600, made on first use), so
//! two runs of the same user with the same value show the same marker, while someone who only has a run record
//! or a pack cannot test guesses of a short value against the marker. Markers made on different machines (or
//! by different users) do not compare. When the key cannot be kept, repro says so once and uses a key of its
//! own process: markers then compare only within that process.
//!
//! The guest itself always gets the real value.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Name parts that make a variable secret (matched as case-insensitive substrings).
pub const SECRET_NAME_PARTS: [&str; 9] =
    ["TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH", "SESSION", "COOKIE"];

/// The variable that adds name parts: `REPRO_SECRET_ENV=PART1,PART2`.
pub const EXTRA_ENV: &str = "REPRO_SECRET_ENV";

const MARKER_PREFIX: &str = "<redacted:blake3:";

/// The extra name parts of this process (`$REPRO_SECRET_ENV`), upper-cased.
fn extra_parts() -> &'static [String] {
    static EXTRA: OnceLock<Vec<String>> = OnceLock::new();
    EXTRA.get_or_init(|| parse_extra(&std::env::var(EXTRA_ENV).unwrap_or_default()))
}

/// Parses a `REPRO_SECRET_ENV` value: comma-separated name parts; empty entries are ignored.
pub fn parse_extra(v: &str) -> Vec<String> {
    v.split(',').map(|s| s.trim().to_ascii_uppercase()).filter(|s| !s.is_empty()).collect()
}

/// Whether a variable named `name` is secret, with `extra` name parts besides the built-in ones.
pub fn is_secret_name_with(name: &str, extra: &[String]) -> bool {
    // AUTHOR is not AUTH (GIT_AUTHOR_NAME, GIT_AUTHOR_DATE); GIT_AUTHOR_TOKEN still matches TOKEN.
    let up = name.to_ascii_uppercase();
    let builtin = up.replace("AUTHOR", "_");
    SECRET_NAME_PARTS.iter().any(|p| builtin.contains(p)) || extra.iter().any(|p| up.contains(p.as_str()))
}

/// Whether a variable named `name` is secret (built-in parts and `$REPRO_SECRET_ENV`).
pub fn is_secret_name(name: &str) -> bool {
    is_secret_name_with(name, extra_parts())
}

/// Whether `v` is a redaction marker (a value that was not stored).
pub fn is_marker(v: &str) -> bool {
    v.strip_prefix(MARKER_PREFIX)
        .and_then(|r| r.strip_suffix('>'))
        .is_some_and(|h| h.len() == 8 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The marker of `value` under `key`.
pub fn marker_with(key: &[u8; 32], value: &str) -> String {
    let h = blake3::keyed_hash(key, value.as_bytes()).to_hex();
    format!("{MARKER_PREFIX}{}>", &h[..8])
}

/// The marker of `value` under this user's key.
pub fn marker(value: &str) -> String {
    marker_with(key(), value)
}

/// `value` itself when `name` is not secret (or it is already a marker), else its marker.
pub fn redact_value(name: &str, value: &str) -> String {
    if is_secret_name(name) && !is_marker(value) {
        marker(value)
    } else {
        value.to_string()
    }
}

/// The environment with the values of secret variables replaced by their markers.
pub fn redact_env(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter().map(|(k, v)| (k.clone(), redact_value(k, v))).collect()
}

/// `NAME=VALUE` pairs redacted.
pub fn redact_pairs(env: &[(String, String)]) -> Vec<(String, String)> {
    env.iter().map(|(k, v)| (k.clone(), redact_value(k, v))).collect()
}

/// The names whose values are markers (variables that must be supplied to run again), sorted.
pub fn redacted_names(env: &BTreeMap<String, String>) -> Vec<String> {
    env.iter().filter(|(_, v)| is_marker(v)).map(|(k, _)| k.clone()).collect()
}

/// Where this user's key is kept.
pub fn key_path() -> Option<PathBuf> {
    let xdg = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()).map(PathBuf::from);
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".config"));
    xdg.or(home).map(|d| d.join("repro").join("secret.key"))
}

fn random_key() -> std::io::Result<[u8; 32]> {
    let mut k = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut k)?;
    Ok(k)
}

/// Reads the key at `path`, or makes it (mode 0600, never replacing one another process made meanwhile).
pub fn load_or_create_key(path: &std::path::Path) -> std::io::Result<[u8; 32]> {
    use std::os::unix::fs::OpenOptionsExt;
    let read = |p: &std::path::Path| -> std::io::Result<[u8; 32]> {
        let d = std::fs::read(p)?;
        d.as_slice().try_into().map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("expected 32 bytes, found {}", d.len()))
        })
    };
    match read(path) {
        Ok(k) => return Ok(k),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)?;
    let k = random_key()?;
    let tmp = dir.join(format!(".secret.key.tmp-{}", std::process::id()));
    let res = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(&k)?;
        f.sync_all()?;
        // A hard link fails when another process made the key first: then that one is used.
        std::fs::hard_link(&tmp, path)
    })();
    let _ = std::fs::remove_file(&tmp);
    match res {
        Ok(()) => Ok(k),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(path),
        Err(e) => Err(e),
    }
}

/// This user's key (see the module documentation).
fn key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(|| {
        let kept = match key_path() {
            Some(p) => load_or_create_key(&p).map_err(|e| format!("{}: {e}", p.display())),
            None => Err("neither XDG_CONFIG_HOME nor HOME is set".to_string()),
        };
        kept.unwrap_or_else(|why| {
            eprintln!(
                "[repro] warning: cannot keep the key of secret markers ({why}); markers of secret variables \
                 will not compare with other runs'"
            );
            random_key().unwrap_or_else(|_| {
                // No /dev/urandom: the time and pid still make the key unknown to a reader of the records.
                let mut h = blake3::Hasher::new();
                h.update(&format!("{:?}{}", std::time::SystemTime::now(), std::process::id()).into_bytes());
                *h.finalize().as_bytes()
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_case_insensitive_and_extendable() {
        for n in [
            "API_TOKEN",
            "github_token",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
            "Passwd",
            "SSH_AUTH_SOCK",
            "AUTHOR_KEY",
        ] {
            assert!(is_secret_name_with(n, &[]), "{n}");
        }
        for n in ["PATH", "TZ", "HOME", "LANG", "SOURCE_DATE_EPOCH", "DATABASE_URL", "GIT_AUTHOR_DATE"] {
            assert!(!is_secret_name_with(n, &[]), "{n}");
        }
        let extra = parse_extra(" dsn, ,Url");
        assert_eq!(extra, vec!["DSN".to_string(), "URL".to_string()]);
        assert!(is_secret_name_with("SENTRY_DSN", &extra));
        assert!(is_secret_name_with("DATABASE_URL", &extra));
    }

    #[test]
    fn markers_are_keyed_stable_and_recognized() {
        let (k1, k2) = ([1u8; 32], [2u8; 32]);
        let m = marker_with(&k1, "hunter2");
        assert!(is_marker(&m), "{m}");
        assert_eq!(m, marker_with(&k1, "hunter2"), "same key, same value: same marker");
        assert_ne!(m, marker_with(&k1, "hunter3"));
        assert_ne!(m, marker_with(&k2, "hunter2"), "the marker depends on the key");
        let bare = blake3::hash(b"hunter2").to_hex();
        assert!(!m.contains(&bare[..8]), "not a bare hash of the value");
        assert!(!m.contains("hunter2"));
        for v in ["", "x", "<redacted:blake3:xyz>", "<redacted:blake3:1234567>", "<redacted:blake3:123456789>"] {
            assert!(!is_marker(v), "{v}");
        }
    }

    #[test]
    fn key_is_made_once_with_mode_0600_and_reused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/secret.key");
        let k = load_or_create_key(&p).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(load_or_create_key(&p).unwrap(), k);
        std::fs::write(&p, b"short").unwrap();
        assert!(load_or_create_key(&p).is_err(), "a damaged key is an error, not silently replaced");
    }

    #[test]
    fn redaction_keeps_names_and_plain_values() {
        // The key is made under XDG_CONFIG_HOME: a temporary one, not the tester's home.
        let d = tempfile::tempdir().unwrap();
        std::env::set_var("XDG_CONFIG_HOME", d.path());
        let env: BTreeMap<String, String> =
            [("API_TOKEN", "hunter2-xyz"), ("TZ", "UTC")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let r = redact_env(&env);
        assert_eq!(r["TZ"], "UTC");
        assert!(is_marker(&r["API_TOKEN"]));
        assert_eq!(redact_env(&r), r, "redacting twice changes nothing");
        assert_eq!(redacted_names(&r), vec!["API_TOKEN".to_string()]);
    }
}
