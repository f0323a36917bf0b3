//! The files an experiment and its adapter use besides themselves (helper scripts, a history module, a
//! fixture): found from `files:` and from every `$CHAOS_EXPERIMENT_DIR/<path>` / `$CHAOS_ADAPTER_DIR/<path>`
//! their scripts name, and copied into the run directory (`inputs/experiment/`, `inputs/adapter/`), so that the
//! run directory alone is enough to run the experiment again (`repro chaos replay`).
//!
//! The files come from someone else's experiment: only relative paths inside the experiment's (adapter's)
//! directory are copied, symbolic links that leave it are not followed, and the number and size of the files
//! are bounded.
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::error::{ChaosError, Result};
use crate::fsutil::{mkdirs, sha256_hex, write_atomic};

/// At most this many files are copied per run.
pub const MAX_FILES: usize = 1000;
/// At most this many bytes are copied per run.
pub const MAX_BYTES: u64 = 64 << 20;

/// One copied file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InputFile {
    /// `experiment` or `adapter`.
    pub side: &'static str,
    /// Relative to the experiment's (adapter's) directory.
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

/// What one side asks for: declared paths (with their line for errors) and the paths its scripts name.
pub struct Side<'a> {
    pub side: &'static str,
    /// The directory the paths are relative to (the experiment's or the adapter's).
    pub dir: &'a Path,
    /// The file that declared them (for errors).
    pub file: &'a Path,
    pub declared: Vec<(String, u64, u64)>,
    /// The text of the experiment or adapter file, searched for `$CHAOS_<SIDE>_DIR/<path>`.
    pub text: &'a str,
}

/// The relative paths a text names under `$CHAOS_<var>_DIR` (or `${CHAOS_<var>_DIR}`).
pub fn referenced(text: &str, var: &str) -> Vec<String> {
    let re = regex::Regex::new(&format!(r"\$\{{?CHAOS_{var}_DIR\}}?/([A-Za-z0-9_.][A-Za-z0-9_./+-]*)"))
        .expect("static regex");
    let mut out: Vec<String> = re.captures_iter(text).map(|c| c[1].trim_end_matches(['.', '/']).to_string()).collect();
    out.retain(|p| !p.is_empty());
    out.sort();
    out.dedup();
    out
}

/// A relative path without `..`, or None.
fn safe_relative(p: &str) -> Option<PathBuf> {
    let path = Path::new(p);
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

struct Budget {
    files: usize,
    bytes: u64,
    /// Directories already walked (by their real path): a link back up cannot make the walk loop.
    seen_dirs: std::collections::BTreeSet<PathBuf>,
}

/// Copies what each side uses into `<run_dir>/inputs/<side>/`. A declared path that is missing, absolute,
/// climbs out with `..` or is over the limits is an error naming the file and line; a path a script names that
/// does not exist (an output the script creates, say) is left out.
pub fn copy_inputs(run_dir: &Path, sides: &[Side<'_>]) -> Result<Vec<InputFile>> {
    let mut out = Vec::new();
    let mut budget = Budget { files: 0, bytes: 0, seen_dirs: std::collections::BTreeSet::new() };
    for side in sides {
        let Ok(root) = std::fs::canonicalize(side.dir) else { continue };
        let dest = run_dir.join("inputs").join(side.side);
        let mut wanted: Vec<(String, Option<(u64, u64)>)> =
            side.declared.iter().map(|(p, l, c)| (p.clone(), Some((*l, *c)))).collect();
        let var = side.side.to_ascii_uppercase();
        for r in referenced(side.text, &var) {
            if !wanted.iter().any(|(p, _)| *p == r) {
                wanted.push((r, None));
            }
        }
        for (p, at) in wanted {
            let bad = |msg: String| -> Result<()> {
                match at {
                    Some((line, column)) => Err(ChaosError::Yaml {
                        path: side.file.to_path_buf(),
                        line,
                        column,
                        field: "files".into(),
                        message: msg,
                    }),
                    None => Ok(()),
                }
            };
            let Some(rel) = safe_relative(&p) else {
                bad(format!("{p:?}: expected a relative path inside the directory of the file, without `..`"))?;
                continue;
            };
            let src = root.join(&rel);
            let real = match std::fs::canonicalize(&src) {
                Ok(r) => r,
                Err(err) => {
                    bad(format!("{}: {err}", src.display()))?;
                    continue;
                }
            };
            if !real.starts_with(&root) {
                bad(format!("{p:?} leads outside {} (a symbolic link?)", root.display()))?;
                continue;
            }
            if let Err(msg) = copy_tree(&root, &real, &dest, side.side, &mut budget, &mut out) {
                match at {
                    Some(_) => bad(msg)?,
                    None => return Err(ChaosError::Harness(format!("copying inputs: {msg}"))),
                }
            }
        }
    }
    out.sort_by(|a, b| (a.side, &a.path).cmp(&(b.side, &b.path)));
    out.dedup();
    Ok(out)
}

fn copy_tree(
    root: &Path,
    real: &Path,
    dest: &Path,
    side: &'static str,
    budget: &mut Budget,
    out: &mut Vec<InputFile>,
) -> std::result::Result<(), String> {
    let meta = std::fs::symlink_metadata(real).map_err(|e| format!("{}: {e}", real.display()))?;
    let rel = real.strip_prefix(root).map_err(|_| format!("{} is outside {}", real.display(), root.display()))?;
    if meta.is_dir() {
        if !budget.seen_dirs.insert(real.to_path_buf()) {
            return Ok(());
        }
        let mut entries: Vec<_> = std::fs::read_dir(real)
            .map_err(|e| format!("{}: {e}", real.display()))?
            .take(MAX_FILES + 1)
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for e in entries {
            // Links are followed only while they stay inside the directory.
            let Ok(r) = std::fs::canonicalize(&e) else { continue };
            if r.starts_with(root) {
                copy_tree(root, &r, dest, side, budget, out)?;
            }
        }
        return Ok(());
    }
    if !meta.is_file() {
        return Ok(());
    }
    let rel_s = rel.display().to_string();
    if out.iter().any(|f| f.side == side && f.path == rel_s) {
        return Ok(());
    }
    budget.files += 1;
    budget.bytes = budget.bytes.saturating_add(meta.len());
    if budget.files > MAX_FILES || budget.bytes > MAX_BYTES {
        return Err(format!(
            "{}: the inputs of a run are limited to {MAX_FILES} files and {} MiB",
            real.display(),
            MAX_BYTES >> 20
        ));
    }
    let data = std::fs::read(real).map_err(|e| format!("{}: {e}", real.display()))?;
    let to = dest.join(rel);
    if let Some(parent) = to.parent() {
        mkdirs(parent).map_err(|e| e.to_string())?;
    }
    write_atomic(&to, &data).map_err(|e| e.to_string())?;
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o755;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("{}: {e}", to.display()))?;
    }
    out.push(InputFile { side, path: rel_s, bytes: meta.len(), sha256: sha256_hex(&data) });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_found_in_both_spellings() {
        let t = "run: bash $CHAOS_EXPERIMENT_DIR/lib/history.sh; python3 ${CHAOS_EXPERIMENT_DIR}/check.py.\n$CHAOS_ADAPTER_DIR/x";
        assert_eq!(referenced(t, "EXPERIMENT"), ["check.py", "lib/history.sh"]);
        assert_eq!(referenced(t, "ADAPTER"), ["x"]);
    }

    #[test]
    fn copies_what_is_declared_and_named_and_refuses_what_leaves_the_directory() {
        let d = tempfile::tempdir().unwrap();
        let exp = d.path().join("exp");
        std::fs::create_dir_all(exp.join("lib/sub")).unwrap();
        std::fs::write(exp.join("lib/a.sh"), "echo a").unwrap();
        std::fs::write(exp.join("lib/sub/b.py"), "print(1)").unwrap();
        std::fs::write(exp.join("named.sh"), "echo n").unwrap();
        std::fs::write(d.path().join("secret"), "no").unwrap();
        std::os::unix::fs::symlink(d.path().join("secret"), exp.join("lib/leak")).unwrap();
        let run = d.path().join("run");
        std::fs::create_dir_all(&run).unwrap();
        let file = exp.join("e.yaml");
        let side = |declared: Vec<(String, u64, u64)>, text: &'static str| Side {
            side: "experiment",
            dir: &exp,
            file: &file,
            declared,
            text,
        };
        let got = copy_inputs(
            &run,
            &[side(vec![("lib".into(), 3, 5)], "bash $CHAOS_EXPERIMENT_DIR/named.sh > $CHAOS_EXPERIMENT_DIR/out.txt")],
        )
        .unwrap();
        let paths: Vec<&str> = got.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["lib/a.sh", "lib/sub/b.py", "named.sh"], "the link out and the missing output are left out");
        assert_eq!(std::fs::read_to_string(run.join("inputs/experiment/lib/sub/b.py")).unwrap(), "print(1)");
        // A link back up to the directory itself is walked once, not forever.
        std::os::unix::fs::symlink(&exp, exp.join("lib/sub/up")).unwrap();
        let again = copy_inputs(&run, &[side(vec![("lib".into(), 3, 5)], "")]).unwrap();
        assert!(again.iter().any(|f| f.path == "named.sh"), "the link leads to the directory, inside it: {again:?}");
        assert!(again.len() <= 4, "{again:?}");
        for bad in ["../secret", "/etc/passwd", "lib/leak", "missing.sh"] {
            let m = copy_inputs(&run, &[side(vec![(bad.into(), 7, 9)], "")]).unwrap_err().to_string();
            assert!(m.contains("e.yaml:7:9: files:"), "{bad}: {m}");
        }
    }
}
