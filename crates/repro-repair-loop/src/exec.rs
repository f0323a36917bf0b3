//! The real [`Executor`]: every step is a child `repro` (`replay --json`, `run --json --keep-changes`,
//! `contract verify --json`), so the agent, the replays and the contract run in exactly the sandbox of the
//! command line, and nothing of the loop runs on the host.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use repro_model::project::{ContractReport, StepOutcome};
use repro_model::run::RunRecord;
use repro_repair::{ReportFile, RunOutput};

use crate::{AgentResult, ContractResult, Executor, LoopError, ReplayResult, ReplayedRun};

/// The most bytes of a replay run's stdout or stderr the gates read.
const MAX_OUTPUT: u64 = 16 << 20;

/// The most result files read from one run, and how deep under `changes/` they are looked for.
const MAX_REPORT_FILES: usize = 256;
const MAX_REPORT_DEPTH: usize = 8;

/// The JUnit XML reports a replay's pytest wrote (`--junitxml` into [`crate::JUNIT_DIR`] of the directory it ran
/// in): the `*.xml` files of every such directory under the run's `changes/` (the working directory's writes,
/// kept in the run directory, never in the tree), in path order. Symlinks are not followed; what cannot be read
/// is left out (the console lines are read then).
pub fn junit_reports(changes: &Path) -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    walk_changes(changes, "", 0, &mut files);
    files
        .iter()
        .filter(|(rel, _)| {
            let mut parts = rel.rsplit('/');
            let (name, dir) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            dir == crate::JUNIT_DIR && name.ends_with(".xml")
        })
        .map(|(_, p)| read_bounded(p))
        .filter(|b| !b.is_empty())
        .collect()
}

/// The other result files a harness wrote in the run's working directory ([`repro_repair::reports::is_report`]:
/// automake's `*.trs` and `test-suite.log`), with their paths relative to it, in path order.
pub fn harness_reports(changes: &Path) -> Vec<ReportFile> {
    let mut files = Vec::new();
    walk_changes(changes, "", 0, &mut files);
    files
        .into_iter()
        .filter(|(rel, _)| repro_repair::reports::is_report(rel))
        .map(|(path, p)| ReportFile { text: read_bounded(&p), path })
        .collect()
}

/// The regular files under `dir` (`(relative path, path)`), sorted, at most [`MAX_REPORT_FILES`] of those a
/// result file could be (`.xml`, `.trs`, `.log`), never following a symlink.
fn walk_changes(dir: &Path, rel: &str, depth: usize, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if out.len() >= MAX_REPORT_FILES {
            return;
        }
        let Ok(ft) = e.file_type() else { continue };
        let name = e.file_name().to_string_lossy().into_owned();
        let r = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
        if ft.is_dir() && depth < MAX_REPORT_DEPTH {
            walk_changes(&e.path(), &r, depth + 1, out);
        } else if ft.is_file() && [".xml", ".trs", ".log"].iter().any(|x| name.ends_with(x)) {
            out.push((r, e.path()));
        }
    }
}

/// Spawns `exe` (repro itself) for each step.
#[derive(Debug, Clone)]
pub struct ReproExecutor {
    pub exe: PathBuf,
    pub state: PathBuf,
}

fn read_bounded(path: &Path) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(MAX_OUTPUT).read_to_end(&mut buf);
    }
    buf
}

impl ReproExecutor {
    /// Runs `cmd` (stdin closed, stdout and stderr collected) for at most `budget` (`Duration::MAX`: no limit):
    /// then SIGTERM (which `repro run` forwards to every guest process), and
    /// SIGKILL after [`STOP_GRACE`] (a killed `repro run` leaves no process behind). Returns stdout, stderr and
    /// whether it was stopped.
    fn output(&self, what: &str, mut cmd: Command, budget: Duration) -> Result<(Vec<u8>, String, bool), LoopError> {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| LoopError::Exec {
            what: what.into(),
            detail: format!("cannot start {}: {e}", self.exe.display()),
        })?;
        let drain = |r: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut r) = r {
                    let _ = r.read_to_end(&mut buf);
                }
                buf
            })
        };
        let out = drain(child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
        let err = drain(child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
        let wait_err = |e: std::io::Error| LoopError::Exec { what: what.into(), detail: format!("cannot wait: {e}") };
        let started = Instant::now();
        let mut timed_out = false;
        let mut termed: Option<Instant> = None;
        loop {
            if child.try_wait().map_err(wait_err)?.is_some() {
                break;
            }
            if termed.is_none() && started.elapsed() >= budget {
                timed_out = true;
                let pid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                termed = Some(Instant::now());
            }
            if termed.is_some_and(|t| t.elapsed() >= STOP_GRACE) {
                let _ = child.kill();
                child.wait().map_err(wait_err)?;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let stdout = out.join().unwrap_or_default();
        let stderr = String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned();
        Ok((stdout, stderr, timed_out))
    }
}

/// How long a stopped agent has between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// A JSON document a child printed, or why not.
fn parse<T: serde::de::DeserializeOwned>(what: &str, stdout: &[u8], stderr: &str) -> Result<T, LoopError> {
    serde_json::from_slice(stdout).map_err(|e| LoopError::Exec {
        what: what.into(),
        detail: format!("printed no report ({e}); stderr: {}", stderr.trim()),
    })
}

impl Executor for ReproExecutor {
    fn replay(
        &mut self,
        pack: &Path,
        tree: &Path,
        with: &[PathBuf],
        runs: u32,
        env: &[(String, String)],
    ) -> Result<ReplayResult, LoopError> {
        let mut cmd = Command::new(&self.exe);
        cmd.current_dir(tree).arg("replay").arg(pack).arg("--json").arg("--runs").arg(runs.to_string());
        cmd.arg("--state-dir").arg(&self.state);
        for p in with {
            cmd.arg("--with").arg(p);
        }
        for (k, v) in env {
            cmd.arg("--env").arg(format!("{k}={v}"));
        }
        let what = format!("repro replay {}", pack.display());
        let (stdout, stderr, _) = self.output(&what, cmd, Duration::MAX)?;
        let report: serde_json::Value = parse(&what, &stdout, &stderr)?;
        let bad = |field: &str| LoopError::Exec { what: what.clone(), detail: format!("its report has no {field}") };
        let failing_tests = report["recorded"]["failing_tests"]
            .as_array()
            .map(|a| a.iter().filter_map(|t| t.as_str().map(String::from)).collect())
            .unwrap_or_default();
        let mut out = Vec::new();
        for r in report["runs"].as_array().ok_or_else(|| bad("runs"))? {
            let run_dir = PathBuf::from(r["run_dir"].as_str().ok_or_else(|| bad("run_dir"))?);
            let exit_status = r["exit_status"].as_i64().ok_or_else(|| bad("exit_status"))? as i32;
            let reproduced = r["differences"].as_array().is_some_and(|d| d.is_empty()) && r["diverged"].is_null();
            let output = RunOutput {
                stdout: read_bounded(&run_dir.join("stdout")),
                stderr: read_bounded(&run_dir.join("stderr")),
                junit: junit_reports(&run_dir.join("changes")),
                reports: harness_reports(&run_dir.join("changes")),
            };
            out.push(ReplayedRun { exit_status, reproduced, run_dir, output });
        }
        Ok(ReplayResult { runs: out, failing_tests, report: stdout })
    }

    fn agent(
        &mut self,
        tree: &Path,
        command: &str,
        env: &[(String, String)],
        budget: Duration,
    ) -> Result<AgentResult, LoopError> {
        let mut cmd = Command::new(&self.exe);
        cmd.current_dir(tree).args(["run", "--json", "-q", "--keep-changes", "--no-config"]);
        cmd.arg("--state-dir").arg(&self.state);
        for (k, v) in env {
            cmd.arg("--env").arg(format!("{k}={v}"));
        }
        for file in private_files(command) {
            cmd.arg("--bind").arg(format!("{file}:{file}:ro"));
        }
        cmd.args(["--", "sh", "-c", command]);
        let what = "the agent (repro run --keep-changes)";
        let (stdout, stderr, timed_out) = self.output(what, cmd, budget)?;
        if timed_out {
            // Stopped: `repro run` ends the guest on SIGTERM and prints its record when it can.
            let record: Option<RunRecord> = serde_json::from_slice(&stdout).ok();
            return Ok(AgentResult {
                run_id: record.as_ref().map(|r| r.id.clone()).unwrap_or_default(),
                exit_status: record.map_or(128 + 15, |r| r.exit_status),
                timed_out: true,
            });
        }
        let record: RunRecord = parse(what, &stdout, &stderr)?;
        Ok(AgentResult { run_id: record.id, exit_status: record.exit_status, timed_out: false })
    }

    fn contract(&mut self, tree: &Path) -> Result<Option<ContractResult>, LoopError> {
        let file = tree.join(repro_model::project::FILE_NAME);
        if !file.is_file() {
            return Ok(None);
        }
        let loaded = repro_sandbox::project::load(&file)?;
        if loaded.file.contract.is_none() {
            return Ok(None);
        }
        let mut cmd = Command::new(&self.exe);
        cmd.current_dir(tree).args(["contract", "verify", "--json"]).arg("--config").arg(&file);
        cmd.arg("--state-dir").arg(&self.state);
        let what = "repro contract verify";
        let (stdout, stderr, _) = self.output(what, cmd, Duration::MAX)?;
        let report: ContractReport = parse(what, &stdout, &stderr)?;
        let failed_steps = report
            .steps
            .iter()
            .filter(|s| s.stage != repro_model::project::Stage::Diagnose && s.outcome != StepOutcome::Passed)
            .map(|s| s.name.clone())
            .collect();
        Ok(Some(ContractResult {
            passed: report.passed,
            report: self.state.join("contracts").join(&report.id).join("report.json"),
            failed_steps,
        }))
    }
}

/// The files the agent's command names by absolute path in places the sandbox makes its own (`/tmp`, `/home`,
/// `/run`): the guest would not see them there, so they are bound read-only at the same path (an agent script
/// kept in a temporary directory). A path with `:` or `,` is left alone (a bind cannot name it).
fn private_files(command: &str) -> Vec<String> {
    let private = ["/tmp/", "/home/", "/run/"];
    let mut out: Vec<String> = command
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '\'' || c == '"'))
        .filter(|w| private.iter().any(|p| w.starts_with(p)) && !w.contains([':', ',']))
        .filter(|w| Path::new(w).is_file())
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod junit_reports_tests {
    use std::fs;

    #[test]
    fn reads_the_xml_files_of_every_junit_directory_under_changes() {
        let t = tempfile::tempdir().unwrap();
        let c = t.path().join("changes");
        let top = c.join(crate::JUNIT_DIR);
        let sub = c.join("sub").join(crate::JUNIT_DIR);
        fs::create_dir_all(&top).unwrap();
        fs::create_dir_all(&sub).unwrap();
        fs::write(top.join("pytest.xml"), "<testsuites/>").unwrap();
        fs::write(sub.join("pytest.xml"), "<testsuite/>").unwrap();
        fs::write(top.join("notes.txt"), "no").unwrap();
        fs::write(top.join("empty.xml"), "").unwrap();
        // An xml file outside a junit directory is the project's, not the replay's report.
        fs::write(c.join("other.xml"), "<testsuites/>").unwrap();
        std::os::unix::fs::symlink(&top, c.join("link")).unwrap();
        let got = super::junit_reports(&c);
        assert_eq!(got, [b"<testsuites/>".to_vec(), b"<testsuite/>".to_vec()]);
        assert!(super::junit_reports(&t.path().join("missing")).is_empty());
        // automake's result files, by their paths relative to the working directory.
        fs::create_dir_all(c.join("tests")).unwrap();
        fs::write(c.join("tests/t_total.sh.trs"), ":test-result: FAIL\n").unwrap();
        fs::write(c.join("tests/t_total.sh.log"), "output").unwrap();
        fs::write(c.join("test-suite.log"), "# TOTAL: 1\n").unwrap();
        let got: Vec<String> = super::harness_reports(&c).into_iter().map(|f| f.path).collect();
        assert_eq!(got, ["test-suite.log", "tests/t_total.sh.trs"]);
    }
}

#[cfg(test)]
mod private_files_tests {
    #[test]
    fn names_only_existing_files_in_private_places() {
        let f = tempfile::NamedTempFile::new_in("/tmp").unwrap();
        let p = f.path().to_str().unwrap().to_string();
        let cmd = format!("sh '{p}' /tmp/does-not-exist /usr/bin/env {p}");
        assert_eq!(super::private_files(&cmd), [p]);
        assert!(super::private_files("sh /tmp/a:b").is_empty());
    }
}
