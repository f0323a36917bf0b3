//! `repro.toml`: a project's own settings for `repro run` (and, later, other commands). A table per command
//! (`[run]` today) so that the schema can grow without breaking files already written; every unknown key is an
//! error that names the file, the line and the key, never silently ignored.
//!
//! ```toml
//! [run]
//! env = ["CI", "LANG=C.UTF-8"]        # as --env: NAME passes the host's value, NAME=VALUE sets one
//! binds = ["/opt/tool", "data:/data"] # as --bind: HOST[:GUEST][:ro|rw]; a relative HOST is from this file's dir
//! epoch = 2024-02-29T12:00:00Z        # as --epoch: a TOML date-time, Unix seconds, or an RFC 3339 string
//! seed = 7                            # as --seed
//! memory = "2G"                       # as --memory
//! pids = 1024                         # as --pids
//! disk = "512M"                       # as --disk
//! network = "loopback"                # the guest's network: its own namespace with `lo` only (the one mode)
//!
//! [contract]                          # repro contract verify: see [`Contract`]
//! setup = ["make deps"]
//! diagnose = [["python3", "--version"]]
//! verify = [{ name = "tests", run = "make test" }]
//! ```

use serde::{Deserialize, Serialize};

/// The file name looked for in the working directory and its ancestors (up to the git root).
pub const FILE_NAME: &str = "repro.toml";
/// The largest project file read: it is outside input.
pub const MAX_BYTES: u64 = 1 << 20;

/// A whole `repro.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectFile {
    /// Settings of `repro run` (and of the runs `capture`, `hunt` and `explain` make).
    #[serde(default)]
    pub run: RunSection,
    /// How the project is set up and checked (`repro contract verify`).
    #[serde(default)]
    pub contract: Option<Contract>,
    /// The Remote Execution API engine (`repro remote`); `--remote` and its flags override it.
    #[serde(default)]
    pub remote: Option<RemoteSection>,
}

/// `[remote]`: the engine `repro remote` talks to (checked by `repro_remote::config`).
///
/// ```toml
/// [remote]
/// url = "grpcs://cas.example.com:443"     # as --remote: grpc://HOST:PORT (plain) or grpcs://HOST:PORT (TLS)
/// instance = "main"                       # as --remote-instance; the server's default instance when absent
/// headers = ["x-team: build"]             # as --remote-header NAME:VALUE (a secret belongs in the environment)
/// ca_cert = "ca.pem"                      # as --remote-ca-cert: the CA of a grpcs:// server (PEM)
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteSection {
    pub url: Option<String>,
    pub instance: Option<String>,
    #[serde(default)]
    pub headers: Vec<String>,
    pub ca_cert: Option<String>,
}

/// `[contract]`: the environment contract. Each stage is a list of steps; `repro contract verify` runs them all,
/// cold, in a fresh copy of the project, each step a `repro run` with the `[run]` settings.
///
/// ```toml
/// [contract]
/// setup = ["pip install --no-index --find-links wheels -r requirements.txt"]  # once, its changes kept
/// diagnose = [["python3", "--version"], "uname -m"]                          # facts, printed, never fatal
/// verify = [{ name = "tests", run = ["python3", "-m", "pytest", "-q"] }]     # all must exit 0: "fixed"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    /// Run first, in order, their file changes kept in the copy; the first that fails stops the contract.
    #[serde(default)]
    pub setup: Vec<Step>,
    /// Print environment facts; a failure is reported, not fatal.
    #[serde(default)]
    pub diagnose: Vec<Step>,
    /// The commands whose success means "fixed" (the test suite, linters); every one runs.
    #[serde(default)]
    pub verify: Vec<Step>,
}

/// One step: a shell line (run by `sh -c`), an argv (run as is, so a toolchain such as rustup's cargo is
/// found and bound as for `repro run -- cargo …`), or a table with a name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Step {
    Shell(String),
    Argv(Vec<String>),
    Named(NamedStep),
}

/// `{ name = "...", run = "..." | [...] }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedStep {
    pub name: String,
    pub run: StepCommand,
}

/// What a named step runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StepCommand {
    Shell(String),
    Argv(Vec<String>),
}

impl Step {
    /// The argv the step runs (a shell line as `sh -c LINE`) and its name (the line or argv when unnamed).
    pub fn command(&self) -> (String, Vec<String>) {
        let shell = |l: &str| vec!["sh".to_string(), "-c".to_string(), l.to_string()];
        match self {
            Step::Shell(l) => (l.clone(), shell(l)),
            Step::Argv(a) => (a.join(" "), a.clone()),
            Step::Named(n) => match &n.run {
                StepCommand::Shell(l) => (n.name.clone(), shell(l)),
                StepCommand::Argv(a) => (n.name.clone(), a.clone()),
            },
        }
    }

    /// Why the step cannot run: an empty line, argv or name.
    pub fn problem(&self) -> Option<&'static str> {
        let (name, argv) = self.command();
        if name.trim().is_empty() {
            Some("a step needs a name or a command")
        } else if argv.is_empty() || argv[0].is_empty() || argv.last().is_some_and(|a| a.trim().is_empty()) {
            Some("a step's command is empty")
        } else {
            None
        }
    }
}

/// The stages of a contract, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Setup,
    Diagnose,
    Verify,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Setup => "setup",
            Stage::Diagnose => "diagnose",
            Stage::Verify => "verify",
        }
    }
}

/// What `repro contract verify` found (`--json`, and `report.json` of its directory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractReport {
    /// The contract's id (its directory's name under `STATE/contracts/`).
    pub id: String,
    /// The project file.
    pub file: String,
    /// Every setup and verify step exited 0.
    pub passed: bool,
    pub steps: Vec<StepReport>,
    pub duration_ms: u64,
}

/// One step's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepReport {
    pub stage: Stage,
    pub name: String,
    pub argv: Vec<String>,
    /// The run that ran it; absent when it did not run (an earlier setup step failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_dir: Option<String>,
    /// The run's exit status (121 when it was not deterministic, as `repro run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    pub outcome: StepOutcome,
    pub duration_ms: u64,
    /// The last lines of its stdout and stderr (a diagnose step's facts; a failure's cause).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stdout_tail: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr_tail: String,
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepOutcome {
    Passed,
    Failed,
    /// Not run: an earlier setup step failed.
    Skipped,
}

/// `[run]`: each key is the flag of the same name; a flag given on the command line wins over the file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    /// `--env` entries, applied before those of the command line.
    #[serde(default)]
    pub env: Vec<String>,
    /// `--bind` entries, added before those of the command line.
    #[serde(default)]
    pub binds: Vec<String>,
    #[serde(default)]
    pub epoch: Option<EpochValue>,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub memory: Option<String>,
    #[serde(default)]
    pub pids: Option<u64>,
    #[serde(default)]
    pub disk: Option<String>,
    #[serde(default)]
    pub network: Option<Network>,
}

/// The guest's network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Network {
    /// Its own network namespace with only `lo` up (what every `repro run` has).
    #[default]
    Loopback,
}

/// An epoch as the file may write it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EpochValue {
    /// Unix seconds.
    Seconds(i64),
    /// A TOML date-time (`2024-02-29T12:00:00Z`, unquoted).
    DateTime(toml::value::Datetime),
    /// Text as `--epoch` takes it.
    Text(String),
}

impl EpochValue {
    /// The value as `--epoch` would be given it.
    pub fn as_flag(&self) -> String {
        match self {
            EpochValue::Seconds(s) => s.to_string(),
            EpochValue::DateTime(d) => d.to_string(),
            EpochValue::Text(t) => t.clone(),
        }
    }
}

/// A project file that does not parse: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct ProjectFileError {
    pub file: String,
    /// 1-based; 0 when the parser gave no position.
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// Parses the text of the project file `file` (named in errors).
pub fn parse(file: &str, text: &str) -> Result<ProjectFile, ProjectFileError> {
    toml::from_str::<ProjectFile>(text).map_err(|e| {
        let (line, column) = match e.span() {
            Some(span) => line_column(text, span.start),
            None => (0, 0),
        };
        ProjectFileError { file: file.to_string(), line, column, message: message_of(&e) }
    })
}

/// The parser's message, on one line and with serde's "field" said as the file's word, "key".
fn message_of(e: &toml::de::Error) -> String {
    let m = e.message().trim().replace('\n', " ");
    match m.strip_prefix("unknown field ") {
        Some(rest) => format!("unknown key {rest}"),
        None => m,
    }
}

/// 1-based line and column (in characters) of byte `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let upto = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = upto.matches('\n').count() + 1;
    let column = upto.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_full_file_parses() {
        let text = r#"
[run]
env = ["CI", "A=b"]
binds = ["/opt/x", "data:/data:rw"]
epoch = 2024-02-29T12:00:00Z
seed = 7
memory = "2G"
disk = "512M"
network = "loopback"
"#;
        let p = parse("repro.toml", text).unwrap();
        assert_eq!(p.run.env, ["CI", "A=b"]);
        assert_eq!(p.run.binds, ["/opt/x", "data:/data:rw"]);
        assert_eq!(p.run.epoch.as_ref().map(EpochValue::as_flag).as_deref(), Some("2024-02-29T12:00:00Z"));
        assert_eq!((p.run.seed, p.run.memory.as_deref(), p.run.disk.as_deref()), (Some(7), Some("2G"), Some("512M")));
        assert_eq!(p.run.network, Some(Network::Loopback));
        assert_eq!(parse("f", "").unwrap(), ProjectFile::default());
        let secs = parse("f", "[run]\nepoch = 1700000000\n").unwrap();
        assert_eq!(secs.run.epoch, Some(EpochValue::Seconds(1_700_000_000)));
        let text = parse("f", "[run]\nepoch = \"2024-01-01T00:00:00Z\"\n").unwrap();
        assert_eq!(text.run.epoch.map(|e| e.as_flag()).as_deref(), Some("2024-01-01T00:00:00Z"));
    }

    #[test]
    fn a_contract_parses_in_its_three_forms() {
        let text = r#"
[contract]
setup = ["make deps"]
diagnose = [["python3", "--version"], "uname -m"]
verify = [{ name = "tests", run = ["cargo", "test"] }, { name = "lint", run = "make lint" }]
"#;
        let c = parse("repro.toml", text).unwrap().contract.unwrap();
        assert_eq!(c.setup[0].command(), ("make deps".into(), vec!["sh".into(), "-c".into(), "make deps".into()]));
        assert_eq!(c.diagnose[0].command().1, ["python3", "--version"]);
        assert_eq!(c.verify[0].command(), ("tests".into(), vec!["cargo".into(), "test".into()]));
        assert_eq!(c.verify[1].command().1, ["sh", "-c", "make lint"]);
        assert!(c.verify.iter().all(|s| s.problem().is_none()));
        assert_eq!(Step::Shell(" ".into()).problem(), Some("a step needs a name or a command"));
        assert_eq!(Step::Argv(vec![]).problem(), Some("a step needs a name or a command"));
        let e = parse("p/repro.toml", "[contract]\nverify = [{ name = \"t\", cmd = \"x\" }]\n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        let e = parse("p/repro.toml", "[contract]\ntests = []\n").unwrap_err().to_string();
        assert!(e.starts_with("p/repro.toml:2:1: unknown key `tests`"), "{e}");
    }

    #[test]
    fn the_remote_table() {
        let text = "[remote]\nurl = \"grpc://h:1\"\ninstance = \"main\"\nheaders = [\"x-a: 1\"]\n";
        let r = parse("repro.toml", text).unwrap().remote.unwrap();
        assert_eq!((r.url.as_deref(), r.instance.as_deref(), r.headers.len()), (Some("grpc://h:1"), Some("main"), 1));
        let e = parse("p/repro.toml", "[remote]\nurl = \"grpc://h:1\"\ninstanc = \"x\"\n").unwrap_err().to_string();
        assert!(e.starts_with("p/repro.toml:3:1: unknown key `instanc`"), "{e}");
    }

    /// Every bad file names the file, the line and what is wrong.
    #[test]
    fn bad_files_name_file_line_and_key() {
        let cases: [(&str, &str); 7] = [
            ("[run]\nseed = 1\nenvs = [\"A\"]\n", "p/repro.toml:3:1: unknown key `envs`, expected one of"),
            ("[build]\nx = 1\n", "p/repro.toml:1:2: unknown key `build`, expected one of `run`, `contract`, `remote`"),
            ("[run]\nseed = \"seven\"\n", "p/repro.toml:2:8: invalid type: string \"seven\", expected u64"),
            ("[run]\nseed = -1\n", "p/repro.toml:2:8: invalid value: integer `-1`, expected u64"),
            ("[run]\nnetwork = \"host\"\n", "p/repro.toml:2:11: unknown variant `host`, expected `loopback`"),
            ("[run]\nenv = \"A\"\n", "p/repro.toml:2:7: invalid type: string \"A\", expected a sequence"),
            ("[run\n", "p/repro.toml:1:5: "),
        ];
        for (text, expected) in cases {
            let e = parse("p/repro.toml", text).unwrap_err().to_string();
            assert!(e.starts_with(expected), "{text:?}: {e}");
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,60}") {
            if let Err(e) = parse("f", &s) {
                prop_assert!(e.to_string().starts_with("f:"));
            }
        }
    }
}
