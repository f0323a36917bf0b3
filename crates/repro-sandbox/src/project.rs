//! Finding and reading the project file (`repro.toml`, schema in [`repro_model::project`]) and folding it into
//! the run options: a flag given on the command line wins over the file.

use std::io::Read;
use std::path::{Path, PathBuf};

use repro_model::project::{self, ProjectFile, FILE_NAME, MAX_BYTES};
use repro_model::settings::{ConfigChoice, RunOptions};

use crate::SandboxError;

/// A project file read from disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    pub path: PathBuf,
    pub file: ProjectFile,
}

/// The project file `choice` names for a run in `cwd`: `--config FILE`, none with `--no-config`, else the first
/// `repro.toml` in `cwd` and its ancestors, stopping at the directory that holds `.git` (the project's root).
pub fn locate(choice: &ConfigChoice, cwd: &Path) -> Option<PathBuf> {
    match choice {
        ConfigChoice::Ignore => None,
        ConfigChoice::File(p) => Some(if p.is_absolute() { p.clone() } else { cwd.join(p) }),
        ConfigChoice::Discover => {
            let me = nix::unistd::geteuid().as_raw();
            for dir in cwd.ancestors() {
                let candidate = dir.join(FILE_NAME);
                if candidate.is_file() {
                    if let Some(why) = untrusted(&candidate, me) {
                        eprintln!(
                            "repro: warning: {} ignored: {why} (name it with --config to use it)",
                            candidate.display()
                        );
                        return None;
                    }
                    return Some(candidate);
                }
                if dir.join(".git").exists() {
                    break;
                }
            }
            None
        }
    }
}

/// Why a project file found by discovery is not taken: one that another user owns or may write (a
/// `/tmp/repro.toml` planted above a scratch directory) would set the binds and environment of this user's runs.
fn untrusted(path: &Path, me: u32) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    // Unreadable metadata: `load` reports the file by name when it cannot open it.
    let m = std::fs::metadata(path).ok()?;
    if m.uid() != me && m.uid() != 0 {
        return Some(format!("it is owned by uid {}, not by this user or root", m.uid()));
    }
    if m.mode() & 0o022 != 0 {
        return Some(format!("others may write it (mode {:04o})", m.mode() & 0o7777));
    }
    None
}

/// Reads and parses the project file at `path` (at most [`MAX_BYTES`]).
pub fn load(path: &Path) -> Result<Loaded, SandboxError> {
    let f = std::fs::File::open(path).map_err(|e| SandboxError::io("cannot open the project file", path, e))?;
    let mut text = String::new();
    f.take(MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| SandboxError::io("cannot read the project file", path, e))?;
    if text.len() as u64 > MAX_BYTES {
        return Err(SandboxError::usage(
            path.display().to_string(),
            format!("the project file is larger than {MAX_BYTES} bytes"),
        ));
    }
    let file = project::parse(&path.display().to_string(), &text)?;
    Ok(Loaded { path: path.to_path_buf(), file })
}

/// The options with the project file's `[run]` under them: the file's `env` and `binds` come before the command
/// line's (a later `--env` of the same name wins), and its `epoch`, `seed`, `memory` and `disk` apply when the
/// flag was not given. A relative bind in the file is taken from the file's directory.
pub fn apply(opts: &RunOptions, loaded: &Loaded) -> RunOptions {
    let run = &loaded.file.run;
    let base = loaded.path.parent().unwrap_or(Path::new("/"));
    let mut out = opts.clone();
    out.env = run.env.iter().cloned().chain(opts.env.iter().cloned()).collect();
    out.bind = run
        .binds
        .iter()
        .map(|b| if b.starts_with('/') { b.clone() } else { format!("{}/{b}", base.display()) })
        .chain(opts.bind.iter().cloned())
        .collect();
    out.seed = opts.seed.or(run.seed);
    out.memory = opts.memory.clone().or_else(|| run.memory.clone());
    out.pids = opts.pids.or(run.pids);
    out.disk = opts.disk.clone().or_else(|| run.disk.clone());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_in_ancestors_up_to_the_git_root() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("proj");
        let deep = root.join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        assert_eq!(locate(&ConfigChoice::Discover, &deep), None);
        // Above the git root: not the project's.
        std::fs::write(t.path().join(FILE_NAME), "").unwrap();
        assert_eq!(locate(&ConfigChoice::Discover, &deep), None);
        std::fs::write(root.join(FILE_NAME), "").unwrap();
        assert_eq!(locate(&ConfigChoice::Discover, &deep), Some(root.join(FILE_NAME)));
        std::fs::write(deep.join(FILE_NAME), "").unwrap();
        assert_eq!(locate(&ConfigChoice::Discover, &deep), Some(deep.join(FILE_NAME)));
        assert_eq!(locate(&ConfigChoice::Ignore, &deep), None);
        assert_eq!(locate(&ConfigChoice::File("x.toml".into()), &deep), Some(deep.join("x.toml")));
        // One others may write is not taken by discovery.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(deep.join(FILE_NAME), std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(locate(&ConfigChoice::Discover, &deep), None);
        let me = nix::unistd::geteuid().as_raw();
        assert!(untrusted(&deep.join(FILE_NAME), me).unwrap().contains("mode 0666"));
        // Owned by another user (as root the file can be given away; unprivileged, it is the caller's).
        if std::os::unix::fs::chown(root.join(FILE_NAME), Some(12345), None).is_ok() {
            let why = untrusted(&root.join(FILE_NAME), me).unwrap();
            assert!(why.contains("owned by uid 12345"), "{why}");
        }
    }

    #[test]
    fn flags_win_over_the_file() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join(FILE_NAME);
        std::fs::write(
            &path,
            "[run]\nenv = [\"A=file\", \"B=file\"]\nbinds = [\"data\", \"/usr\"]\nseed = 9\nmemory = \"1G\"\n",
        )
        .unwrap();
        let loaded = load(&path).unwrap();
        let opts = RunOptions { env: vec!["B=flag".into()], seed: Some(3), ..Default::default() };
        let o = apply(&opts, &loaded);
        assert_eq!(o.env, ["A=file", "B=file", "B=flag"]);
        assert_eq!(o.bind, [format!("{}/data", t.path().display()), "/usr".into()]);
        assert_eq!((o.seed, o.memory.as_deref(), o.disk.as_deref()), (Some(3), Some("1G"), None));
        let o = apply(&RunOptions::default(), &loaded);
        assert_eq!(o.seed, Some(9));
    }

    #[test]
    fn bad_files_are_usage_errors_naming_the_file() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join(FILE_NAME);
        std::fs::write(&path, "[run]\nseed = 1\nbind = []\n").unwrap();
        let e = load(&path).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().starts_with(&format!("{}:3:1: unknown key `bind`", path.display())), "{e}");
        std::fs::write(&path, vec![b'#'; MAX_BYTES as usize + 2]).unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("larger than"));
        let missing = load(&t.path().join("none.toml")).unwrap_err().to_string();
        assert!(missing.starts_with("cannot open the project file"), "{missing}");
    }
}
