//! Test doubles of the engine: a [`FakeDriver`] that records every call, can be told to fail one and to run
//! a hook at one (e.g. interrupt the run), whose targets and instances are entries in a table; and a
//! [`FakeClock`] whose time moves only when the flow sleeps or polls.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::driver::{Driver, DriverCx, DriverError, Exit, Hit, InstanceRt, OnExit, Started, Stopped, TargetRt, Victim};
use crate::flow::{Clock, Notify};
use crate::proc::Cancel;

type Hook = Box<dyn Fn() + Send + Sync>;

/// The state of a [`FakeDriver`], shared with the test.
#[derive(Default)]
pub struct FakeState {
    /// Every call, in order: `start:<target>`, `stop:<target>`, `spawn:<instance>`, `kill:<instance>`,
    /// `remove:<instance>`, `hit:<Hit>:<victim>`, `thaw:<victims>`.
    pub calls: Mutex<Vec<String>>,
    fail: Mutex<HashMap<String, String>>,
    hooks: Mutex<HashMap<String, Hook>>,
    /// Live processes: pid → the callback of their end.
    live: Mutex<HashMap<i32, OnExit>>,
    frozen: Mutex<HashSet<i32>>,
    next_pid: AtomicI32,
    /// Instances of these workloads end at once with the given code; the others run until killed.
    pub exits: Mutex<BTreeMap<String, i64>>,
}

impl FakeState {
    /// Makes call `key` fail with `message`.
    pub fn fail(&self, key: &str, message: &str) {
        self.fail.lock().unwrap().insert(key.into(), message.into());
    }
    /// Runs `f` when call `key` happens (before it takes effect).
    pub fn on(&self, key: &str, f: impl Fn() + Send + Sync + 'static) {
        self.hooks.lock().unwrap().insert(key.into(), Box::new(f));
    }
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
    fn call(&self, key: String, what: &'static str, name: &str) -> Result<(), DriverError> {
        self.calls.lock().unwrap().push(key.clone());
        if let Some(h) = self.hooks.lock().unwrap().get(&key) {
            h();
        }
        match self.fail.lock().unwrap().get(&key) {
            Some(m) => Err(DriverError::Unsupported { what, name: name.into(), detail: m.clone() }),
            None => Ok(()),
        }
    }
    fn pid(&self) -> i32 {
        1000 + self.next_pid.fetch_add(1, Ordering::SeqCst)
    }
    /// Ends live process `pid` (its callback runs now, on this thread).
    fn end(&self, pid: i32, exit: Exit) {
        let cb = self.live.lock().unwrap().remove(&pid);
        self.frozen.lock().unwrap().remove(&pid);
        if let Some(cb) = cb {
            cb(pid, exit);
        }
    }
}

/// A driver over a table instead of processes.
#[derive(Clone, Default)]
pub struct FakeDriver(pub Arc<FakeState>);

impl Driver for FakeDriver {
    fn kind(&self) -> &'static str {
        "fake"
    }

    fn start_target(
        &self,
        _cx: &DriverCx,
        t: &TargetRt,
        _env: &BTreeMap<String, String>,
        _previous: Option<i32>,
        _adopt: bool,
        on_exit: OnExit,
    ) -> Result<Started, DriverError> {
        self.0.call(format!("start:{}", t.name()), "target", t.name())?;
        let pid = self.0.pid();
        self.0.live.lock().unwrap().insert(pid, on_exit);
        Ok(Started { pid, container: None })
    }

    fn stop_target(&self, _cx: &DriverCx, t: &TargetRt, _why: &str) -> Option<Stopped> {
        let (pid, _) = t.pid()?;
        // A failing stop is only recorded: stopping never fails the run.
        let _ = self.0.call(format!("stop:{}", t.name()), "target", t.name());
        self.0.end(pid, Exit { code: None, signal: Some(15) });
        Some(Stopped { pid: Some(pid), container: None })
    }

    fn spawn_instance(
        &self,
        _cx: &DriverCx,
        inst: &InstanceRt,
        _script: &Path,
        _env: &BTreeMap<String, String>,
        on_exit: OnExit,
    ) -> Result<Started, DriverError> {
        self.0.call(format!("spawn:{}", inst.name), "instance", &inst.name)?;
        let pid = self.0.pid();
        match self.0.exits.lock().unwrap().get(&inst.workload).copied() {
            // The engine holds the instance while it starts it: the end comes from another thread, as a
            // real waiter's does.
            Some(code) => {
                std::thread::spawn(move || on_exit(pid, Exit { code: Some(code), signal: None }));
            }
            None => {
                self.0.live.lock().unwrap().insert(pid, on_exit);
            }
        }
        Ok(Started { pid, container: None })
    }

    fn kill_instance(&self, _cx: &DriverCx, inst: &InstanceRt) {
        // Killing never fails the run; the call is what the tests look at.
        let _ = self.0.call(format!("kill:{}", inst.name), "instance", &inst.name);
        if let Some(pid) = inst.pid() {
            self.0.end(pid, Exit { code: None, signal: Some(9) });
        }
    }

    fn remove_instance(&self, _cx: &DriverCx, inst: &InstanceRt) -> Result<(), DriverError> {
        self.0.call(format!("remove:{}", inst.name), "instance", &inst.name)
    }

    fn hit(&self, v: &Victim, how: Hit) -> Result<(), DriverError> {
        self.0.call(format!("hit:{how:?}:{}", v.name()), "victim", v.name())?;
        let Victim::Process { pid, .. } = v else { return Ok(()) };
        match how {
            Hit::Freeze => {
                self.0.frozen.lock().unwrap().insert(*pid);
            }
            _ => self.0.end(*pid, Exit { code: None, signal: Some(9) }),
        }
        Ok(())
    }

    fn lingers(&self, v: &Victim) -> bool {
        matches!(v, Victim::Process { pid, .. } if self.0.live.lock().unwrap().contains_key(pid))
    }

    fn is_frozen(&self, v: &Victim) -> bool {
        matches!(v, Victim::Process { pid, .. } if self.0.frozen.lock().unwrap().contains(pid))
    }

    fn thaw(&self, _cx: &DriverCx, victims: &[Victim], names: &[String]) -> (bool, String) {
        let ok = self.0.call(format!("thaw:{}", names.join(",")), "victims", &names.join(",")).is_ok();
        for v in victims {
            if let Victim::Process { pid, .. } = v {
                self.0.frozen.lock().unwrap().remove(pid);
            }
        }
        (ok, if ok { format!("resumed {}", names.join(", ")) } else { "still stopped".into() })
    }

    fn api(&self, _how: Hit) -> Option<&'static str> {
        None
    }
}

/// A clock that moves only when the flow sleeps (by the time slept, at once) or polls (by the poll step,
/// after a short real wait so that other threads' events get through).
#[derive(Default)]
pub struct FakeClock {
    now: Mutex<Duration>,
}

impl Clock for FakeClock {
    fn now(&self) -> Duration {
        *self.now.lock().unwrap()
    }
    fn sleep(&self, cancel: &Cancel, d: Duration) -> bool {
        if cancel.is_cancelled() {
            return false;
        }
        let mut now = self.now.lock().unwrap();
        *now = now.saturating_add(d);
        !cancel.is_cancelled()
    }
    fn pause(&self, notify: &Notify, d: Duration) {
        notify.wait(Duration::from_millis(2));
        let mut now = self.now.lock().unwrap();
        *now = now.saturating_add(d);
    }
}

/// A shared fake clock: the test keeps one handle to read the time the flow spent.
impl Clock for std::sync::Arc<FakeClock> {
    fn now(&self) -> Duration {
        (**self).now()
    }
    fn sleep(&self, cancel: &Cancel, d: Duration) -> bool {
        (**self).sleep(cancel, d)
    }
    fn pause(&self, notify: &Notify, d: Duration) {
        (**self).pause(notify, d)
    }
}
