//! The programs a command reaches, found before the run (pre-resolution; see docs/toolchains.md): argv[0] through
//! `env [-i] [VAR=..] cmd`, a leading `VAR=val` list and wrappers (`nice`, `timeout`, `nohup`, `time`, `exec`,
//! `command`); the words of a shell script (`sh ci.sh`, `bash -c '...'`, `./ci.sh` by its `#!`), of a Makefile's
//! lines (`make [target]`) and of package.json (`npm`/`yarn`/`pnpm`); each program's `#!` or ELF interpreter. Each is then
//! resolved on the host as the toolchain finder resolves argv[0] ([`crate::toolchain::resolve`]), and every name
//! the host's PATH finds elsewhere than the guest's PATH either has its toolchain shown and its directory put first
//! on the guest's PATH, or is said in a note (a silent interpreter swap is a dishonest green).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use repro_model::run::Toolchain;

use crate::toolchain::{self, guest_sees, which, Host};

/// Files read for words: at most this many bytes each, this many files, this many names in all.
const MAX_FILE: usize = 256 * 1024;
const MAX_FILES: usize = 32;
const MAX_NAMES: usize = 4096;

/// A program the command reaches: a name or a path, the PATH it is looked up with when the command sets one
/// (`env PATH=... cmd`), and where it was found (for the record's reason).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reached {
    pub program: String,
    pub path: Option<String>,
    pub from: String,
}

/// What pre-resolution found: the toolchains to show (argv[0]'s first), the hint for argv[0], and notes on names
/// the guest's PATH finds elsewhere than the host's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    pub toolchains: Vec<Toolchain>,
    pub hint: Option<String>,
    pub notes: Vec<String>,
    /// The guest's PATH when a toolchain or a program of the host's PATH needs a directory on it.
    pub path: Option<String>,
}

struct Walk<'a, 'h> {
    host: &'a Host<'h>,
    out: BTreeSet<Reached>,
    files: BTreeSet<PathBuf>,
}

fn is_assignment(w: &str) -> Option<(&str, &str)> {
    let (k, v) = w.split_once('=')?;
    let ok = !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then_some((k, v))
}

fn base(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

impl Walk<'_, '_> {
    fn host_path(&self) -> Option<String> {
        self.host.var_opt("PATH")
    }

    fn push(&mut self, program: &str, path: &Option<String>, from: &str) {
        if self.out.len() < MAX_NAMES {
            self.out.insert(Reached { program: program.into(), path: path.clone(), from: from.into() });
        }
    }

    /// Where the host finds `program` with `path` (or its own PATH).
    fn find(&self, program: &str, path: &Option<String>) -> Option<PathBuf> {
        if program.contains('/') {
            let p = crate::parse::normalize(&self.host.cwd.join(program));
            return p.is_file().then_some(p);
        }
        which(program, path.as_deref().or(self.host_path().as_deref())?)
    }

    /// An argv: its assignments and wrappers, the program, what it reads.
    fn command(&mut self, argv: &[String], mut path: Option<String>, from: &str, depth: usize) {
        let mut i = 0;
        while let Some((k, v)) = argv.get(i).and_then(|w| is_assignment(w)) {
            if k == "PATH" {
                path = Some(v.to_string());
            }
            i += 1;
        }
        let Some(prog) = argv.get(i) else { return };
        self.push(prog, &path, from);
        let rest = &argv[i + 1..];
        let skip_opts = |with_value: &[&str]| {
            let mut j = 0;
            while let Some(a) = rest.get(j) {
                if a == "--" {
                    return j + 1;
                }
                if !a.starts_with('-') || a == "-" {
                    break;
                }
                j += if with_value.contains(&a.as_str()) { 2 } else { 1 };
            }
            j
        };
        match base(prog) {
            "env" => {
                let mut j = skip_opts(&["-u", "--unset", "-C", "--chdir"]);
                while let Some((k, v)) = rest.get(j).and_then(|w| is_assignment(w)) {
                    if k == "PATH" {
                        path = Some(v.to_string());
                    }
                    j += 1;
                }
                return self.command(&rest[j.min(rest.len())..], path, from, depth);
            }
            "nice" | "nohup" | "time" | "exec" | "command" | "stdbuf" | "ionice" => {
                let j = skip_opts(&["-n", "--adjustment", "-c", "-i", "-o", "-e"]);
                return self.command(&rest[j.min(rest.len())..], path, from, depth);
            }
            "timeout" => {
                let j = skip_opts(&["-s", "--signal", "-k", "--kill-after"]) + 1;
                return self.command(&rest[j.min(rest.len())..], path, from, depth);
            }
            "sh" | "bash" | "dash" | "zsh" | "ksh" => {
                if let Some(c) = rest.iter().position(|a| a == "-c") {
                    if let Some(text) = rest.get(c + 1) {
                        self.text(text, path.clone(), &format!("{prog} -c"), depth);
                    }
                } else if let Some(script) = rest.iter().find(|a| !a.starts_with('-')) {
                    self.file(&self.host.cwd.join(script), path.clone(), depth);
                }
            }
            "make" | "gmake" => {
                let mut dir = self.host.cwd.to_path_buf();
                let mut named = None;
                for w in rest.windows(2) {
                    match w[0].as_str() {
                        "-C" | "--directory" => dir = dir.join(&w[1]),
                        "-f" | "--file" | "--makefile" => named = Some(w[1].clone()),
                        _ => {}
                    }
                }
                let files = match named {
                    Some(f) => vec![dir.join(f)],
                    None => ["GNUmakefile", "makefile", "Makefile"].iter().map(|f| dir.join(f)).collect(),
                };
                if let Some(f) = files.into_iter().find(|f| f.is_file()) {
                    self.file(&f, path.clone(), depth);
                }
            }
            "npm" | "pnpm" | "yarn" | "npx" => self.file(&self.host.cwd.join("package.json"), path.clone(), depth),
            _ => {}
        }
        // Its `#!` line: the interpreter is reached too; a shell script's words as well.
        if let Some(found) = self.find(prog, &path) {
            self.shebang(&found, &path, depth);
        }
    }

    fn shebang(&mut self, found: &Path, path: &Option<String>, depth: usize) {
        let mut head = [0u8; 256];
        let n = std::fs::File::open(found).and_then(|mut f| std::io::Read::read(&mut f, &mut head)).unwrap_or(0);
        if head[..n].starts_with(b"\x7fELF") {
            if let Some(interp) = elf_interp(found) {
                self.push(&interp, path, &format!("the ELF interpreter of {}", found.display()));
            }
            return;
        }
        let Some(line) = head[..n].strip_prefix(b"#!") else { return };
        let line = String::from_utf8_lossy(line.split(|&b| b == b'\n').next().unwrap_or_default()).into_owned();
        let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        let Some(interp) = words.first() else { return };
        let from = format!("the #! line of {}", found.display());
        self.push(interp, path, &from);
        let named = if base(interp) == "env" { words.iter().skip(1).find(|w| !w.starts_with('-')) } else { None };
        if let Some(n) = named {
            self.push(n, path, &from);
        }
        let shell = named.map(|n| n.as_str()).unwrap_or(base(interp));
        if matches!(shell, "sh" | "bash" | "dash" | "zsh" | "ksh") {
            self.file(found, path.clone(), depth);
        }
    }

    fn file(&mut self, f: &Path, path: Option<String>, depth: usize) {
        let f = crate::parse::normalize(f);
        if depth >= 4 || self.files.len() >= MAX_FILES || !self.files.insert(f.clone()) {
            return;
        }
        let Ok(bytes) = std::fs::read(&f) else { return };
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_FILE)]).into_owned();
        self.text(&text, path, &f.display().to_string(), depth + 1);
    }

    /// The words of a script: each name or path is a program it may run (a word that names none on the host is
    /// dropped when resolved). `PATH=` assignments change the PATH of the words after them ($HOME, ~ and $PATH
    /// expanded); other words with `$` are not guessed at.
    fn text(&mut self, text: &str, mut path: Option<String>, from: &str, depth: usize) {
        let home = self.host.var_opt("HOME").unwrap_or_default();
        for line in text.lines() {
            let mut words: Vec<String> = Vec::new();
            let line = line.replace(['"', '\''], "");
            for w in line.split(|c: char| c.is_whitespace() || ";&|()<>`{}".contains(c)) {
                if w.starts_with('#') {
                    break;
                }
                // A recipe's `@` and `+`; an option is no program.
                let w = w.trim_start_matches(['@', '+']).replace("~/", &format!("{home}/"));
                if w.starts_with('-') {
                    continue;
                }
                let w = w.replace("${HOME}", &home).replace("$HOME", &home);
                if let Some(("PATH", v)) = is_assignment(&w) {
                    let cur = path.clone().or(self.host_path()).unwrap_or_default();
                    path = Some(v.replace("${PATH}", &cur).replace("$PATH", &cur));
                    continue;
                }
                if !w.is_empty() && w.len() <= 255 && !w.contains(['$', '=', '*', '?', '[', ',']) {
                    words.push(w);
                }
            }
            for w in words {
                let name = w.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                    && w.chars().all(|c| c.is_ascii_alphanumeric() || "_.+-".contains(c));
                let is_path = w.starts_with('/') || w.starts_with("./") || w.starts_with("../");
                if name || is_path {
                    self.push(&w, &path, from);
                    if is_path && depth < 4 {
                        if let Some(found) = self.find(&w, &path) {
                            self.shebang(&found, &path, depth);
                        }
                    }
                }
            }
        }
    }
}

/// The ELF interpreter (PT_INTERP) of the executable `p`: 32- or 64-bit, little- or big-endian.
fn elf_interp(p: &Path) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(p).ok()?;
    let mut h = [0u8; 64];
    f.read_exact_at(&mut h, 0).ok()?;
    let wide = h[4] == 2;
    let big = h[5] == 2;
    let num = |b: &[u8]| -> u64 {
        let it = b.iter().map(|&x| u64::from(x));
        if big {
            it.fold(0, |a, x| (a << 8) | x)
        } else {
            it.rev().fold(0, |a, x| (a << 8) | x)
        }
    };
    let (phoff, phentsize, phnum) = if wide {
        (num(&h[32..40]), num(&h[54..56]), num(&h[56..58]))
    } else {
        (num(&h[28..32]), num(&h[42..44]), num(&h[44..46]))
    };
    for i in 0..phnum.min(256) {
        let mut ph = [0u8; 56];
        let len = (phentsize as usize).min(56);
        f.read_exact_at(&mut ph[..len], phoff.checked_add(i * phentsize)?).ok()?;
        if num(&ph[0..4]) != 3 {
            continue;
        }
        let (off, size) = if wide { (num(&ph[8..16]), num(&ph[32..40])) } else { (num(&ph[4..8]), num(&ph[16..20])) };
        let mut buf = vec![0u8; usize::try_from(size.min(4096)).ok()?];
        f.read_exact_at(&mut buf, off).ok()?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        return Some(String::from_utf8_lossy(&buf[..end]).into_owned());
    }
    None
}

/// The programs `argv` reaches, argv[0] first.
pub fn reached(argv: &[String], host: &Host) -> Vec<Reached> {
    let mut w = Walk { host, out: BTreeSet::new(), files: BTreeSet::new() };
    w.command(argv, None, "the command", 0);
    w.out.into_iter().collect()
}

/// Pre-resolution of `argv`: the toolchains of everything it reaches, the PATH that finds the host's programs.
pub fn resolve_all(argv: &[String], host: &Host, guest_path: &str) -> Reach {
    let first = toolchain::resolve(&argv[0], host, guest_path);
    let mut toolchains = first.toolchains;
    let reached = reached(argv, host);
    for r in &reached {
        let var = |k: &str| if k == "PATH" && r.path.is_some() { r.path.clone() } else { (host.var)(k) };
        let h = Host { var: &var, cwd: host.cwd };
        for mut t in toolchain::resolve(&r.program, &h, guest_path).toolchains {
            if !toolchains.iter().any(|o| o.paths == t.paths) {
                if r.from != "the command" {
                    t.reason = format!("{} (reached through {})", t.reason, r.from);
                }
                toolchains.push(t);
            }
        }
    }
    let suffix = format!(":{guest_path}");
    let mut bins: Vec<String> = Vec::new();
    for t in &toolchains {
        if let Some(b) = t.variables.get("PATH").and_then(|p| p.strip_suffix(&suffix)) {
            if !bins.iter().any(|x| x == b) {
                bins.push(b.to_string());
            }
        }
    }
    let notes = path_fidelity(&reached, host, guest_path, &toolchains, &mut bins, &argv[0]);
    let path = (!bins.is_empty()).then(|| format!("{}:{guest_path}", bins.join(":")));
    if let Some(p) = &path {
        for t in &mut toolchains {
            if let Some(v) = t.variables.get_mut("PATH") {
                v.clone_from(p);
            }
        }
    }
    Reach { toolchains, hint: first.hint, notes, path }
}

/// Each toolchain directory under the host's HOME (`host_home`, as given or canonical) is shown once more at the
/// same place under the guest's HOME: a script saying `$HOME/.cargo/bin/cargo`, `~/.pyenv/versions/3.12/bin/python`
/// or `$HOME/.local/bin/tool` expands HOME to the guest's, and natively it found the host's. A directory in the
/// working directory (the guest's own overlay) is not mirrored; nor is anything when both HOMEs are the same.
/// Recorded in each toolchain's `home_paths` (guest path to host path): the guest's paths do not depend on the
/// host's HOME, so a pack replays the same where it differs.
pub fn mirror_home(toolchains: &mut [Toolchain], host_home: Option<&str>, guest_home: &str, cwd: &Path) {
    let Some(home) = host_home.filter(|h| h.starts_with('/')).map(|h| crate::parse::normalize(Path::new(h))) else {
        return;
    };
    let mut homes = vec![home.clone()];
    homes.extend(std::fs::canonicalize(&home).ok().filter(|c| *c != home));
    let guest_home = Path::new(guest_home);
    for t in toolchains {
        for p in &t.paths {
            let p = Path::new(p);
            let Some(rel) = homes.iter().find_map(|h| p.strip_prefix(h).ok()) else { continue };
            let guest = guest_home.join(rel);
            if rel.as_os_str().is_empty() || p.starts_with(cwd) || guest == p || !guest_home.is_absolute() {
                continue;
            }
            t.home_paths.insert(guest.display().to_string(), p.display().to_string());
        }
    }
}

/// For each name the guest looks up on its own PATH: the host's program, unless the guest's PATH finds the same
/// file. A directory the guest sees (or a shown toolchain's) is put on the guest's PATH, before the others; any
/// other difference is a note.
fn path_fidelity(
    reached: &[Reached],
    host: &Host,
    guest_path: &str,
    toolchains: &[Toolchain],
    bins: &mut Vec<String>,
    argv0: &str,
) -> Vec<String> {
    let Some(host_path) = host.var_opt("PATH") else { return Vec::new() };
    let shown =
        |d: &Path| guest_sees(d, host.cwd) || toolchains.iter().any(|t| t.paths.iter().any(|p| d.starts_with(p)));
    let same = |a: &Path, b: &Path| std::fs::canonicalize(a).ok() == std::fs::canonicalize(b).ok();
    let mut notes = Vec::new();
    let names: BTreeSet<&str> =
        reached.iter().filter(|r| r.path.is_none() && !r.program.contains('/')).map(|r| r.program.as_str()).collect();
    for name in names {
        let Some(on_host) = which(name, &host_path) else { continue };
        let guest_dirs =
            |bins: &[String]| format!("{}{}{guest_path}", bins.join(":"), if bins.is_empty() { "" } else { ":" });
        let in_guest = which(name, &guest_dirs(bins)).filter(|p| shown(p.parent().unwrap_or(Path::new("/"))));
        let resolved = |g: &Path| same(g, &on_host) || toolchains.iter().any(|t| Path::new(&t.command) == g);
        if in_guest.as_deref().is_some_and(resolved) {
            continue;
        }
        let dir = on_host.parent().unwrap_or(Path::new("/"));
        let real_dir = std::fs::canonicalize(&on_host).ok();
        let reachable = shown(dir) && real_dir.as_deref().is_none_or(|r| shown(r.parent().unwrap_or(Path::new("/"))));
        if reachable {
            bins.insert(0, dir.display().to_string());
            continue;
        }
        match in_guest {
            Some(g) => notes.push(format!(
                "PATH: `{name}` is {} on the host's PATH but the guest runs {} (the host's is in a directory it \
                 does not see: --bind {} shows it)",
                on_host.display(),
                g.display(),
                dir.display()
            )),
            None if name != argv0 => notes.push(format!(
                "PATH: `{name}` is {} on the host's PATH; the guest does not find it (--bind {} shows it)",
                on_host.display(),
                dir.display()
            )),
            None => {}
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn programs(argv: &[&str], cwd: &Path) -> Vec<(String, Option<String>)> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let lookup = |k: &str| (k == "HOME").then(|| "/h".to_string());
        reached(&argv, &Host { var: &lookup, cwd }).into_iter().map(|r| (r.program, r.path)).collect()
    }

    fn has(v: &[(String, Option<String>)], p: &str, path: Option<&str>) -> bool {
        v.iter().any(|(n, q)| n == p && q.as_deref() == path)
    }

    #[test]
    fn env_forms_assignments_and_wrappers_reach_the_program() {
        let w = Path::new("/nonexistent-w");
        let v = programs(&["env", "-u", "X", "A=1", "PATH=/h/.cargo/bin:/usr/bin", "cargo", "test"], w);
        assert!(has(&v, "cargo", Some("/h/.cargo/bin:/usr/bin")), "{v:?}");
        assert!(!has(&v, "X", None) && !has(&v, "test", None), "{v:?}");
        let v = programs(&["PATH=/opt/b", "CC=gcc", "nice", "-n", "5", "timeout", "-s", "KILL", "10", "node", "x"], w);
        assert!(has(&v, "node", Some("/opt/b")), "{v:?}");
        assert!(!has(&v, "10", Some("/opt/b")) && !has(&v, "5", Some("/opt/b")), "{v:?}");
    }

    #[test]
    fn toolchains_under_the_hosts_home_are_shown_under_the_guests_too() {
        let t = |paths: &[&str]| Toolchain {
            name: "rustup".into(),
            command: "/root/.cargo/bin/cargo".into(),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            variables: Default::default(),
            reason: String::new(),
            home_paths: Default::default(),
        };
        let mut ts = vec![t(&["/root/.cargo", "/root/.rustup"]), t(&["/usr/local/go", "/root/proj/venv"])];
        mirror_home(&mut ts, Some("/root/"), "/home/repro", Path::new("/root/proj"));
        let m: Vec<_> = ts[0].home_paths.iter().map(|(g, h)| (g.as_str(), h.as_str())).collect();
        assert_eq!(m, [("/home/repro/.cargo", "/root/.cargo"), ("/home/repro/.rustup", "/root/.rustup")]);
        assert!(ts[1].home_paths.is_empty(), "outside HOME, or in the working directory: {:?}", ts[1].home_paths);
        // The same HOME on both sides, a relative or no HOME: nothing to add.
        for (host, guest) in [(Some("/home/repro"), "/home/repro"), (Some("rel"), "/home/repro"), (None, "/h")] {
            let mut ts = vec![t(&["/home/repro/.cargo"])];
            mirror_home(&mut ts, host, guest, Path::new("/w"));
            assert!(ts[0].home_paths.is_empty(), "{host:?} {guest}");
        }
        // A toolchain at HOME itself is never one (showable refuses it); it is not mirrored either.
        let mut ts = vec![t(&["/root"])];
        mirror_home(&mut ts, Some("/root"), "/home/repro", Path::new("/w"));
        assert!(ts[0].home_paths.is_empty());
    }

    #[test]
    fn scripts_makefiles_and_shebangs_are_read_for_names() {
        let t = tempfile::tempdir().unwrap();
        let w = t.path();
        std::fs::write(
            w.join("ci.sh"),
            "#!/bin/sh\n# python2 is gone\nset -e\nexport PATH=\"$HOME/.x/bin:$PATH\"\npytest -q && ./tools/lint.sh\n",
        )
        .unwrap();
        std::fs::write(w.join("Makefile"), "CARGO ?= cargo\ntest:\n\t@$(CARGO) test\n\tnpm run build\n").unwrap();
        std::fs::create_dir(w.join("tools")).unwrap();
        std::fs::write(w.join("tools/lint.sh"), "#!/usr/bin/env bash\nruff check .\n").unwrap();
        let v = programs(&["sh", "ci.sh"], w);
        assert!(has(&v, "pytest", Some("/h/.x/bin:")), "{v:?}");
        assert!(has(&v, "ruff", Some("/h/.x/bin:")), "the script the script runs: {v:?}");
        assert!(has(&v, "bash", Some("/h/.x/bin:")), "its #! interpreter: {v:?}");
        assert!(!v.iter().any(|(n, _)| n == "python2"), "comments are not read: {v:?}");
        let v = programs(&["make", "test"], w);
        assert!(has(&v, "cargo", None) && has(&v, "npm", None), "{v:?}");
        let v = programs(&["/bin/sh", "-c", "true"], w);
        let interp = v.iter().find(|(n, _)| n.contains("/ld-")).map(|(n, _)| n.clone());
        assert!(interp.as_deref().is_some_and(|i| Path::new(i).exists()), "the ELF interpreter of /bin/sh: {v:?}");
        let v = programs(&["bash", "-c", "cd sub; uv run pytest"], w);
        assert!(has(&v, "uv", None) && has(&v, "pytest", None), "{v:?}");
    }
}
