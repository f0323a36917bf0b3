//! Observers: watchers (a command whose lines are recorded and can be waited for), the Prometheus scrape
//! loops and the Docker events stream. What they fail to record is reported in the timeline.
use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use repro_model::timeline::Event;
use serde_json::{json, Value};

use crate::common::expand;
use crate::docker;
use crate::engine::Ctx;
use crate::flow::secs;
use crate::fsutil::{self, write_json_atomic};
use crate::model::Scrape;
use crate::proc::{self, Cancel};
use crate::prom;

/// A watcher's lines in memory, for signal waits: only the newest [`WatchLines::KEEP`] (a watcher that prints
/// without end costs bounded memory; every line is still in its file).
#[derive(Default)]
pub struct WatchLines {
    /// Lines dropped from the front.
    dropped: usize,
    lines: VecDeque<String>,
}

impl WatchLines {
    pub const KEEP: usize = 10_000;
    pub fn push(&mut self, line: String) {
        if self.lines.len() >= Self::KEEP {
            self.lines.pop_front();
            self.dropped += 1;
        }
        self.lines.push_back(line);
    }
    /// Lines pushed so far (dropped ones included).
    pub fn total(&self) -> usize {
        self.dropped + self.lines.len()
    }
    /// The kept lines from number `from` on.
    pub fn since(&self, from: usize) -> impl Iterator<Item = &String> {
        self.lines.iter().skip(from.saturating_sub(self.dropped))
    }
}

/// The running observers of a run.
pub struct Observers {
    stop: Cancel,
    handles: Vec<(String, std::thread::JoinHandle<()>)>,
    watcher_pgids: Vec<i32>,
}

/// A line of a watch file: `t`, `ts` and `line`.
fn watch_record(ctx: &Ctx, line: &str) -> Value {
    json!({"t": secs(Duration::from_secs_f64(ctx.tl.elapsed())), "ts": fsutil::rfc3339(fsutil::now()), "line": line})
}

/// Starts the scrape loops and the watchers of the adapter.
pub fn start(ctx: &Arc<Ctx>) -> Observers {
    let stop = Cancel::default();
    let mut handles = Vec::new();
    let mut watcher_pgids = Vec::new();
    for s in &ctx.adapter.observers.metrics {
        let ctx2 = Arc::clone(ctx);
        let stop2 = stop.clone();
        let spec = s.clone();
        handles
            .push((format!("scrape of {}", s.target), std::thread::spawn(move || scrape_loop(&ctx2, &spec, &stop2))));
    }
    for w in &ctx.adapter.observers.watchers {
        let log = ctx.run_dir.join("logs").join(format!("watch-{}.log", w.name));
        let mut cmd = proc::shell(&w.run, &ctx.env, &ctx.run_dir);
        let errlog = match std::fs::OpenOptions::new().create(true).append(true).open(&log) {
            Ok(f) => f,
            Err(e) => {
                ctx.harness_error(&format!("watcher {}: {}: {e}", w.name, log.display()));
                continue;
            }
        };
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(errlog);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                ctx.harness_error(&format!("watcher {} could not start: {e}", w.name));
                continue;
            }
        };
        watcher_pgids.push(child.id() as i32);
        crate::reaper_link::register_group(child.id() as i32);
        ctx.watcher_groups.lock().unwrap_or_else(|e| e.into_inner()).push(child.id() as i32);
        ctx.emit(Event::WatcherStarted { watcher: w.name.clone(), pid: Some(child.id()) });
        let Some(out) = child.stdout.take() else {
            ctx.harness_error(&format!("watcher {}: no stdout pipe", w.name));
            continue;
        };
        let ctx2 = Arc::clone(ctx);
        let name = w.name.clone();
        handles.push((
            format!("watcher {name}"),
            std::thread::spawn(move || {
                let jsonl = ctx2.run_dir.join("system/watch").join(format!("{name}.jsonl"));
                let mut raw = std::fs::OpenOptions::new().create(true).append(true).open(&log);
                let mut reported = false;
                for line in BufReader::new(out).lines() {
                    // A line that is not UTF-8 or a closed pipe ends the watch: the watcher is done.
                    let Ok(line) = line else { break };
                    let written = fsutil::append_line(&jsonl, &watch_record(&ctx2, &line).to_string())
                        .map_err(|e| e.to_string())
                        .and_then(|()| match raw.as_mut() {
                            Ok(f) => writeln!(f, "{line}").map_err(|e| format!("{}: {e}", log.display())),
                            Err(e) => Err(format!("{}: {e}", log.display())),
                        });
                    if let (Err(e), false) = (written, reported) {
                        // The evidence of the watch is incomplete: the run cannot be trusted.
                        ctx2.harness_error(&format!("watcher {name}: {e}"));
                        reported = true;
                    }
                    ctx2.watch_lines
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(name.clone())
                        .or_default()
                        .push(line);
                    ctx2.flow.notify.bump();
                }
                // Reaps the watcher; its exit status is not part of the run's evidence.
                let _ = child.wait();
            }),
        ));
    }
    Observers { stop, handles, watcher_pgids }
}

/// Why a scrape recorded no samples.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The endpoint did not answer with a page, the page is not the exposition format, or it holds too many
    /// samples (the error names the URL).
    #[error(transparent)]
    Prom(#[from] prom::PromError),
    /// The scrape could not be written to the run directory.
    #[error("recording the scrape: {0}")]
    Record(#[source] crate::error::ChaosError),
}

/// One scrape into `system/metrics/<target>.jsonl`; Err when the scrape failed.
fn scrape_once(ctx: &Ctx, spec: &Scrape, types: &mut BTreeMap<String, String>) -> Result<(), ScrapeError> {
    let url = expand(&spec.url, &ctx.env);
    let t = secs(Duration::from_secs_f64(ctx.tl.elapsed()));
    let ts = fsutil::rfc3339(fsutil::now());
    let dir = ctx.run_dir.join("system/metrics");
    let scraped = prom::scrape(&url, Duration::from_secs(2));
    let (rec, result) = match scraped {
        Ok(expo) => {
            let mut changed = false;
            for (k, v) in &expo.types {
                if types.get(k) != Some(v) {
                    types.insert(k.clone(), v.clone());
                    changed = true;
                }
            }
            if changed {
                write_json_atomic(&dir.join(format!("{}.types.json", spec.target)), &json!(types))
                    .map_err(ScrapeError::Record)?;
            }
            let samples: Vec<Value> = expo
                .samples
                .iter()
                .map(|s| {
                    let v = if s.value.is_finite() {
                        json!(s.value)
                    } else if s.value.is_nan() {
                        json!("NaN")
                    } else if s.value > 0.0 {
                        json!("+Inf")
                    } else {
                        json!("-Inf")
                    };
                    json!({"name": s.name, "labels": s.labels, "value": v})
                })
                .collect();
            (json!({"t": t, "ts": ts, "samples": samples}), Ok(()))
        }
        Err(e) => (json!({"t": t, "ts": ts, "error": e.to_string()}), Err(e)),
    };
    fsutil::append_line(&dir.join(format!("{}.jsonl", spec.target)), &rec.to_string()).map_err(ScrapeError::Record)?;
    result.map_err(ScrapeError::from)
}

/// Scrapes every interval until stopped. The first failure of a run of failures is a `scrape.failed` event
/// (every failure is in the metrics file).
fn scrape_loop(ctx: &Ctx, spec: &Scrape, stop: &Cancel) {
    let interval = spec.interval.map_or(Duration::from_secs(2), |d| d.0);
    let mut types = BTreeMap::new();
    let mut failing = false;
    let mut once = |types: &mut BTreeMap<String, String>| match scrape_once(ctx, spec, types) {
        Ok(()) => failing = false,
        Err(error) => {
            if !failing {
                let url = expand(&spec.url, &ctx.env);
                ctx.emit(Event::ScrapeFailed { target: spec.target.clone(), url, error: error.to_string() });
            }
            failing = true;
        }
    };
    loop {
        once(&mut types);
        if !stop.sleep(interval) {
            break;
        }
    }
    // A last scrape, so the state after the flow and its undo is recorded (not after a signal: no time).
    if ctx.flow.interrupt.signal().is_none() {
        once(&mut types);
    }
}

/// Stops the observers: watchers get SIGTERM (then SIGKILL), scrape loops end after a last scrape.
pub fn stop(ctx: &Ctx, obs: Observers) {
    obs.stop.cancel("run ended");
    for pgid in &obs.watcher_pgids {
        proc::kill_group(*pgid, Signal::SIGTERM);
    }
    for pgid in &obs.watcher_pgids {
        if !proc::poll_until(ctx.budget(Duration::from_secs(2)), Duration::from_millis(5), || {
            !proc::group_alive(*pgid, proc::Zombies::Excluded)
        }) {
            proc::kill_group(*pgid, Signal::SIGKILL);
        }
    }
    // After a signal a scrape still waiting for its endpoint is not waited for.
    if ctx.flow.interrupt.signal().is_none() {
        for (what, h) in obs.handles {
            if h.join().is_err() {
                ctx.harness_error(&format!("the {what} thread panicked"));
            }
        }
    }
    ctx.emit(Event::ObserversStopped {});
}

/// Every Docker event of the run's containers, into system/watch/docker-events.jsonl (`line` is
/// `<action> <target>`, like a watcher's line).
pub fn start_docker_events(ctx: &Arc<Ctx>, eng: &docker::Engine) {
    let stop = Arc::new(AtomicBool::new(false));
    let path = ctx.run_dir.join("system/watch/docker-events.jsonl");
    let ctx2 = Arc::clone(ctx);
    let mut reported = false;
    let res = eng.events(docker::RUN_LABEL, &ctx.run_id, Arc::clone(&stop), move |ev| {
        let line = format!(
            "{} {}",
            ev["action"].as_str().unwrap_or("?"),
            ev["target"].as_str().or(ev["name"].as_str()).unwrap_or("?")
        );
        let mut rec = watch_record(&ctx2, &line);
        if let (Some(m), Some(e)) = (rec.as_object_mut(), ev.as_object()) {
            for (k, v) in e {
                if !v.is_null() {
                    m.insert(k.clone(), v.clone());
                }
            }
        }
        if let (Err(e), false) = (fsutil::append_line(&path, &rec.to_string()), reported) {
            ctx2.harness_error(&format!("docker events: {e}"));
            reported = true;
        }
        // Signals may wait on these lines like on any watcher's.
        ctx2.watch_lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry("docker-events".into())
            .or_default()
            .push(line);
        ctx2.flow.notify.bump();
    });
    match res {
        Ok(done) => {
            ctx.emit(Event::WatcherStarted { watcher: "docker-events".into(), pid: None });
            *ctx.docker_events.lock().unwrap_or_else(|e| e.into_inner()) = Some((stop, done));
        }
        Err(e) => ctx.harness_error(&format!("docker events: {e}")),
    }
}

pub fn stop_docker_events(ctx: &Ctx) {
    let Some((stop, done)) = ctx.docker_events.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
    // The engine delivers events asynchronously: give the last ones (destroy) a moment.
    std::thread::sleep(Duration::from_millis(150));
    stop.store(true, Ordering::SeqCst);
    if done.recv_timeout(Duration::from_secs(2)).is_err() {
        ctx.emit(Event::HarnessWarning {
            target: None,
            instance: None,
            detail: "the docker events stream did not end within 2s".into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watcher_lines_in_memory_are_bounded_and_waits_still_see_new_ones() {
        let mut w = WatchLines::default();
        for i in 0..(WatchLines::KEEP + 500) {
            w.push(format!("line {i}"));
        }
        assert_eq!(w.lines.len(), WatchLines::KEEP);
        assert_eq!(w.total(), WatchLines::KEEP + 500);
        let from = w.total();
        w.push("new".into());
        assert_eq!(w.since(from).cloned().collect::<Vec<_>>(), ["new"]);
        // A position among the dropped lines starts at the oldest kept one.
        assert_eq!(w.since(0).next().unwrap(), "line 501");
    }
}
