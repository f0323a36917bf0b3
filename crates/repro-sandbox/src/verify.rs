//! `repro run --verify`: runs a command several times from identical starting states and compares what
//! each run produced: exit status, stdout, stderr and the files it changed.

use std::fs;
use std::path::{Path, PathBuf};

use repro_model::run::{Changes, RunRecord};

use repro_model::ExitCode;

use crate::run::{Echo, RunReport, RunRequest};
use crate::SandboxError;
use serde::Serialize;

/// One run of a verification.
#[derive(Debug, Clone, Serialize)]
pub struct VerifiedRun {
    pub id: String,
    pub dir: PathBuf,
    pub exit_status: i32,
    pub not_enforced: Vec<String>,
    /// Processes and threads the guest started (the supervisor's count; 0 without it).
    pub tasks_created: u64,
}

/// One way in which a run differs from the first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Difference {
    ExitStatus {
        run: usize,
        first: i32,
        this: i32,
    },
    /// The first differing line of a stream (1-based), with up to two lines of context before it.
    Output {
        run: usize,
        stream: String,
        line: usize,
        byte_offset: u64,
        context: Vec<String>,
        first: Option<String>,
        this: Option<String>,
    },
    /// A changed file present in one run only.
    FilePresence {
        run: usize,
        path: String,
        in_first: bool,
    },
    /// A changed file whose content differs, from `byte_offset` on.
    FileContent {
        run: usize,
        path: String,
        byte_offset: u64,
    },
}

/// The result of a verification.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    pub identical: bool,
    pub runs: Vec<VerifiedRun>,
    pub differences: Vec<Difference>,
    /// Sources the supervisor could not mediate, from any run: the likely cause of a difference.
    pub not_enforced: Vec<String>,
}

/// How `run --verify` ended.
#[derive(Debug)]
pub enum Verified {
    /// Every run ran, and they were compared.
    Compared(VerifyReport),
    /// SIGINT, SIGTERM or SIGHUP arrived during run number `run` (from 1): the verification stopped there and
    /// nothing was compared.
    Interrupted { signal: i32, run: u32, dir: PathBuf },
}

/// `run --verify`: runs `req` `runs` times from identical starting states and compares what they produced. The
/// first run's output is shown (its stdout when `show_stdout`); `on_first` sees its report before the second run
/// starts. Interrupts are held between runs ([`crate::run::hold_interrupts`]), so one stops the loop. With
/// `record_access` every run records the paths its guest used (all of them, so the runs stay alike); `on_first`
/// can turn the first one's into its environment (`run --verify --record-inputs`).
pub fn verify(
    req: &RunRequest,
    exe: &Path,
    runs: u32,
    show_stdout: bool,
    record_access: bool,
    on_first: impl FnOnce(&RunReport),
) -> Result<Verified, SandboxError> {
    let mut on_first = Some(on_first);
    let mut records = Vec::new();
    let extras = repro_model::settings::RunExtras { record_access, ..Default::default() };
    for i in 0..runs {
        let echo = Echo { stdout: i == 0 && show_stdout, stderr: i == 0 };
        let report = crate::run::execute_with(req, exe, echo, &extras)?;
        if let Some(signal) = report.interrupted {
            return Ok(Verified::Interrupted { signal, run: i + 1, dir: report.dir });
        }
        if let Some(f) = on_first.take() {
            f(&report);
        }
        records.push((report.record, report.dir));
    }
    Ok(Verified::Compared(compare(&records)?))
}

impl VerifyReport {
    /// `run --verify`'s status: 122 when the runs differ, else 121 when a run was not deterministic, else 0.
    pub fn exit_code(&self) -> ExitCode {
        if !self.identical {
            ExitCode::VerifyDiffers
        } else if !self.not_enforced.is_empty() {
            ExitCode::NotDeterministic
        } else {
            ExitCode::Success
        }
    }
}

/// Compares the runs in `dirs` (the first is the reference).
/// A file of a run directory that cannot be read is an error: a difference must not hide behind it.
pub fn compare(records: &[(RunRecord, PathBuf)]) -> Result<VerifyReport, SandboxError> {
    let mut differences = Vec::new();
    let runs: Vec<VerifiedRun> = records
        .iter()
        .map(|(r, d)| VerifiedRun {
            id: r.id.clone(),
            dir: d.clone(),
            exit_status: r.exit_status,
            not_enforced: r.determinism.not_enforced.clone(),
            tasks_created: r.determinism.tasks_created,
        })
        .collect();
    if let Some(((first, first_dir), rest)) = records.split_first() {
        for (i, (rec, dir)) in rest.iter().enumerate() {
            let run = i + 2;
            if rec.exit_status != first.exit_status {
                differences.push(Difference::ExitStatus { run, first: first.exit_status, this: rec.exit_status });
            }
            for stream in ["stdout", "stderr"] {
                let (a, b) = (read(&first_dir.join(stream))?, read(&dir.join(stream))?);
                if let Some(d) = first_line_difference(&a, &b) {
                    differences.push(Difference::Output {
                        run,
                        stream: stream.into(),
                        line: d.line,
                        byte_offset: d.byte_offset,
                        context: d.context,
                        first: d.first,
                        this: d.this,
                    });
                }
            }
            differences.extend(file_differences(run, first_dir, dir)?);
        }
    }
    let mut not_enforced: Vec<String> = runs.iter().flat_map(|r| r.not_enforced.iter().cloned()).collect();
    not_enforced.sort();
    not_enforced.dedup();
    Ok(VerifyReport { identical: differences.is_empty(), runs, differences, not_enforced })
}

/// Where two outputs first differ, by line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineDifference {
    pub line: usize,
    pub byte_offset: u64,
    pub context: Vec<String>,
    pub first: Option<String>,
    pub this: Option<String>,
}

/// The first line at which `a` and `b` differ (1-based), or `None` when they are equal.
pub fn first_line_difference(a: &[u8], b: &[u8]) -> Option<LineDifference> {
    if a == b {
        return None;
    }
    let la: Vec<&[u8]> = a.split_inclusive(|c| *c == b'\n').collect();
    let lb: Vec<&[u8]> = b.split_inclusive(|c| *c == b'\n').collect();
    let mut offset = 0u64;
    let text = |l: &[u8]| String::from_utf8_lossy(l).trim_end_matches('\n').to_string();
    for i in 0..la.len().max(lb.len()) {
        let (x, y) = (la.get(i), lb.get(i));
        if x != y {
            let context = la[i.saturating_sub(2)..i].iter().map(|l| text(l)).collect();
            return Some(LineDifference {
                line: i + 1,
                byte_offset: offset,
                context,
                first: x.map(|l| text(l)),
                this: y.map(|l| text(l)),
            });
        }
        offset += x.map(|l| l.len()).unwrap_or(0) as u64;
    }
    None
}

/// A file of a run directory.
fn read(path: &Path) -> Result<Vec<u8>, SandboxError> {
    fs::read(path).map_err(|e| SandboxError::io("cannot read", path, e))
}

fn file_differences(run: usize, first: &Path, this: &Path) -> Result<Vec<Difference>, SandboxError> {
    let changes = |d: &Path| -> Result<Changes, SandboxError> {
        let path = d.join("changes.json");
        serde_json::from_slice(&read(&path)?)
            .map_err(|e| SandboxError::Corrupt { path: path.clone(), message: e.to_string() })
    };
    let (a, b) = (changes(first)?, changes(this)?);
    let mut out = Vec::new();
    for ca in &a.changes {
        match b.changes.iter().find(|cb| cb.path == ca.path && cb.kind == ca.kind) {
            None => out.push(Difference::FilePresence { run, path: ca.path.clone(), in_first: true }),
            Some(cb) if cb.blake3 != ca.blake3 => {
                // A file whose content is not in `changes/` (a directory, a link) differs from its first byte.
                let fa = fs::read(first.join("changes").join(&ca.path)).ok().unwrap_or_default();
                let fb = fs::read(this.join("changes").join(&cb.path)).ok().unwrap_or_default();
                let offset = fa.iter().zip(fb.iter()).position(|(x, y)| x != y).unwrap_or(fa.len().min(fb.len()));
                out.push(Difference::FileContent { run, path: ca.path.clone(), byte_offset: offset as u64 });
            }
            Some(_) => {}
        }
    }
    for cb in &b.changes {
        if !a.changes.iter().any(|ca| ca.path == cb.path && ca.kind == cb.kind) {
            out.push(Difference::FilePresence { run, path: cb.path.clone(), in_first: false });
        }
    }
    Ok(out)
}

/// The report as text: one line when identical, otherwise what differs.
pub fn render(r: &VerifyReport) -> String {
    let mut out = String::new();
    if r.identical {
        let first = &r.runs[0];
        out.push_str(&format!(
            "repro: verified: {} runs identical (exit status {}, same stdout, stderr and changed files)\n",
            r.runs.len(),
            first.exit_status
        ));
        return out;
    }
    out.push_str(&format!("repro: NOT reproducible: {} runs differ\n", r.runs.len()));
    for d in &r.differences {
        match d {
            Difference::ExitStatus { run, first, this } => {
                out.push_str(&format!("  exit status: run 1 exited {first}, run {run} exited {this}\n"))
            }
            Difference::Output { run, stream, line, byte_offset, context, first, this } => {
                out.push_str(&format!(
                    "  {stream}: run {run} differs from run 1 at line {line} (byte {byte_offset}):\n"
                ));
                for c in context {
                    out.push_str(&format!("      {c}\n"));
                }
                out.push_str(&format!("    - {}\n", first.as_deref().unwrap_or("(end of output)")));
                out.push_str(&format!("    + {}\n", this.as_deref().unwrap_or("(end of output)")));
            }
            Difference::FilePresence { run, path, in_first } => {
                out.push_str(&format!("  file {path}: changed in run {} only\n", if *in_first { 1 } else { *run }))
            }
            Difference::FileContent { run, path, byte_offset } => out.push_str(&format!(
                "  file {path}: content differs between run 1 and run {run} from byte {byte_offset}\n"
            )),
        }
    }
    for n in &r.not_enforced {
        out.push_str(&format!("  likely cause: determinism not enforced: {n}\n"));
    }
    if let Some(tasks) = r.runs.iter().map(|x| x.tasks_created).max().filter(|&t| t > 0) {
        out.push_str(&format!(
            "  possible cause: the guest started {tasks} more process(es) or thread(s); repro's scheduler orders \
             them at system calls only (a data race between two calls is not ordered; docs/determinism.md, \"The \
             scheduler\"), so how they interleave, and the clock readings \
             and outputs that follow it, can differ from run to run; `repro run --sched-log` shows the decisions\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_status_says_differ_before_not_deterministic() {
        let r = |identical: bool, not_enforced: Vec<String>| VerifyReport {
            identical,
            runs: Vec::new(),
            differences: Vec::new(),
            not_enforced,
        };
        assert_eq!(r(true, vec![]).exit_code(), ExitCode::Success);
        assert_eq!(r(true, vec!["x".into()]).exit_code(), ExitCode::NotDeterministic);
        assert_eq!(r(false, vec!["x".into()]).exit_code(), ExitCode::VerifyDiffers);
    }

    #[test]
    fn a_difference_in_a_run_with_threads_names_their_interleaving() {
        let run = |tasks_created| VerifiedRun {
            id: "r".into(),
            dir: PathBuf::new(),
            exit_status: 0,
            not_enforced: Vec::new(),
            tasks_created,
        };
        let diff = Difference::ExitStatus { run: 2, first: 0, this: 1 };
        let r = |tasks: u64| VerifyReport {
            identical: false,
            runs: vec![run(0), run(tasks)],
            differences: vec![diff.clone()],
            not_enforced: Vec::new(),
        };
        assert!(!render(&r(0)).contains("interleave"), "{}", render(&r(0)));
        assert!(render(&r(4)).contains("orders them at system calls only"), "{}", render(&r(4)));
        let text = render(&r(4));
        assert!(text.contains("possible cause: the guest started 4 more process(es) or thread(s)"), "{text}");
        let same = VerifyReport { identical: true, differences: Vec::new(), ..r(4) };
        assert!(!render(&same).contains("cause"), "identical runs need no cause");
    }

    #[test]
    fn an_unreadable_run_file_is_an_error_not_empty_output() {
        let d = tempfile::tempdir().unwrap();
        let e = file_differences(2, d.path(), d.path()).unwrap_err();
        assert!(e.to_string().contains("changes.json"), "{e}");
        std::fs::write(d.path().join("changes.json"), "{").unwrap();
        assert!(matches!(file_differences(2, d.path(), d.path()), Err(SandboxError::Corrupt { .. })));
    }

    #[test]
    fn first_difference_by_line() {
        assert_eq!(first_line_difference(b"a\nb\n", b"a\nb\n"), None);
        let d = first_line_difference(b"a\nb\nc\nd\n", b"a\nb\nc\nX\n").unwrap();
        assert_eq!(d.line, 4);
        assert_eq!(d.byte_offset, 6);
        assert_eq!(d.context, vec!["b", "c"]);
        assert_eq!((d.first.as_deref(), d.this.as_deref()), (Some("d"), Some("X")));
        let d = first_line_difference(b"a\n", b"a\nmore\n").unwrap();
        assert_eq!((d.line, d.first, d.this.as_deref()), (2, None, Some("more")));
        let d = first_line_difference(b"abc", b"abd").unwrap();
        assert_eq!(d.line, 1);
    }
}
