//! Parsers for the arguments of `repro run`: `--epoch`, `--memory`, `--bind`, `--env`.
//! Every error names the argument and the expected form.

use std::path::{Path, PathBuf};

use repro_model::run::{BindMount, Epoch, EpochSource};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::SandboxError;

pub use repro_model::run::DEFAULT_EPOCH;

/// Parses an epoch: Unix seconds (`1700000000`, may be negative) or RFC 3339 (`2024-02-29T12:00:00Z`).
pub fn parse_epoch(argument: &str, value: &str) -> Result<i64, SandboxError> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<i64>() {
        // Keep within what RFC 3339 (years 0000-9999) can print.
        if !(-62_167_219_200..=253_402_300_799).contains(&secs) {
            return Err(SandboxError::usage(argument, format!("'{value}' is out of range (years 0000 to 9999)")));
        }
        return Ok(secs);
    }
    OffsetDateTime::parse(v, &Rfc3339).map(|t| t.unix_timestamp()).map_err(|_| {
        SandboxError::usage(
            argument,
            format!("'{value}' is not a date: expected Unix seconds (1700000000) or RFC 3339 (2024-02-29T12:00:00Z)"),
        )
    })
}

/// Formats Unix seconds as RFC 3339 in UTC.
pub fn rfc3339(secs: i64) -> String {
    OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| secs.to_string())
}

/// Decides the run's epoch: `--epoch`, else SOURCE_DATE_EPOCH, else the git HEAD's commit time, else the
/// default.
pub fn resolve_epoch(flag: Option<&str>, source_date_epoch: Option<&str>, cwd: &Path) -> Result<Epoch, SandboxError> {
    resolve_epoch_with(flag, None, source_date_epoch, cwd, None)
}

/// As [`resolve_epoch`], with the project file's `epoch` after the flag and before SOURCE_DATE_EPOCH;
/// `state_dir`: where git HEAD's commit time is cached ([`crate::githead`]).
pub fn resolve_epoch_with(
    flag: Option<&str>,
    project: Option<&str>,
    source_date_epoch: Option<&str>,
    cwd: &Path,
    state_dir: Option<&Path>,
) -> Result<Epoch, SandboxError> {
    let (unix, source) = if let Some(f) = flag {
        (parse_epoch("--epoch", f)?, EpochSource::Flag)
    } else if let Some(p) = project {
        (parse_epoch("repro.toml [run] epoch", p)?, EpochSource::ProjectFile)
    } else if let Some(s) = source_date_epoch.filter(|s| !s.is_empty()) {
        (parse_epoch("SOURCE_DATE_EPOCH", s)?, EpochSource::SourceDateEpoch)
    } else if let Some(t) =
        crate::githead::head_time(cwd, state_dir, &|k| std::env::var_os(k).map(|_| String::new()), &git_head_time)
    {
        (t, EpochSource::GitHead)
    } else {
        (DEFAULT_EPOCH, EpochSource::Default)
    };
    Ok(Epoch { unix, rfc3339: rfc3339(unix), source })
}

/// The commit time of HEAD of the git repository containing `cwd`, if any.
pub fn git_head_time(cwd: &Path) -> Option<i64> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(cwd)
        .args(["log", "-1", "--format=%ct", "HEAD"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// Parses a memory size: `4G`, `512M`, `1.5G`, `65536K`, `1073741824`; K, M, G, T are powers of 1024, an
/// optional `i`/`B` suffix is accepted (`4GiB`).
pub fn parse_memory(argument: &str, value: &str) -> Result<u64, SandboxError> {
    let bad = || {
        SandboxError::usage(
            argument,
            format!("'{value}' is not a size: expected a number with an optional unit K, M, G or T (e.g. 512M, 4G)"),
        )
    };
    let v = value.trim();
    let lower = v.to_ascii_lowercase();
    let stripped = lower.strip_suffix('b').unwrap_or(&lower);
    let stripped = stripped.strip_suffix('i').unwrap_or(stripped);
    let (num, mult) = match stripped.chars().last() {
        Some('k') => (&stripped[..stripped.len() - 1], 1u64 << 10),
        Some('m') => (&stripped[..stripped.len() - 1], 1 << 20),
        Some('g') => (&stripped[..stripped.len() - 1], 1 << 30),
        Some('t') => (&stripped[..stripped.len() - 1], 1 << 40),
        Some(c) if c.is_ascii_digit() && stripped.len() == lower.len() => (stripped, 1),
        _ => return Err(bad()),
    };
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') || num.matches('.').count() > 1 {
        return Err(bad());
    }
    let n: f64 = num.parse().map_err(|_| bad())?;
    let bytes = n * mult as f64;
    if !(bytes.is_finite()) || bytes > (1u64 << 50) as f64 {
        return Err(SandboxError::usage(argument, format!("'{value}' is too large")));
    }
    let bytes = bytes as u64;
    if bytes < (1 << 20) {
        return Err(SandboxError::usage(argument, format!("'{value}' is too small: at least 1M")));
    }
    Ok(bytes)
}

/// `--spin-limit DURATION` (on run, capture and replay) in milliseconds, within the bounds a pack is held to
/// ([`repro_model::run::bad_spin_limit_ms`]).
pub fn parse_spin_limit_ms(value: &str) -> Result<u64, SandboxError> {
    let ms = parse_duration_ms("--spin-limit", value)?;
    match repro_model::run::bad_spin_limit_ms(ms) {
        Some(why) => Err(SandboxError::usage("--spin-limit", format!("'{value}' is {why}"))),
        None => Ok(ms),
    }
}

/// Parses a wall-time duration into milliseconds: `2s`, `500ms`, `1.5m`, `1h`, or a plain number of seconds;
/// `0` is allowed (it turns the option off). At most a week.
pub fn parse_duration_ms(argument: &str, value: &str) -> Result<u64, SandboxError> {
    let bad = || {
        SandboxError::usage(
            argument,
            format!(
                "'{value}' is not a duration: expected a number with an optional unit ms, s, m or h (e.g. 2s, 500ms)"
            ),
        )
    };
    let v = value.trim().to_ascii_lowercase();
    let (num, ms_per) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = v.strip_suffix('m') {
        (n, 60_000.0)
    } else if let Some(n) = v.strip_suffix('h') {
        (n, 3_600_000.0)
    } else {
        (v.as_str(), 1000.0)
    };
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') || num.matches('.').count() > 1 {
        return Err(bad());
    }
    let ms = num.parse::<f64>().map_err(|_| bad())? * ms_per;
    if !ms.is_finite() || ms > 7.0 * 86_400_000.0 {
        return Err(SandboxError::usage(argument, format!("'{value}' is too long: at most a week")));
    }
    Ok(ms.round() as u64)
}

/// Parses `HOST[:GUEST][:ro|rw]`. HOST must exist; relative HOST paths are taken from `cwd`. GUEST defaults
/// to HOST's absolute path and must be absolute. Read-only unless `:rw`. A HOST that is or lies in a secret
/// path (repro-model's `secret_paths`), itself or through its symlinks, is refused naming the rule.
pub fn parse_bind(value: &str, cwd: &Path) -> Result<BindMount, SandboxError> {
    let arg = format!("--bind '{value}'");
    let mut parts: Vec<&str> = value.split(':').collect();
    let mut writable = false;
    if parts.len() > 1 {
        match *parts.last().unwrap_or(&"") {
            "ro" => {
                parts.pop();
            }
            "rw" => {
                writable = true;
                parts.pop();
            }
            _ => {}
        }
    }
    if parts.is_empty() || parts.len() > 2 || parts[0].is_empty() {
        return Err(SandboxError::usage(arg, "expected HOST[:GUEST][:ro|rw]"));
    }
    let host = absolutize(Path::new(parts[0]), cwd);
    if !host.exists() {
        return Err(SandboxError::usage(arg, format!("host path '{}' does not exist", host.display())));
    }
    // Through its symlinks too: a link in the project to ~/.ssh names ~/.ssh.
    let real = std::fs::canonicalize(&host).unwrap_or_else(|_| host.clone());
    if let Some((rule, what)) = [&host, &real].into_iter().find_map(|p| repro_model::secret_paths::secret_path(p)) {
        return Err(SandboxError::usage(
            arg,
            format!("'{}' holds {what} (secret path rule '{rule}'): repro never shows it to a guest", real.display()),
        ));
    }
    let guest = match parts.get(1) {
        Some(&"") => return Err(SandboxError::usage(arg, "expected HOST[:GUEST][:ro|rw]")),
        Some(g) if !g.starts_with('/') => {
            return Err(SandboxError::usage(arg, format!("guest path '{g}' must be absolute")))
        }
        Some(g) => normalize(Path::new(g)),
        None => host.clone(),
    };
    if guest == Path::new("/") {
        return Err(SandboxError::usage(arg, "cannot bind over the guest's root '/'"));
    }
    for p in [&host, &guest] {
        if p.to_string_lossy().contains(',') {
            return Err(SandboxError::usage(
                &arg,
                format!("path '{}' contains ',', which mounts cannot take", p.display()),
            ));
        }
    }
    Ok(BindMount { host: host.to_string_lossy().into_owned(), guest: guest.to_string_lossy().into_owned(), writable })
}

fn absolutize(p: &Path, cwd: &Path) -> PathBuf {
    let joined = if p.is_absolute() { p.to_path_buf() } else { cwd.join(p) };
    normalize(&joined)
}

/// Removes `.` and resolves `..` lexically.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// One `--env` argument: `NAME` (pass the host's value through) or `NAME=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvSpec {
    Pass(String),
    Set(String, String),
}

/// Parses `--env NAME` or `--env NAME=VALUE`. Names are letters, digits and `_`, not starting with a digit.
pub fn parse_env(value: &str) -> Result<EnvSpec, SandboxError> {
    let (name, val) = match value.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (value, None),
    };
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        // The value is not repeated: it may be a secret.
        let shown = if val.is_some() { format!("{name}=...") } else { name.to_string() };
        return Err(SandboxError::usage(
            format!("--env '{shown}'"),
            "expected NAME or NAME=VALUE, where NAME is letters, digits and '_'",
        ));
    }
    Ok(match val {
        Some(v) => EnvSpec::Set(name.to_string(), v.to_string()),
        None => EnvSpec::Pass(name.to_string()),
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn durations_take_units_and_refuse_garbage() {
        assert_eq!(parse_duration_ms("--stuck-after", "2s").unwrap(), 2000);
        assert_eq!(parse_duration_ms("--stuck-after", "500ms").unwrap(), 500);
        assert_eq!(parse_duration_ms("--stuck-after", "1.5m").unwrap(), 90_000);
        assert_eq!(parse_duration_ms("--stuck-after", "1h").unwrap(), 3_600_000);
        assert_eq!(parse_duration_ms("--stuck-after", "3").unwrap(), 3000);
        assert_eq!(parse_duration_ms("--stuck-after", "0").unwrap(), 0);
        for bad in ["", "s", "-1s", "2x", "1.2.3s", "8d"] {
            let e = parse_duration_ms("--stuck-after", bad).unwrap_err().to_string();
            assert!(e.contains("--stuck-after"), "{bad}: {e}");
        }
        assert!(parse_duration_ms("--stuck-after", "200h").unwrap_err().to_string().contains("at most a week"));
    }

    #[test]
    fn spin_limits_are_a_millisecond_to_an_hour() {
        assert_eq!(parse_spin_limit_ms("2s").unwrap(), 2000);
        assert_eq!(parse_spin_limit_ms("1ms").unwrap(), 1);
        assert_eq!(parse_spin_limit_ms("1h").unwrap(), 3_600_000);
        for bad in ["0", "0.0001s", "2h", "soon"] {
            let e = parse_spin_limit_ms(bad).unwrap_err().to_string();
            assert!(e.contains("--spin-limit") && e.contains(bad), "{bad}: {e}");
        }
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn epochs_parse_from_seconds_and_rfc3339() {
        assert_eq!(parse_epoch("--epoch", "0").unwrap(), 0);
        assert_eq!(parse_epoch("--epoch", "2025-01-01T00:00:00Z").unwrap(), DEFAULT_EPOCH);
        assert_eq!(parse_epoch("--epoch", "2025-01-01T01:00:00+01:00").unwrap(), DEFAULT_EPOCH);
        let e = parse_epoch("--epoch", "yesterday").unwrap_err().to_string();
        assert!(e.starts_with("--epoch: 'yesterday' is not a date"), "{e}");
        assert!(parse_epoch("--epoch", "99999999999999").is_err());
    }

    #[test]
    fn epoch_resolution_order() {
        let dir = std::env::temp_dir();
        let e = resolve_epoch(Some("5"), Some("7"), &dir).unwrap();
        assert_eq!((e.unix, e.source), (5, EpochSource::Flag));
        let e = resolve_epoch(None, Some("7"), &dir).unwrap();
        assert_eq!((e.unix, e.source), (7, EpochSource::SourceDateEpoch));
        let e = resolve_epoch_with(None, Some("6"), Some("7"), &dir, None).unwrap();
        assert_eq!((e.unix, e.source), (6, EpochSource::ProjectFile));
        let e = resolve_epoch_with(Some("5"), Some("6"), Some("7"), &dir, None).unwrap();
        assert_eq!((e.unix, e.source), (5, EpochSource::Flag));
        let bad = resolve_epoch_with(None, Some("soon"), None, &dir, None).unwrap_err().to_string();
        assert!(bad.starts_with("repro.toml [run] epoch: 'soon' is not a date"), "{bad}");
        assert!(resolve_epoch(None, Some("x"), &dir).unwrap_err().to_string().starts_with("SOURCE_DATE_EPOCH"));
        let e = resolve_epoch(None, None, Path::new("/")).unwrap();
        assert_eq!(
            (e.unix, e.source, e.rfc3339.as_str()),
            (DEFAULT_EPOCH, EpochSource::Default, "2025-01-01T00:00:00Z")
        );
    }

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_memory("--memory", "4G").unwrap(), 4 << 30);
        assert_eq!(parse_memory("--memory", "512m").unwrap(), 512 << 20);
        assert_eq!(parse_memory("--memory", "1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_memory("--memory", "1048576").unwrap(), 1 << 20);
        for bad in ["", "G", "4X", "-1G", "1..5G", "4 G", "100"] {
            let e = parse_memory("--memory", bad).unwrap_err().to_string();
            assert!(e.starts_with("--memory: "), "{bad}: {e}");
        }
    }

    #[test]
    fn binds() {
        let cwd = std::env::temp_dir();
        let b = parse_bind("/usr", &cwd).unwrap();
        assert_eq!((b.host.as_str(), b.guest.as_str(), b.writable), ("/usr", "/usr", false));
        let b = parse_bind("/usr:/opt/u:rw", &cwd).unwrap();
        assert_eq!((b.guest.as_str(), b.writable), ("/opt/u", true));
        let b = parse_bind("/usr:ro", &cwd).unwrap();
        assert_eq!((b.guest.as_str(), b.writable), ("/usr", false));
        let e = parse_bind("/no/such/path", &cwd).unwrap_err().to_string();
        assert_eq!(e, "--bind '/no/such/path': host path '/no/such/path' does not exist");
        assert!(parse_bind("/usr:rel", &cwd).unwrap_err().to_string().contains("must be absolute"));
        assert!(parse_bind("/usr:/:rw", &cwd).is_err());
        assert!(parse_bind(":", &cwd).is_err());
    }

    #[test]
    fn a_secret_path_is_not_bound_even_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let keys = t.path().join("home/.ssh");
        std::fs::create_dir_all(&keys).unwrap();
        std::os::unix::fs::symlink(&keys, t.path().join("innocent")).unwrap();
        for value in [keys.to_str().unwrap(), "innocent", "innocent:/opt/x"] {
            let e = parse_bind(value, t.path()).unwrap_err().to_string();
            assert!(e.contains("holds ssh keys (secret path rule '.ssh'): repro never shows it"), "{value}: {e}");
        }
        assert!(parse_bind("/etc/shadow", t.path()).unwrap_err().to_string().contains("rule '/etc/shadow'"));
        assert!(parse_bind(t.path().join("home").to_str().unwrap(), t.path()).is_ok());
    }

    #[test]
    fn env_specs() {
        assert_eq!(parse_env("FOO").unwrap(), EnvSpec::Pass("FOO".into()));
        assert_eq!(parse_env("FOO=a=b").unwrap(), EnvSpec::Set("FOO".into(), "a=b".into()));
        assert!(parse_env("1X=2").is_err());
        assert!(parse_env("=x").is_err());
        assert!(parse_env("A-B").is_err());
    }

    proptest! {
        #[test]
        fn memory_never_panics(s in "\\PC{0,12}") {
            if let Err(e) = parse_memory("--memory", &s) {
                prop_assert!(matches!(e, crate::SandboxError::Usage { .. }), "{}", e);
            }
        }

        #[test]
        fn memory_roundtrips_megabytes(n in 1u64..1_000_000) {
            prop_assert_eq!(parse_memory("--memory", &format!("{n}M")).unwrap(), n << 20);
        }

        #[test]
        fn epoch_roundtrips_through_rfc3339(secs in -62_000_000_000i64..253_000_000_000) {
            prop_assert_eq!(parse_epoch("--epoch", &rfc3339(secs)).unwrap(), secs);
        }

        #[test]
        fn bind_never_panics(s in "\\PC{0,30}") {
            // Either answer is right for arbitrary text: the property is that it returns.
            let _ = parse_bind(&s, Path::new("/"));
        }
    }
}
