//! The history checks (`linearizable`, `set`, `counter`): the history files a glob names in the run directory,
//! merged by time, judged by repro-history's checkers. The checker's whole result goes into the check's `data`
//! (the report draws a non-linearizable window from it).
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::glob_match;
use crate::model::{Check, CheckKind, HistoryModel, DEFAULT_HISTORY};
use repro_history::{Checker, LinearOptions, Op, ParseOptions, Process, Validity};

/// At most this many history files, and bytes of them, per check.
pub const MAX_FILES: usize = 10_000;
pub const MAX_BYTES: u64 = 512 << 20;

/// A relative pattern without `..`.
pub fn valid_pattern(p: &str) -> bool {
    let path = Path::new(p);
    !p.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The files under `root` matching `pattern` segment by segment (`*`, `?`), in path order; links are not
/// followed.
pub fn glob_files(root: &Path, pattern: &str) -> Vec<PathBuf> {
    let segs: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty() && *s != ".").collect();
    let mut cur = vec![root.to_path_buf()];
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        let mut next = Vec::new();
        for dir in &cur {
            if next.len() >= MAX_FILES {
                break;
            }
            let Ok(rd) = std::fs::read_dir(dir) else { continue };
            let mut names: Vec<_> = rd.take(MAX_FILES).filter_map(|e| e.ok()).collect();
            names.sort_by_key(|e| e.file_name());
            for e in names {
                let name = e.file_name().to_string_lossy().into_owned();
                if !glob_match(seg, &name) {
                    continue;
                }
                let Ok(ft) = e.file_type() else { continue };
                if (last && ft.is_file()) || (!last && ft.is_dir()) {
                    next.push(e.path());
                }
                if next.len() >= MAX_FILES {
                    break;
                }
            }
        }
        cur = next;
    }
    cur
}

/// Runs one history check: (passed, details, the checker's result as JSON).
pub fn history_check(run_dir: &Path, c: &Check) -> (bool, Vec<String>, Option<Value>) {
    let pattern = c.history.as_deref().unwrap_or(DEFAULT_HISTORY);
    let checker = match (c.kind.value, c.model.unwrap_or_default()) {
        (CheckKind::Set, _) => Checker::Set,
        (CheckKind::Counter, _) => Checker::Counter,
        (_, HistoryModel::Kv) => Checker::LinearizableKv,
        (_, HistoryModel::Register) => Checker::LinearizableRegister,
    };
    let files = glob_files(run_dir, pattern);
    if files.is_empty() {
        return (false, vec![format!("no history file matches {pattern} in the run directory")], None);
    }
    let mut ops: Vec<Op> = Vec::new();
    let mut owner: std::collections::BTreeMap<Process, PathBuf> = std::collections::BTreeMap::new();
    let mut bytes = 0u64;
    for f in &files {
        let rel = f.strip_prefix(run_dir).unwrap_or(f).display().to_string();
        bytes = bytes.saturating_add(std::fs::metadata(f).map(|m| m.len()).unwrap_or(0));
        if bytes > MAX_BYTES {
            return (false, vec![format!("{rel}: the history files are over {} MiB together", MAX_BYTES >> 20)], None);
        }
        let file = match std::fs::File::open(f) {
            Ok(x) => x,
            Err(e) => return (false, vec![format!("{rel}: {e}")], None),
        };
        let h = match repro_history::parse_reader(&rel, std::io::BufReader::new(file), &ParseOptions::default()) {
            Ok(h) => h,
            Err(e) => return (false, vec![e.to_string()], None),
        };
        for op in h.ops {
            if let Some(other) = owner.get(&op.process) {
                if other != f {
                    return (
                        false,
                        vec![format!(
                            "process {} appears in {} and in {rel}: each history file must use its own process names (the instance name, say)",
                            op.process,
                            other.strip_prefix(run_dir).unwrap_or(other).display()
                        )],
                        None,
                    );
                }
            } else {
                owner.insert(op.process.clone(), f.clone());
            }
            ops.push(op);
        }
    }
    ops.sort_by_key(|o| o.call);
    let name = if files.len() == 1 {
        files[0].strip_prefix(run_dir).unwrap_or(&files[0]).display().to_string()
    } else {
        pattern.to_string()
    };
    let history = repro_history::History::from_ops(&name, ops);
    let mut opts = LinearOptions::default();
    if let Some(v) = &c.initial {
        opts.initial = v.clone();
    }
    if let Some(n) = c.max_steps {
        opts.max_steps = n;
    }
    let r = match repro_history::check(checker, &history, &opts) {
        Ok(r) => r,
        Err(e) => return (false, vec![e.to_string()], None),
    };
    let mut details = vec![format!(
        "{} ({} operations in {} file{})",
        r.summary,
        history.ops.len(),
        files.len(),
        if files.len() == 1 { "" } else { "s" }
    )];
    if let repro_history::Details::Linearizable(d) = &r.details {
        if let Some(w) = &d.window {
            details.push(format!(
                "not linearizable ({}window of {} operations):",
                if w.minimal { "smallest " } else { "a " },
                w.ops.len()
            ));
            for o in &w.ops {
                let mark = if o.index == w.failing.index && o.line == w.failing.line {
                    "  <- not linearizable from its return on"
                } else {
                    ""
                };
                details.push(format!(
                    "  {} {} {}{} -> {} [{} .. {}]{mark}",
                    o.process,
                    o.f,
                    o.key.as_ref().map(|k| format!("{k} ")).unwrap_or_default(),
                    o.value,
                    if o.outcome == repro_history::Outcome::Ok {
                        o.result.to_string()
                    } else {
                        format!("{:?}", o.outcome).to_lowercase()
                    },
                    o.call,
                    o.ret.map_or("never".to_string(), |t| t.to_string())
                ));
            }
        }
    }
    let passed = r.valid == Validity::Valid;
    if r.valid == Validity::Unknown {
        details.insert(0, "unknown: the search reached its bound before it could decide (raise max-steps)".into());
    }
    (passed, details, serde_json::to_value(&r).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_globs_stay_inside_the_run_directory() {
        assert!(valid_pattern("workloads/*/instances/*/output/history.jsonl"));
        assert!(
            !valid_pattern("../x")
                && !valid_pattern("/etc/passwd")
                && !valid_pattern("a/../../b")
                && !valid_pattern("")
        );
        let d = tempfile::tempdir().unwrap();
        for p in ["w/a/h.jsonl", "w/b/h.jsonl", "w/b/other.txt", "x/a/h.jsonl"] {
            let f = d.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, "").unwrap();
        }
        let got: Vec<String> = glob_files(d.path(), "w/*/h.jsonl")
            .iter()
            .map(|p| p.strip_prefix(d.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(got, ["w/a/h.jsonl", "w/b/h.jsonl"]);
    }
}
