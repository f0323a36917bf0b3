//! Run outputs as MCP resources: `repro://runs/<id>/stdout`, `repro://runs/<id>/stderr` and
//! `repro://runs/<id>/changes` (the run's `changes.json`), read from the run directories under the state directory.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::tools::run_id_ok;

/// The files of a run a resource names.
pub const KINDS: [(&str, &str, &str); 3] = [
    ("stdout", "stdout", "text/plain"),
    ("stderr", "stderr", "text/plain"),
    ("changes", "changes.json", "application/json"),
];

/// The most bytes a resource returns (the rest is cut, and `_meta.truncated` says so).
pub const MAX_BYTES: u64 = 8 << 20;

/// `repro://runs/<id>/<kind>`.
pub fn uri(id: &str, kind: &str) -> String {
    format!("repro://runs/{id}/{kind}")
}

/// What a resource URI names: the run id and the file of its directory.
pub fn parse_uri(uri: &str) -> Option<(&str, &'static str, &'static str)> {
    let rest = uri.strip_prefix("repro://runs/")?;
    let (id, kind) = rest.split_once('/')?;
    if !run_id_ok(id) || id == "last" {
        return None;
    }
    let (_, file, mime) = KINDS.iter().find(|(k, _, _)| *k == kind)?;
    Some((id, file, mime))
}

/// The directory of run `id`: `<state>/runs/<id>`, or the run of a hunt or explain
/// (`<state>/{hunts,explains}/*/runs/<id>`). Never a symbolic link.
pub fn run_dir(state: &Path, id: &str) -> Option<PathBuf> {
    if !run_id_ok(id) {
        return None;
    }
    let is_dir = |p: &Path| std::fs::symlink_metadata(p).map(|m| m.is_dir()).unwrap_or(false);
    let direct = state.join("runs").join(id);
    if is_dir(&direct) {
        return Some(direct);
    }
    for kind in ["hunts", "explains"] {
        let Ok(rd) = std::fs::read_dir(state.join(kind)) else { continue };
        for e in rd.flatten() {
            let p = e.path().join("runs").join(id);
            if is_dir(&p) {
                return Some(p);
            }
        }
    }
    None
}

/// A resource's bytes (at most [`MAX_BYTES`]) and whether they were cut.
pub fn read(state: &Path, uri: &str) -> Result<(Vec<u8>, bool, &'static str), String> {
    let (id, file, mime) =
        parse_uri(uri).ok_or_else(|| format!("{uri}: expected repro://runs/<id>/stdout, stderr or changes"))?;
    let dir = run_dir(state, id).ok_or_else(|| format!("{uri}: no run {id} in {}", state.display()))?;
    let path = dir.join(file);
    let meta = std::fs::symlink_metadata(&path).map_err(|e| format!("{uri}: {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{uri}: {} is not a regular file", path.display()));
    }
    let mut data = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(MAX_BYTES).read_to_end(&mut data))
        .map_err(|e| format!("{uri}: cannot read {}: {e}", path.display()))?;
    Ok((data, meta.len() > MAX_BYTES, mime))
}

/// The runs of the state directory, newest first, at most `limit`.
pub fn recent_runs(state: &Path, limit: usize) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(state.join("runs"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| run_id_ok(n))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids.reverse();
    ids.truncate(limit);
    ids
}

/// The run directories a result names (any string that is a path `.../runs/<id>` inside the state directory),
/// in order of appearance, and the record's own `id` when it is a run of the state directory.
pub fn runs_in(state: &Path, v: &Value) -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    let mut add = |id: &str, dir: PathBuf| {
        if !out.iter().any(|(i, _)| i == id) {
            out.push((id.to_string(), dir));
        }
    };
    if let Some(id) = v.get("id").and_then(Value::as_str) {
        if let Some(dir) = run_dir(state, id) {
            add(id, dir);
        }
    }
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => {
                let p = Path::new(s);
                let in_runs = p.parent().and_then(Path::file_name).is_some_and(|n| n == "runs");
                if in_runs && p.starts_with(state) {
                    if let Some(id) = p.file_name().and_then(|n| n.to_str()) {
                        if run_dir(state, id).is_some() {
                            add(id, p.to_path_buf());
                        }
                    }
                }
            }
            Value::Array(a) => stack.extend(a.iter().rev()),
            Value::Object(o) => stack.extend(o.values().rev()),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris() {
        assert_eq!(parse_uri("repro://runs/20261129-095859.306-a1bd68/stdout").map(|p| p.1), Some("stdout"));
        assert_eq!(parse_uri("repro://runs/x/changes").map(|p| p.1), Some("changes.json"));
        for bad in ["repro://runs/../stdout", "repro://runs/a/b/stdout", "repro://runs/a/run.json", "file:///etc"] {
            assert!(parse_uri(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn reads_a_run_and_finds_runs_in_a_result() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("runs").join("r1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stdout"), "hi\n").unwrap();
        let (data, cut, _) = read(t.path(), "repro://runs/r1/stdout").unwrap();
        assert_eq!((data.as_slice(), cut), (&b"hi\n"[..], false));
        assert!(read(t.path(), "repro://runs/r2/stdout").is_err());
        assert!(read(t.path(), "repro://runs/r1/changes").is_err());
        let v = serde_json::json!({"runs": [{"dir": dir.display().to_string()}], "other": "/etc/runs/r1"});
        let found = runs_in(t.path(), &v);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, "r1");
        assert_eq!(recent_runs(t.path(), 10), ["r1"]);
    }
}
