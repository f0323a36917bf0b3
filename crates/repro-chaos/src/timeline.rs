//! The timeline: one JSON object per line, `t` seconds since the start, `ts`, `event` and fields.
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{Map, Value};

use repro_model::timeline::Event;

use crate::error::{ChaosError, Result};
use crate::fsutil::rfc3339;

pub struct Timeline {
    start: Instant,
    start_wall: time::OffsetDateTime,
    files: Mutex<(File, File)>,
    echo: bool,
    pub path: PathBuf,
    /// The first write or sync of the evidence that failed: the run cannot be trusted, and says so.
    error: Mutex<Option<ChaosError>>,
}

impl Timeline {
    /// Opens `timeline.jsonl` and `logs/harness.log` under `run_dir`.
    pub fn create(run_dir: &Path, echo: bool) -> Result<Timeline> {
        let path = run_dir.join("timeline.jsonl");
        let open = |p: &Path| OpenOptions::new().create(true).append(true).open(p).map_err(|e| ChaosError::io(p, e));
        let t = open(&path)?;
        let log = open(&run_dir.join("logs/harness.log"))?;
        Ok(Timeline {
            start: Instant::now(),
            start_wall: time::OffsetDateTime::now_utc(),
            files: Mutex::new((t, log)),
            echo,
            path,
            error: Mutex::new(None),
        })
    }

    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn start_wall(&self) -> time::OffsetDateTime {
        self.start_wall
    }

    fn record_error(&self, path: PathBuf, e: std::io::Error) {
        let mut g = self.error.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(ChaosError::Evidence { path, source: e });
        }
    }

    /// Records an event: one line of `timeline.jsonl` (`t`, `ts`, `event`, its fields) and one of
    /// `logs/harness.log`. A failed write is kept and returned by [`Timeline::sync`].
    pub fn emit(&self, event: Event) {
        let t = self.elapsed();
        let ts = rfc3339(time::OffsetDateTime::now_utc());
        let (name, rest) = event.split();
        let mut obj = Map::new();
        obj.insert("t".into(), Value::from((t * 1000.0).round() / 1000.0));
        obj.insert("ts".into(), Value::from(ts.clone()));
        obj.insert("event".into(), Value::from(name.clone()));
        let rest_text = Value::Object(rest.clone()).to_string();
        obj.extend(rest);
        let mut line = Value::Object(obj).to_string();
        line.push('\n');
        let human = format!("{ts} {name} {rest_text}\n");
        let mut g = self.files.lock().unwrap_or_else(|e| e.into_inner());
        // One write per line: a crash leaves at most one torn last line, which readers skip.
        if let Err(e) = g.0.write_all(line.as_bytes()) {
            self.record_error(self.path.clone(), e);
        }
        if let Err(e) = g.1.write_all(human.as_bytes()) {
            self.record_error(self.path.with_file_name("logs/harness.log"), e);
        }
        drop(g);
        if self.echo {
            // Not eprint!, which panics when stderr is a closed pipe; the echo is a courtesy, the files are
            // the record.
            let _ = std::io::stderr().lock().write_all(human.as_bytes());
        }
    }

    /// Flushes both files to disk; Err with the first write or sync that failed during the run.
    pub fn sync(&self) -> Result<()> {
        let g = self.files.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = g.0.sync_all() {
            self.record_error(self.path.clone(), e);
        }
        if let Err(e) = g.1.sync_all() {
            self.record_error(self.path.with_file_name("logs/harness.log"), e);
        }
        drop(g);
        match self.error.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Whether `event` (a timeline object) has `name` and every `where` field (compared as text; arrays
/// match when one element matches).
pub fn event_matches(event: &Value, name: &str, where_: &std::collections::BTreeMap<String, String>) -> bool {
    if event.get("event").and_then(Value::as_str) != Some(name) {
        return false;
    }
    where_.iter().all(|(k, want)| match event.get(k) {
        Some(Value::String(s)) => s == want,
        Some(Value::Array(a)) => a.iter().any(|v| value_text(v) == *want),
        Some(v) => value_text(v) == *want,
        None => false,
    })
}

pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_carry_t_ts_event_and_the_fields() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("logs")).unwrap();
        let tl = Timeline::create(d.path(), false).unwrap();
        tl.emit(Event::FlowFinished { ok: true });
        tl.sync().unwrap();
        let text = std::fs::read_to_string(&tl.path).unwrap();
        let v: Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["event"], "flow.finished");
        assert_eq!(v["ok"], true);
        assert!(v["t"].is_f64() && v["ts"].is_string(), "{v}");
        let log = std::fs::read_to_string(d.path().join("logs/harness.log")).unwrap();
        assert!(log.contains(" flow.finished {\"ok\":true}"), "{log}");
    }

    #[test]
    fn a_write_that_fails_is_not_dropped() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("logs")).unwrap();
        // Every write to /dev/full fails with ENOSPC.
        std::os::unix::fs::symlink("/dev/full", d.path().join("timeline.jsonl")).unwrap();
        let tl = Timeline::create(d.path(), false).unwrap();
        tl.emit(Event::harness_error("x"));
        let err = tl.sync().unwrap_err();
        assert!(matches!(&err, ChaosError::Evidence { path, .. } if path.ends_with("timeline.jsonl")), "{err}");
        assert!(err.to_string().contains("cannot record the run's evidence"), "{err}");
    }
}
