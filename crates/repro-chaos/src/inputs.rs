//! The files an experiment and its adapter use besides themselves (helper scripts, a history module, a
//! fixture): found from `files:` and from every `$CHAOS_EXPERIMENT_DIR/<path>` / `$CHAOS_ADAPTER_DIR/<path>`
//! their scripts name, and copied into the run directory (`inputs/experiment/`, `inputs/adapter/`), so that the
//! run directory alone is enough to run the experiment again (`repro chaos replay`).
//!
//! The files come from someone else's experiment: only relative paths inside the experiment's (adapter's)
//! directory are copied, through the one copy of untrusted trees, [`repro_sys::treecopy`]: symbolic links are
//! followed only while they stay inside the directory (openat2 `RESOLVE_BENEATH`), never one that leaves it, is
//! absolute or loops; fifos, sockets and devices are never opened; the number and size of the files are
//! bounded.
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use repro_sys::beneath::Beneath;
use repro_sys::treecopy::{self, Copier, Limits};

use crate::error::{ChaosError, Result};
use crate::fsutil::{mkdirs, sha256_hex};

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

/// Copies what each side uses into `<run_dir>/inputs/<side>/`, through [`repro_sys::treecopy`] following
/// symbolic links only while they stay inside the side's directory (a link is copied as what it leads to, under
/// its own name; a link out, an absolute link or a loop is left out). A declared path that is missing, absolute,
/// climbs out with `..` or a link, or is over the limits is an error naming the file and line; a path a script
/// names that does not exist (an output the script creates, say) is left out.
pub fn copy_inputs(run_dir: &Path, sides: &[Side<'_>]) -> Result<Vec<InputFile>> {
    let mut out = Vec::new();
    let (mut files, mut bytes) = (0usize, 0u64);
    for side in sides {
        let Ok(root) = Beneath::open(side.dir) else { continue };
        let dest_path = run_dir.join("inputs").join(side.side);
        mkdirs(&dest_path)?;
        let harness = |what: &Path, e: std::io::Error| ChaosError::Harness(format!("{}: {e}", what.display()));
        let dest = Beneath::open(&dest_path).map_err(|e| harness(&dest_path, e))?;
        let limits = Limits {
            max_file_bytes: MAX_BYTES,
            max_total_bytes: MAX_BYTES - bytes,
            // Files and the directories holding them: the files alone are counted against MAX_FILES below.
            max_entries: 2 * (MAX_FILES - files) as u64,
            max_depth: treecopy::MAX_DEPTH,
            max_dir_entries: MAX_FILES,
            keep_free: 0,
        };
        let probe = Beneath::open(side.dir).map_err(|e| harness(side.dir, e))?;
        let mut copier = Copier::new(limits).following(root).map_err(|e| harness(side.dir, e))?.recording_files();
        let mut wanted: Vec<(String, Option<(u64, u64)>)> =
            side.declared.iter().map(|(p, l, c)| (p.clone(), Some((*l, *c)))).collect();
        let var = side.side.to_ascii_uppercase();
        for r in referenced(side.text, &var) {
            if !wanted.iter().any(|(p, _)| *p == r) {
                wanted.push((r, None));
            }
        }
        let mut copied: Vec<PathBuf> = Vec::new();
        let mut seen_skips = 0;
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
            // Already copied with a directory above it (or declared and named both).
            if copied.iter().any(|c| rel.starts_with(c)) {
                continue;
            }
            if let Err(e) = probe.open_following(&rel) {
                match e.raw_os_error() {
                    Some(libc::EXDEV) | Some(libc::ELOOP) => {
                        bad(format!("{p:?} leads outside {} (a symbolic link?)", side.dir.display()))?
                    }
                    _ => bad(format!("{}: {e}", side.dir.join(&rel).display()))?,
                }
                continue;
            }
            let (parent, name) = (rel.parent().unwrap_or(Path::new("")), rel.file_name().unwrap_or_default());
            let to =
                treecopy::walk_to_with(&dest, parent, Some(0o755)).map_err(|e| harness(&dest_path.join(parent), e))?;
            if let Err(e) = copier.copy_path(&rel, &to, name) {
                bad(format!("{}: {e}", side.dir.join(&rel).display()))?;
                continue;
            }
            copied.push(rel.clone());
            let report = copier.report();
            let new_files = report.files.len();
            let new_bytes = report.files.iter().fold(0u64, |n, (_, b)| n.saturating_add(*b));
            let over = files + new_files > MAX_FILES || bytes.saturating_add(new_bytes) > MAX_BYTES;
            let failed = report.skipped[seen_skips..]
                .iter()
                .find(|s| !matches!(s.why, treecopy::Why::Special | treecopy::Why::NotFollowed(_)));
            seen_skips = report.skipped.len();
            let msg = match failed {
                Some(s)
                    if matches!(s.why, treecopy::Why::TooLarge { .. } | treecopy::Why::OverBudget { .. }) || over =>
                {
                    Some(limited(side.dir, &s.rel))
                }
                Some(s) => Some(format!("{}: {}", side.dir.join(&s.rel).display(), s.why)),
                None if over => Some(limited(side.dir, &rel)),
                None => None,
            };
            if let Some(msg) = msg {
                match at {
                    Some(_) => bad(msg)?,
                    None => return Err(ChaosError::Harness(format!("copying inputs: {msg}"))),
                }
            }
        }
        let report = copier.finish();
        for (rel, size) in report.files {
            files += 1;
            bytes = bytes.saturating_add(size);
            let to = dest_path.join(&rel);
            let data = treecopy::walk_to(&dest, rel.parent().unwrap_or(Path::new("")), false)
                .and_then(|d| d.open_file(rel.file_name().unwrap_or_default()))
                .and_then(|mut f| {
                    let mut data = Vec::new();
                    std::io::Read::read_to_end(&mut f, &mut data).map(|_| data)
                })
                .map_err(|e| harness(&to, e))?;
            out.push(InputFile {
                side: side.side,
                path: rel.display().to_string(),
                bytes: size,
                sha256: sha256_hex(&data),
            });
        }
    }
    out.sort_by(|a, b| (a.side, &a.path).cmp(&(b.side, &b.path)));
    out.dedup();
    Ok(out)
}

/// The error of a copy over [`MAX_FILES`] or [`MAX_BYTES`].
fn limited(dir: &Path, rel: &Path) -> String {
    format!(
        "{}: the inputs of a run are limited to {MAX_FILES} files and {} MiB",
        dir.join(rel).display(),
        MAX_BYTES >> 20
    )
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
        // A link back up to a directory the copy is in is not walked (a loop); an absolute link is not followed
        // even into the directory; a relative link inside is copied as what it leads to, under its own name.
        std::os::unix::fs::symlink("../..", exp.join("lib/sub/up")).unwrap();
        std::os::unix::fs::symlink(exp.join("named.sh"), exp.join("lib/abs")).unwrap();
        std::os::unix::fs::symlink("../../named.sh", exp.join("lib/sub/alias")).unwrap();
        let again = copy_inputs(&run, &[side(vec![("lib".into(), 3, 5)], "")]).unwrap();
        let paths: Vec<&str> = again.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["lib/a.sh", "lib/sub/alias", "lib/sub/b.py"], "{again:?}");
        assert_eq!(again[1].sha256, sha256_hex(b"echo n"));
        assert_eq!(again[1].bytes, 6);
        assert!(!std::fs::symlink_metadata(run.join("inputs/experiment/lib/sub/alias")).unwrap().is_symlink());
        // A declared link to a file inside is copied under the declared name.
        let named = copy_inputs(&run, &[side(vec![("lib/sub/alias".into(), 3, 5)], "")]).unwrap();
        assert_eq!(named.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["lib/sub/alias"]);
        // Over the bound of bytes (a sparse file: it costs nothing to make): an error naming the file and line.
        std::fs::File::create(exp.join("big")).unwrap().set_len(MAX_BYTES + 1).unwrap();
        let m = copy_inputs(&run, &[side(vec![("big".into(), 4, 2)], "")]).unwrap_err().to_string();
        assert!(m.contains("e.yaml:4:2: files:") && m.contains("limited to 1000 files and 64 MiB"), "{m}");
        assert!(!run.join("inputs/experiment/big").exists());
        for bad in ["../secret", "/etc/passwd", "lib/leak", "missing.sh"] {
            let m = copy_inputs(&run, &[side(vec![(bad.into(), 7, 9)], "")]).unwrap_err().to_string();
            assert!(m.contains("e.yaml:7:9: files:"), "{bad}: {m}");
        }
    }
}
