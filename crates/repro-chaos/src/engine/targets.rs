//! Targets: start (through the driver), health, the record of their exits, stop.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use repro_model::timeline::{Event, TargetIncarnation};

use crate::driver::{short, DriverError, Exit, TargetRt};
use crate::engine::Ctx;
use crate::flow::secs;
use crate::proc;

impl Ctx {
    pub fn target_dir(&self, name: &str) -> PathBuf {
        self.run_dir.join("system/targets").join(name)
    }

    /// The variables of a target's hooks: CHAOS_TARGET, CHAOS_TARGET_DIR and, for a docker target,
    /// CHAOS_CONTAINER (its name, for `docker exec` in a health check).
    pub fn target_env(&self, t: &TargetRt) -> BTreeMap<String, String> {
        let name = t.name().to_string();
        let mut extra =
            vec![("CHAOS_TARGET", name.clone()), ("CHAOS_TARGET_DIR", self.target_dir(&name).display().to_string())];
        if self.driver.has_containers() {
            extra.push(("CHAOS_CONTAINER", container_name(&self.run_id, &name)));
        }
        // Its own proxied ports are the listen ports; another target's, its listener of that proxy.
        let mut env = self.identity_env(crate::engine::network::Identity::Target(&name)).unwrap_or_else(|e| {
            self.harness_error(&format!("target {name}: {e}"));
            self.env.clone()
        });
        for (k, v) in extra {
            env.insert(k.to_string(), v);
        }
        env
    }

    /// Starts a target and waits until it is healthy. Err means the driver could not start it.
    pub fn start_target(&self, t: &Arc<TargetRt>, reason: &str, operation: Option<&str>) -> Result<bool, DriverError> {
        self.start_target_with(t, reason, operation, false)
    }

    /// Starts (or, with `adopt`, records an engine-side restart of) a target, then waits until it is healthy.
    pub fn start_target_with(
        &self,
        t: &Arc<TargetRt>,
        reason: &str,
        operation: Option<&str>,
        adopt: bool,
    ) -> Result<bool, DriverError> {
        let name = t.name().to_string();
        let env = self.target_env(t);
        let (tx, rx) = mpsc::channel::<Exit>();
        let t2 = Arc::clone(t);
        let on_exit = Box::new(move |pid: i32, exit: Exit| {
            let mut g = t2.state.lock().unwrap_or_else(|e| e.into_inner());
            if g.0 == Some(pid) {
                g.1 = false;
            }
            drop(g);
            // The receiver is gone only once the run recorded every exit it waits for.
            let _ = tx.send(exit);
        });
        let started = {
            // Held while starting: an exit that comes at once still finds this incarnation's pid.
            let mut g = t.state.lock().unwrap_or_else(|e| e.into_inner());
            let previous = g.0;
            let started = self.driver.start_target(&self.dcx(), t, &env, previous, adopt, on_exit)?;
            *g = (Some(started.pid), true);
            started
        };
        let pid = started.pid;
        let inc = t.incarnation.fetch_add(1, Ordering::SeqCst) + 1;
        let fields = TargetIncarnation {
            target: name.clone(),
            pid,
            incarnation: inc,
            reason: reason.to_string(),
            operation: operation.map(str::to_string),
            container: t.container().map(|c| short(&c)),
        };
        self.emit(if inc == 1 { Event::TargetStarted(fields) } else { Event::TargetRestarted(fields) });
        // The exit is recorded in the timeline by `reap_target_events`.
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).push((name.clone(), pid, rx));
        let Some(h) = &t.spec.health else {
            return Ok(true);
        };
        let timeout = h.timeout.map_or(Duration::from_secs(30), |d| d.0);
        let interval = h.interval.map_or(Duration::from_millis(50), |d| d.0);
        let started_at = self.flow.clock.now();
        // The end-of-run undo restarts targets after a cancel too, and must see them healthy.
        let watch_cancel = reason != "undo";
        let mut cancelled = false;
        let healthy = proc::poll_until(timeout, interval, || {
            if !t.running() {
                return true; // exited: stop polling, reported below
            }
            if watch_cancel && self.flow.is_cancelled() {
                cancelled = true;
                return true;
            }
            let cancel = if watch_cancel { Some(&self.flow.cancel) } else { None };
            proc::run_hook(&h.run, &env, &self.run_dir, interval.max(Duration::from_secs(5)), cancel)
                .is_ok_and(|o| o.ok())
        }) && !cancelled
            && t.running();
        self.reap_target_events();
        let after = secs(self.flow.clock.now().saturating_sub(started_at));
        if healthy {
            self.emit(Event::TargetHealthy { target: name, pid, after });
        } else {
            self.emit(Event::TargetUnhealthy { target: name, pid, after });
        }
        Ok(healthy)
    }

    /// Records `target.exited` for incarnations that have ended.
    pub fn reap_target_events(&self) {
        let mut g = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|(name, pid, rx)| match rx.try_recv() {
            Ok(exit) => {
                self.emit(Event::TargetExited {
                    target: name.clone(),
                    pid: *pid,
                    code: exit.code,
                    signal: exit.signal,
                });
                false
            }
            Err(mpsc::TryRecvError::Empty) => true,
            // The waiter ended without an exit status (its wait failed): nothing to record.
            Err(mpsc::TryRecvError::Disconnected) => false,
        });
    }

    /// Stops a target gracefully (the driver's way), then records its exit and the stop.
    pub fn stop_target(&self, t: &TargetRt, why: &str) {
        let Some(stopped) = self.driver.stop_target(&self.dcx(), t, why) else { return };
        self.reap_target_events();
        self.emit(Event::TargetStopped {
            target: t.name().to_string(),
            pid: stopped.pid,
            reason: why.to_string(),
            container: stopped.container.map(|c| short(&c)),
        });
    }
}

/// The name of a docker target's container.
pub fn container_name(run_id: &str, target: &str) -> String {
    format!("repro-chaos-{}-{target}", run_id.to_ascii_lowercase())
}
