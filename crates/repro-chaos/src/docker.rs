//! The Docker Engine API for the `docker` driver, through bollard. bollard is async: a current-thread tokio
//! runtime runs on one dedicated thread and every call is sent to it, so the rest of the harness stays
//! synchronous. Streams (container waits, events) run as tasks on the same runtime.
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;

use bollard::models::{ContainerCreateBody, HostConfig, PortBinding};
use bollard::query_parameters::{
    CreateContainerOptions, EventsOptions, KillContainerOptions, ListContainersOptions, RemoveContainerOptions,
    RestartContainerOptions, StopContainerOptions, WaitContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;

/// The label every container of a run carries: `repro.chaos.run=<run id>`.
pub const RUN_LABEL: &str = "repro.chaos.run";
pub const TARGET_LABEL: &str = "repro.chaos.target";

type Job = Box<dyn FnOnce(Docker) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// A connection to the Docker engine, served by a dedicated runtime thread.
#[derive(Clone)]
pub struct Engine {
    tx: tokio::sync::mpsc::UnboundedSender<Job>,
}

/// What `inspect` tells about a container.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct State {
    pub running: bool,
    pub paused: bool,
    pub pid: i32,
    pub exit_code: i64,
    pub started_at: String,
    pub status: String,
}

/// A container to create.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    pub name: String,
    pub image: String,
    pub command: Vec<String>,
    pub env: Vec<String>,
    pub labels: HashMap<String, String>,
    /// (container port, host port on 127.0.0.1)
    pub ports: Vec<(u16, u16)>,
    pub stop_timeout: Option<i64>,
    /// `host:container[:ro]` bind mounts.
    pub binds: Vec<String>,
    pub working_dir: Option<String>,
    /// Share the host's network namespace (instances reach targets on 127.0.0.1).
    pub host_network: bool,
}

/// A failed call to the Docker engine.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// The engine answered with an error.
    #[error("{message} (HTTP {status})")]
    Server { status: u16, message: String },
    /// The call did not get an answer (transport, decoding).
    #[error("{0}")]
    Client(#[source] bollard::errors::Error),
    #[error("the Docker engine is not reachable: {0}")]
    Unreachable(#[source] Box<DockerError>),
    #[error("tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot start the Docker client thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("the Docker client thread ended")]
    ThreadEnded,
}

impl DockerError {
    /// Whether the engine said the container is not paused (an unpause that had nothing to do).
    pub fn is_not_paused(&self) -> bool {
        matches!(self, DockerError::Server { message, .. } if message.contains("is not paused"))
    }
}

fn msg(e: bollard::errors::Error) -> DockerError {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, message } => {
            DockerError::Server { status: status_code, message }
        }
        other => DockerError::Client(other),
    }
}

impl Engine {
    /// Connects to the local engine (DOCKER_HOST or /var/run/docker.sock), negotiating the API version.
    pub fn connect() -> Result<Engine, DockerError> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
        let (ready_tx, ready_rx) = std_mpsc::channel::<Result<(), DockerError>>();
        std::thread::Builder::new()
            .name("chaos-docker".into())
            .spawn(move || {
                // Every `ready_tx.send` below may fail only when `connect` stopped waiting: nothing to tell then.
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(DockerError::Runtime(e)));
                        return;
                    }
                };
                rt.block_on(async move {
                    let docker = match Docker::connect_with_local_defaults() {
                        Ok(d) => d,
                        Err(e) => {
                            let _ = ready_tx.send(Err(msg(e)));
                            return;
                        }
                    };
                    let docker = match docker.negotiate_version().await {
                        Ok(d) => d,
                        Err(e) => {
                            let _ = ready_tx.send(Err(msg(e)));
                            return;
                        }
                    };
                    if let Err(e) = docker.ping().await {
                        let _ = ready_tx.send(Err(msg(e)));
                        return;
                    }
                    let _ = ready_tx.send(Ok(()));
                    while let Some(job) = rx.recv().await {
                        tokio::spawn(job(docker.clone()));
                    }
                });
            })
            .map_err(DockerError::Thread)?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Engine { tx }),
            Ok(Err(e)) => Err(DockerError::Unreachable(Box::new(e))),
            Err(_) => Err(DockerError::ThreadEnded),
        }
    }

    /// Runs `f` on the runtime thread and waits for its result.
    pub fn call<T, F, Fut>(&self, f: F) -> Result<T, DockerError>
    where
        T: Send + 'static,
        F: FnOnce(Docker) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, bollard::errors::Error>> + Send + 'static,
    {
        let (tx, rx) = std_mpsc::channel();
        let job: Job = Box::new(move |d| {
            Box::pin(async move {
                // The caller waits on `rx` until it gets this; a send fails only if it is gone.
                let _ = tx.send(f(d).await.map_err(msg));
            })
        });
        self.tx.send(job).map_err(|_| DockerError::ThreadEnded)?;
        rx.recv().map_err(|_| DockerError::ThreadEnded)?
    }

    pub fn version(&self) -> Result<serde_json::Value, DockerError> {
        let v = self.call(|d| async move { d.version().await })?;
        Ok(serde_json::json!({
            "version": v.version, "api_version": v.api_version, "os": v.os, "arch": v.arch,
            "kernel": v.kernel_version, "git_commit": v.git_commit,
        }))
    }

    /// (image id, repo digests) of a local image; never pulls.
    pub fn image(&self, reference: &str) -> Result<(String, Vec<String>), DockerError> {
        let r = reference.to_string();
        let i = self.call(move |d| async move { d.inspect_image(&r).await })?;
        // The API marks every field optional; an absent id or digest list reads as empty (shown as such).
        Ok((i.id.unwrap_or_default(), i.repo_digests.unwrap_or_default()))
    }

    pub fn create(&self, spec: &Spec) -> Result<String, DockerError> {
        let spec = spec.clone();
        self.call(move |d| async move {
            let mut bindings = HashMap::new();
            let mut exposed = HashMap::new();
            for (cport, hport) in &spec.ports {
                bindings.insert(
                    format!("{cport}/tcp"),
                    Some(vec![PortBinding { host_ip: Some("127.0.0.1".into()), host_port: Some(hport.to_string()) }]),
                );
                exposed.insert(format!("{cport}/tcp"), HashMap::new());
            }
            let body = ContainerCreateBody {
                image: Some(spec.image.clone()),
                cmd: if spec.command.is_empty() { None } else { Some(spec.command.clone()) },
                env: Some(spec.env.clone()),
                labels: Some(spec.labels.clone()),
                exposed_ports: Some(exposed),
                stop_timeout: spec.stop_timeout,
                working_dir: spec.working_dir.clone(),
                host_config: Some(HostConfig {
                    port_bindings: Some(bindings),
                    binds: if spec.binds.is_empty() { None } else { Some(spec.binds.clone()) },
                    network_mode: spec.host_network.then(|| "host".to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let opts = CreateContainerOptions { name: Some(spec.name.clone()), ..Default::default() };
            d.create_container(Some(opts), body).await.map(|r| r.id)
        })
    }

    pub fn start(&self, id: &str) -> Result<(), DockerError> {
        let id = id.to_string();
        self.call(move |d| async move {
            d.start_container(&id, None::<bollard::query_parameters::StartContainerOptions>).await
        })
    }

    pub fn kill(&self, id: &str, signal: &str) -> Result<(), DockerError> {
        let (id, signal) = (id.to_string(), signal.to_string());
        self.call(move |d| async move { d.kill_container(&id, Some(KillContainerOptions { signal })).await })
    }

    pub fn stop(&self, id: &str, timeout_secs: i32) -> Result<(), DockerError> {
        let id = id.to_string();
        self.call(move |d| async move {
            d.stop_container(&id, Some(StopContainerOptions { t: Some(timeout_secs), signal: None })).await
        })
    }

    pub fn restart(&self, id: &str, timeout_secs: i32) -> Result<(), DockerError> {
        let id = id.to_string();
        self.call(move |d| async move {
            d.restart_container(&id, Some(RestartContainerOptions { t: Some(timeout_secs), signal: None })).await
        })
    }

    pub fn pause(&self, id: &str) -> Result<(), DockerError> {
        let id = id.to_string();
        self.call(move |d| async move { d.pause_container(&id).await })
    }

    pub fn unpause(&self, id: &str) -> Result<(), DockerError> {
        let id = id.to_string();
        self.call(move |d| async move { d.unpause_container(&id).await })
    }

    pub fn remove(&self, id: &str) -> Result<(), DockerError> {
        let id = id.to_string();
        self.call(move |d| async move {
            d.remove_container(&id, Some(RemoveContainerOptions { force: true, v: true, link: false })).await
        })
    }

    pub fn state(&self, id: &str) -> Result<State, DockerError> {
        let id = id.to_string();
        let i = self.call(move |d| async move {
            d.inspect_container(&id, None::<bollard::query_parameters::InspectContainerOptions>).await
        })?;
        // Absent state fields read as "not running, no pid": what an engine that omits them means.
        let s = i.state.unwrap_or_default();
        Ok(State {
            running: s.running.unwrap_or(false),
            paused: s.paused.unwrap_or(false),
            pid: s.pid.unwrap_or(0) as i32,
            exit_code: s.exit_code.unwrap_or(0),
            // Absent: an engine that does not report them (empty, as `docker inspect` shows them).
            started_at: s.started_at.unwrap_or_default(),
            status: s.status.map(|x| x.to_string()).unwrap_or_default(),
        })
    }

    /// The container's stdout and stderr so far.
    pub fn logs(&self, id: &str) -> Result<String, DockerError> {
        let id = id.to_string();
        self.call(move |d| async move {
            let opts = bollard::query_parameters::LogsOptions { stdout: true, stderr: true, ..Default::default() };
            let mut s = d.logs(&id, Some(opts));
            let mut out = String::new();
            while let Some(chunk) = s.next().await {
                out.push_str(&chunk?.to_string());
            }
            Ok(out)
        })
    }

    /// Waits until the container is not running; its exit code.
    pub fn wait(&self, id: &str) -> Result<i64, DockerError> {
        let id = id.to_string();
        self.call(move |d| async move {
            let mut s = d.wait_container(&id, Some(WaitContainerOptions { condition: "not-running".into() }));
            match s.next().await {
                Some(Ok(r)) => Ok(r.status_code),
                // A non-zero exit comes back as an error carrying the code.
                Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
                Some(Err(e)) => Err(e),
                None => Ok(-1),
            }
        })
    }

    /// Containers (also stopped ones) carrying `label=value`: (id, name, state).
    pub fn list(&self, label: &str, value: &str) -> Result<Vec<(String, String, String)>, DockerError> {
        let filter = format!("{label}={value}");
        let v = self.call(move |d| async move {
            let mut filters = HashMap::new();
            filters.insert("label".to_string(), vec![filter]);
            d.list_containers(Some(ListContainersOptions { all: true, filters: Some(filters), ..Default::default() }))
                .await
        })?;
        Ok(v.into_iter()
            .map(|c| {
                (
                    // Optional in the API; an empty id, name or state is listed as such.
                    c.id.unwrap_or_default(),
                    c.names.unwrap_or_default().join(",").trim_start_matches('/').to_string(),
                    c.state.map(|s| s.to_string()).unwrap_or_default(),
                )
            })
            .collect())
    }

    /// Streams the engine's events for containers labelled `label=value` to `on_event` until `stop` is set
    /// (checked at every event and every 100ms).
    pub fn events(
        &self,
        label: &str,
        value: &str,
        stop: Arc<std::sync::atomic::AtomicBool>,
        mut on_event: impl FnMut(serde_json::Value) + Send + 'static,
    ) -> Result<std_mpsc::Receiver<()>, DockerError> {
        let filter = format!("{label}={value}");
        let (done_tx, done_rx) = std_mpsc::channel();
        let job: Job = Box::new(move |d| {
            Box::pin(async move {
                let mut filters = HashMap::new();
                filters.insert("label".to_string(), vec![filter]);
                filters.insert("type".to_string(), vec!["container".to_string()]);
                let mut s = d.events(Some(EventsOptions { filters: Some(filters), ..Default::default() }));
                loop {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    let next = match tokio::time::timeout(std::time::Duration::from_millis(100), s.next()).await {
                        Ok(n) => n,
                        Err(_) => continue,
                    };
                    match next {
                        Some(Ok(ev)) => {
                            // An event without actor or attributes carries no names: recorded without them.
                            let actor = ev.actor.unwrap_or_default();
                            let attrs = actor.attributes.unwrap_or_default();
                            let mut attrs: Vec<(String, String)> = attrs.into_iter().collect();
                            attrs.sort();
                            let attr = |k: &str| attrs.iter().find(|a| a.0 == k).map(|a| a.1.clone());
                            on_event(serde_json::json!({
                                "type": ev.typ.map(|t| t.to_string()),
                                "action": ev.action,
                                "id": actor.id,
                                "name": attr("name"),
                                "target": attr(TARGET_LABEL),
                                "exit_code": attr("exitCode"),
                                "signal": attr("signal"),
                                "time_nano": ev.time_nano,
                            }));
                        }
                        Some(Err(e)) => {
                            on_event(serde_json::json!({"error": msg(e).to_string()}));
                            break;
                        }
                        None => break,
                    }
                }
                // Whoever stopped the stream may have stopped waiting for its end too.
                let _ = done_tx.send(());
            })
        });
        self.tx.send(job).map_err(|_| DockerError::ThreadEnded)?;
        Ok(done_rx)
    }
}

/// Whether an image reference is pinned (by digest or by image id) rather than by a tag only.
pub fn pinned(reference: &str) -> bool {
    reference.contains("@sha256:") || reference.starts_with("sha256:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_not_pins() {
        assert!(!pinned("redis:7"));
        assert!(!pinned("repro-chaos/busybox:latest"));
        assert!(pinned("redis@sha256:0123"));
        assert!(pinned("sha256:0123"));
    }
}
