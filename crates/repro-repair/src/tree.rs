//! Snapshots of a working tree (relative path -> blake3, size, mode; symlinks as links, never followed), the
//! change between two snapshots, and the unified diff of the changed text files.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use repro_model::repair::DiffStats;
use similar::{ChangeTag, TextDiff};

use crate::{RepairError, Result};

/// Directory names a snapshot never descends into (at any depth).
pub const DEFAULT_SKIP_DIRS: &[&str] = &[".git", "target", "node_modules", "__pycache__"];

/// Bounds of a snapshot.
#[derive(Debug, Clone)]
pub struct SnapshotLimits {
    /// Entries recorded or descended into (files, links, directories, others).
    pub max_files: u64,
    /// Bytes of regular files, in total.
    pub max_bytes: u64,
    /// Directory names not descended into (`.git` is skipped as a file too: a worktree's link).
    pub skip_dirs: Vec<String>,
}

impl Default for SnapshotLimits {
    fn default() -> Self {
        SnapshotLimits {
            max_files: 100_000,
            max_bytes: 2 << 30,
            skip_dirs: DEFAULT_SKIP_DIRS.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// What a path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file: its content's blake3.
    File { blake3: blake3::Hash },
    /// A symbolic link: its target, as written (never followed).
    Symlink { target: PathBuf },
    /// A directory (recorded so that an empty one added or removed is seen).
    Dir,
    /// A FIFO, socket or device: recorded, not read.
    Other,
}

/// One path of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: EntryKind,
    /// Bytes hashed for a file; 0 for the rest.
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
}

/// A tree's content, by path relative to its root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub entries: BTreeMap<PathBuf, Entry>,
    pub total_bytes: u64,
}

/// Opens a regular file below a snapshot's root without following a link and without blocking on a FIFO that
/// replaced it since the walk saw it.
fn open_file(path: &Path) -> Result<File> {
    let io = |e| RepairError::Io { path: path.to_path_buf(), source: e };
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(io)?;
    let md = f.metadata().map_err(io)?;
    if !md.is_file() {
        return Err(io(std::io::Error::other("no longer a regular file")));
    }
    Ok(f)
}

/// Reads at most `limit` bytes of `f`; `Err(read)` when the file holds more.
fn read_bounded(f: File, path: &Path, limit: u64) -> Result<std::result::Result<Vec<u8>, u64>> {
    let mut buf = Vec::new();
    let n = f
        .take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| RepairError::Io { path: path.to_path_buf(), source: e })?;
    if n as u64 > limit {
        return Ok(Err(n as u64));
    }
    Ok(Ok(buf))
}

/// Snapshots the tree at `root`: every file, link, directory and special file below it (its own entry is not
/// recorded), skipping [`SnapshotLimits::skip_dirs`]. Symlinks are recorded, never followed; `root` itself must
/// be a directory (a link to one is refused).
pub fn snapshot(root: &Path, limits: &SnapshotLimits) -> Result<Snapshot> {
    let io = |p: &Path, e| RepairError::Io { path: p.to_path_buf(), source: e };
    let md = std::fs::symlink_metadata(root).map_err(|e| io(root, e))?;
    if !md.is_dir() {
        return Err(io(root, std::io::Error::other("not a directory (a snapshot's root is never followed)")));
    }
    let mut snap = Snapshot::default();
    let mut count: u64 = 0;
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let mut names = Vec::new();
        for e in std::fs::read_dir(&dir).map_err(|e| io(&dir, e))? {
            let e = e.map_err(|e| io(&dir, e))?;
            names.push(e.file_name());
        }
        names.sort();
        for name in names {
            let rel_path = rel.join(&name);
            let full = root.join(&rel_path);
            let md = std::fs::symlink_metadata(&full).map_err(|e| io(&full, e))?;
            let ft = md.file_type();
            let skipped = name == ".git" || (ft.is_dir() && limits.skip_dirs.iter().any(|s| name == s.as_str()));
            if skipped {
                continue;
            }
            count += 1;
            if count > limits.max_files {
                return Err(RepairError::TooManyFiles {
                    root: root.to_path_buf(),
                    limit: limits.max_files,
                    path: rel_path,
                });
            }
            let mode = md.mode() & 0o7777;
            let entry = if ft.is_symlink() {
                let target = std::fs::read_link(&full).map_err(|e| io(&full, e))?;
                Entry { kind: EntryKind::Symlink { target }, size: 0, mode }
            } else if ft.is_dir() {
                stack.push(rel_path.clone());
                Entry { kind: EntryKind::Dir, size: 0, mode }
            } else if ft.is_file() {
                let left = limits.max_bytes.saturating_sub(snap.total_bytes);
                let f = open_file(&full)?;
                let mut hasher = blake3::Hasher::new();
                let n = std::io::copy(&mut f.take(left.saturating_add(1)), &mut hasher).map_err(|e| io(&full, e))?;
                if n > left {
                    return Err(RepairError::TooManyBytes {
                        root: root.to_path_buf(),
                        limit: limits.max_bytes,
                        path: rel_path,
                    });
                }
                snap.total_bytes += n;
                Entry { kind: EntryKind::File { blake3: hasher.finalize() }, size: n, mode }
            } else {
                Entry { kind: EntryKind::Other, size: 0, mode }
            };
            snap.entries.insert(rel_path, entry);
        }
    }
    Ok(snap)
}

/// Paths added, removed and modified (content, link target, kind or mode) from one snapshot to another, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeChange {
    pub added: Vec<PathBuf>,
    pub removed: Vec<PathBuf>,
    pub modified: Vec<PathBuf>,
}

impl TreeChange {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.modified.is_empty()
    }

    /// Every changed path with what happened to it, sorted by path.
    pub fn all(&self) -> Vec<(&Path, ChangeKind)> {
        let mut v: Vec<(&Path, ChangeKind)> = self
            .added
            .iter()
            .map(|p| (p.as_path(), ChangeKind::Added))
            .chain(self.removed.iter().map(|p| (p.as_path(), ChangeKind::Removed)))
            .chain(self.modified.iter().map(|p| (p.as_path(), ChangeKind::Modified)))
            .collect();
        v.sort();
        v
    }
}

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChangeKind {
    Added,
    Removed,
    Modified,
}

impl std::fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ChangeKind::Added => "added",
            ChangeKind::Removed => "removed",
            ChangeKind::Modified => "modified",
        })
    }
}

/// The symbolic links among `paths` of `snap` whose target leads out of the tree (absolute, or climbing above
/// its root with `..`), with their targets: a replay laying such a link over the pack would lay the host file it
/// points to (`--with` resolves it), so a change holding one is refused.
pub fn links_out_of_tree<'a>(snap: &'a Snapshot, paths: &[PathBuf]) -> Vec<(&'a Path, &'a Path)> {
    use std::path::Component;
    let mut out = Vec::new();
    for p in paths {
        let Some((path, Entry { kind: EntryKind::Symlink { target }, .. })) = snap.entries.get_key_value(p) else {
            continue;
        };
        // Depth below the root of the directory holding the link, then the target's components from there.
        let mut depth = path.components().count() as i64 - 1;
        let mut out_of_tree = false;
        for c in target.components() {
            match c {
                Component::RootDir | Component::Prefix(_) => out_of_tree = true,
                Component::ParentDir => depth -= 1,
                Component::Normal(_) => depth += 1,
                Component::CurDir => {}
            }
            if depth < 0 {
                out_of_tree = true;
            }
        }
        if out_of_tree {
            out.push((path.as_path(), target.as_path()));
        }
    }
    out
}

/// The change from `base` to `cand`. A directory counts only when it is added or removed (its content's changes
/// are its entries'), or when its mode changes.
pub fn changes(base: &Snapshot, cand: &Snapshot) -> TreeChange {
    let mut c = TreeChange::default();
    for (p, e) in &base.entries {
        match cand.entries.get(p) {
            None => c.removed.push(p.clone()),
            Some(n) if n != e => c.modified.push(p.clone()),
            Some(_) => {}
        }
    }
    for p in cand.entries.keys() {
        if !base.entries.contains_key(p) {
            c.added.push(p.clone());
        }
    }
    c
}

/// Bounds of a diff.
#[derive(Debug, Clone)]
pub struct DiffLimits {
    /// A text file larger than this (on either side) is noted, not diffed.
    pub max_file_bytes: u64,
    /// Context lines around a hunk.
    pub context: usize,
    /// Time the diff algorithm may take per file before it settles for a coarser diff.
    pub timeout: Duration,
}

impl Default for DiffLimits {
    fn default() -> Self {
        DiffLimits { max_file_bytes: 8 << 20, context: 3, timeout: Duration::from_secs(2) }
    }
}

/// One line of a hunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineTag {
    Context,
    Added,
    Removed,
}

/// A line of a hunk with its numbers (1-based) in the old and new file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffLine {
    pub tag: LineTag,
    pub old_line: Option<u64>,
    pub new_line: Option<u64>,
    /// Without its line ending.
    pub text: String,
    /// The last line of a file that does not end with a newline.
    pub missing_newline: bool,
}

/// A file's diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileDiffKind {
    /// A text file (on both sides where it exists): hunks of lines.
    Text { hunks: Vec<Vec<DiffLine>> },
    /// Not UTF-8 text, or holding a NUL byte: noted, not diffed.
    Binary,
    /// Text larger than [`DiffLimits::max_file_bytes`]: noted, not diffed.
    TooLarge { bytes: u64 },
    /// A link, a directory or a special file on either side: what it was and is.
    NotAFile { old: Option<String>, new: Option<String> },
}

/// The diff of one changed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDiff {
    pub path: PathBuf,
    pub change: ChangeKind,
    pub old_mode: Option<u32>,
    pub new_mode: Option<u32>,
    pub kind: FileDiffKind,
    pub lines_added: u64,
    pub lines_removed: u64,
}

impl FileDiff {
    /// Added lines with their line number in the new file, in order.
    pub fn added_lines(&self) -> impl Iterator<Item = &DiffLine> {
        let hunks: &[Vec<DiffLine>] = match &self.kind {
            FileDiffKind::Text { hunks } => hunks,
            _ => &[],
        };
        hunks.iter().flatten().filter(|l| l.tag == LineTag::Added)
    }
}

/// The change between two trees, with each changed path's diff and the unified text of all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeDiff {
    pub change: TreeChange,
    pub files: Vec<FileDiff>,
    /// A unified diff (`--- a/path`, `+++ b/path`, hunks) of the text files, with binary and undiffed files noted.
    pub unified: String,
    pub lines_added: u64,
    pub lines_removed: u64,
}

impl TreeDiff {
    /// Lines added plus removed.
    pub fn size(&self) -> u64 {
        self.lines_added.saturating_add(self.lines_removed)
    }

    pub fn stats(&self) -> DiffStats {
        let name = |f: &FileDiff| f.path.to_string_lossy().into_owned();
        DiffStats {
            files_added: self.change.added.len() as u64,
            files_removed: self.change.removed.len() as u64,
            files_modified: self.change.modified.len() as u64,
            lines_added: self.lines_added,
            lines_removed: self.lines_removed,
            binary_files: self.files.iter().filter(|f| f.kind == FileDiffKind::Binary).map(name).collect(),
            undiffed_files: self
                .files
                .iter()
                .filter(|f| matches!(f.kind, FileDiffKind::TooLarge { .. }))
                .map(name)
                .collect(),
        }
    }
}

/// A file's content as the diff sees it.
enum Content {
    Absent,
    Text(String),
    Binary,
    TooLarge(u64),
    NotAFile(String),
}

fn describe(e: &Entry) -> String {
    match &e.kind {
        EntryKind::File { .. } => "file".into(),
        EntryKind::Symlink { target } => format!("symlink -> {}", target.to_string_lossy()),
        EntryKind::Dir => "directory".into(),
        EntryKind::Other => "special file".into(),
    }
}

/// Reads a file of a snapshot for the diff, checking it still has the snapshot's hash.
fn content(root: &Path, rel: &Path, entry: Option<&Entry>, limits: &DiffLimits) -> Result<Content> {
    let Some(e) = entry else { return Ok(Content::Absent) };
    let EntryKind::File { blake3: want } = &e.kind else { return Ok(Content::NotAFile(describe(e))) };
    if e.size > limits.max_file_bytes {
        return Ok(Content::TooLarge(e.size));
    }
    let full = root.join(rel);
    let bytes = match read_bounded(open_file(&full)?, &full, limits.max_file_bytes)? {
        Ok(b) => b,
        Err(_) => return Err(RepairError::ChangedSinceSnapshot { path: full }),
    };
    if blake3::hash(&bytes) != *want {
        return Err(RepairError::ChangedSinceSnapshot { path: full });
    }
    if bytes.contains(&0) {
        return Ok(Content::Binary);
    }
    match String::from_utf8(bytes) {
        Ok(s) => Ok(Content::Text(s)),
        Err(_) => Ok(Content::Binary),
    }
}

/// The diff from the tree at `base_root` (snapshot `base`) to the one at `cand_root` (snapshot `cand`). Each
/// file read must still have its snapshot's hash ([`RepairError::ChangedSinceSnapshot`] otherwise).
pub fn diff(
    base_root: &Path,
    base: &Snapshot,
    cand_root: &Path,
    cand: &Snapshot,
    limits: &DiffLimits,
) -> Result<TreeDiff> {
    let change = changes(base, cand);
    let mut out = TreeDiff { change: change.clone(), ..TreeDiff::default() };
    for (path, kind) in change.all() {
        let (old_e, new_e) = (base.entries.get(path), cand.entries.get(path));
        let old = content(base_root, path, old_e, limits)?;
        let new = content(cand_root, path, new_e, limits)?;
        let mut fd = FileDiff {
            path: path.to_path_buf(),
            change: kind,
            old_mode: old_e.map(|e| e.mode),
            new_mode: new_e.map(|e| e.mode),
            kind: FileDiffKind::Binary,
            lines_added: 0,
            lines_removed: 0,
        };
        let shown = path.to_string_lossy();
        let (a, b) = (
            if old_e.is_some() { format!("a/{shown}") } else { "/dev/null".into() },
            if new_e.is_some() { format!("b/{shown}") } else { "/dev/null".into() },
        );
        // This path's section of the unified text. Git tracks no directory nor special file: those are in
        // `files` only. A link is written as git writes one (its target as a blob without newline, mode 120000).
        let mut sec = String::new();
        let only_links = [old_e, new_e].iter().flatten().all(|e| matches!(e.kind, EntryKind::Symlink { .. }));
        let git_tracked = [old_e, new_e].iter().flatten().all(|e| !matches!(e.kind, EntryKind::Dir | EntryKind::Other));
        let _ = writeln!(sec, "diff --git a/{shown} b/{shown}");
        match (old_e, new_e) {
            (Some(o), Some(n)) if git_mode(o) != git_mode(n) => {
                let _ = writeln!(sec, "old mode {:06o}\nnew mode {:06o}", git_mode(o), git_mode(n));
            }
            (None, Some(n)) => {
                let _ = writeln!(sec, "new file mode {:06o}", git_mode(n));
            }
            (Some(o), None) => {
                let _ = writeln!(sec, "deleted file mode {:06o}", git_mode(o));
            }
            _ => {}
        }
        match (old, new) {
            (o @ (Content::Absent | Content::Text(_)), n @ (Content::Absent | Content::Text(_))) => {
                let o = if let Content::Text(s) = o { s } else { String::new() };
                let n = if let Content::Text(s) = n { s } else { String::new() };
                let hunks = text_hunks(&o, &n, limits);
                if !hunks.is_empty() {
                    let _ = writeln!(sec, "--- {a}\n+++ {b}");
                }
                for h in &hunks {
                    write_hunk(&mut sec, h);
                    for l in h {
                        match l.tag {
                            LineTag::Added => fd.lines_added += 1,
                            LineTag::Removed => fd.lines_removed += 1,
                            LineTag::Context => {}
                        }
                    }
                }
                fd.kind = FileDiffKind::Text { hunks };
            }
            (o, n) if only_links => {
                let target = |e: Option<&Entry>| match e.map(|e| &e.kind) {
                    Some(EntryKind::Symlink { target }) => target.to_string_lossy().into_owned(),
                    _ => String::new(),
                };
                let hunks = text_hunks(&target(old_e), &target(new_e), limits);
                if !hunks.is_empty() {
                    let _ = writeln!(sec, "--- {a}\n+++ {b}");
                }
                for h in &hunks {
                    write_hunk(&mut sec, h);
                }
                fd.kind = FileDiffKind::NotAFile { old: not_a_file_side(o, old_e), new: not_a_file_side(n, new_e) };
            }
            (Content::NotAFile(o), n) => {
                fd.kind = FileDiffKind::NotAFile { old: Some(o), new: not_a_file_side(n, new_e) };
                note_not_a_file(&mut sec, &fd.kind);
            }
            (o, Content::NotAFile(n)) => {
                fd.kind = FileDiffKind::NotAFile { old: not_a_file_side(o, old_e), new: Some(n) };
                note_not_a_file(&mut sec, &fd.kind);
            }
            (Content::TooLarge(x), _) | (_, Content::TooLarge(x)) => {
                fd.kind = FileDiffKind::TooLarge { bytes: x };
                let _ =
                    writeln!(sec, "Text file {shown} not diffed: {x} bytes (larger than {})", limits.max_file_bytes);
            }
            (Content::Binary, _) | (_, Content::Binary) => {
                fd.kind = FileDiffKind::Binary;
                let _ = writeln!(sec, "Binary files {a} and {b} differ");
            }
        }
        if git_tracked {
            out.unified.push_str(&sec);
        }
        out.lines_added += fd.lines_added;
        out.lines_removed += fd.lines_removed;
        out.files.push(fd);
    }
    Ok(out)
}

/// The mode git writes for an entry: 100644 or 100755 for a file (by the owner's execute bit), 120000 for a link,
/// 040000 for a directory; a special file's own bits.
fn git_mode(e: &Entry) -> u32 {
    match e.kind {
        EntryKind::File { .. } if e.mode & 0o100 != 0 => 0o100755,
        EntryKind::File { .. } => 0o100644,
        EntryKind::Symlink { .. } => 0o120000,
        EntryKind::Dir => 0o040000 | (e.mode & 0o7777),
        EntryKind::Other => e.mode,
    }
}

fn not_a_file_side(c: Content, e: Option<&Entry>) -> Option<String> {
    match c {
        Content::Absent => None,
        Content::NotAFile(s) => Some(s),
        _ => e.map(describe),
    }
}

fn note_not_a_file(out: &mut String, k: &FileDiffKind) {
    if let FileDiffKind::NotAFile { old, new } = k {
        let _ = writeln!(
            out,
            "Changed: {} -> {}",
            old.as_deref().unwrap_or("(absent)"),
            new.as_deref().unwrap_or("(absent)")
        );
    }
}

/// The hunks of a line diff of two texts.
pub fn text_hunks(old: &str, new: &str, limits: &DiffLimits) -> Vec<Vec<DiffLine>> {
    let diff = TextDiff::configure().timeout(limits.timeout).diff_lines(old, new);
    let mut hunks = Vec::new();
    for group in diff.grouped_ops(limits.context) {
        let mut lines = Vec::new();
        for op in &group {
            for ch in diff.iter_changes(op) {
                let tag = match ch.tag() {
                    ChangeTag::Equal => LineTag::Context,
                    ChangeTag::Insert => LineTag::Added,
                    ChangeTag::Delete => LineTag::Removed,
                };
                let text = ch.value();
                let missing_newline = !text.ends_with('\n');
                let text = text.strip_suffix('\n').unwrap_or(text);
                let text = text.strip_suffix('\r').unwrap_or(text);
                lines.push(DiffLine {
                    tag,
                    old_line: ch.old_index().map(|i| i as u64 + 1),
                    new_line: ch.new_index().map(|i| i as u64 + 1),
                    text: text.to_string(),
                    missing_newline,
                });
            }
        }
        if !lines.is_empty() {
            hunks.push(lines);
        }
    }
    hunks
}

fn write_hunk(out: &mut String, h: &[DiffLine]) {
    let old: Vec<u64> = h.iter().filter(|l| l.tag != LineTag::Added).filter_map(|l| l.old_line).collect();
    let new: Vec<u64> = h.iter().filter(|l| l.tag != LineTag::Removed).filter_map(|l| l.new_line).collect();
    // An empty side starts at the line before the hunk (0 for an added or emptied file), as diff -u writes it.
    let start = |v: &[u64], before: Option<u64>| v.first().copied().unwrap_or(before.unwrap_or(0));
    let old_before = h.iter().find_map(|l| l.old_line).map(|n| n.saturating_sub(1));
    let new_before = h.iter().find_map(|l| l.new_line).map(|n| n.saturating_sub(1));
    let _ =
        writeln!(out, "@@ -{},{} +{},{} @@", start(&old, old_before), old.len(), start(&new, new_before), new.len());
    for l in h {
        let c = match l.tag {
            LineTag::Context => ' ',
            LineTag::Added => '+',
            LineTag::Removed => '-',
        };
        let _ = writeln!(out, "{c}{}", l.text);
        if l.missing_newline {
            let _ = writeln!(out, "\\ No newline at end of file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn snapshot_records_files_links_and_skips() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        write(r, "src/a.py", "x = 1\n");
        write(r, ".git/HEAD", "ref\n");
        write(r, "target/debug/big", "zzz");
        write(r, "web/node_modules/m/index.js", "x");
        write(r, "pkg/__pycache__/a.pyc", "x");
        symlink("/etc/passwd", r.join("link")).unwrap();
        std::fs::set_permissions(r.join("src/a.py"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let s = snapshot(r, &SnapshotLimits::default()).unwrap();
        let keys: Vec<String> = s.entries.keys().map(|k| k.to_string_lossy().into_owned()).collect();
        assert_eq!(keys, ["link", "pkg", "src", "src/a.py", "web"]);
        let a = &s.entries[Path::new("src/a.py")];
        assert_eq!((a.size, a.mode), (6, 0o755));
        assert_eq!(a.kind, EntryKind::File { blake3: blake3::hash(b"x = 1\n") });
        assert_eq!(s.entries[Path::new("link")].kind, EntryKind::Symlink { target: "/etc/passwd".into() });
        assert_eq!(s.total_bytes, 6);
    }

    #[test]
    fn links_out_of_the_tree_are_found() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        for (link, target) in [
            ("abs", "/etc/passwd"),
            ("up", "../x"),
            ("a/b/deep-up", "../../../x"),
            ("a/b/inside", "../../abs"),
            ("a/sneaky", "b/../../.."),
            ("here", "a/b"),
        ] {
            std::os::unix::fs::symlink(target, t.path().join(link)).unwrap();
        }
        let snap = snapshot(t.path(), &SnapshotLimits::default()).unwrap();
        let paths: Vec<PathBuf> = snap.entries.keys().cloned().collect();
        let mut got: Vec<String> =
            links_out_of_tree(&snap, &paths).iter().map(|(p, _)| p.display().to_string()).collect();
        got.sort();
        assert_eq!(got, ["a/b/deep-up", "a/sneaky", "abs", "up"]);
    }

    #[test]
    fn limits_are_clear_errors() {
        let t = tempfile::tempdir().unwrap();
        for i in 0..5 {
            write(t.path(), &format!("f{i}"), "0123456789");
        }
        let lim = SnapshotLimits { max_files: 3, ..SnapshotLimits::default() };
        let e = snapshot(t.path(), &lim).unwrap_err();
        assert!(matches!(e, RepairError::TooManyFiles { limit: 3, .. }), "{e}");
        assert!(e.to_string().contains("more than 3 entries"), "{e}");
        let lim = SnapshotLimits { max_bytes: 25, ..SnapshotLimits::default() };
        let e = snapshot(t.path(), &lim).unwrap_err();
        assert!(e.to_string().contains("more than 25 bytes") && e.to_string().contains("f2"), "{e}");
        let e = snapshot(&t.path().join("f0"), &SnapshotLimits::default()).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
    }

    #[test]
    fn a_symlinked_root_is_refused() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("real")).unwrap();
        symlink(t.path().join("real"), t.path().join("via")).unwrap();
        assert!(snapshot(&t.path().join("via"), &SnapshotLimits::default()).is_err());
    }

    #[test]
    fn change_and_unified_diff() {
        let (b, c) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for r in [b.path(), c.path()] {
            write(r, "src/lib.py", "def f():\n    return 1\n\n\ndef g():\n    return 2\n");
            write(r, "same.txt", "same\n");
        }
        write(b.path(), "gone.txt", "bye\n");
        write(c.path(), "src/lib.py", "def f():\n    return 10\n\n\ndef g():\n    return 2\n");
        write(c.path(), "new.txt", "hello\nworld");
        std::fs::write(c.path().join("blob.bin"), b"\x00\x01\x02").unwrap();
        std::fs::set_permissions(c.path().join("same.txt"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let (sb, sc) = (
            snapshot(b.path(), &SnapshotLimits::default()).unwrap(),
            snapshot(c.path(), &SnapshotLimits::default()).unwrap(),
        );
        let ch = changes(&sb, &sc);
        assert_eq!(ch.added, [PathBuf::from("blob.bin"), PathBuf::from("new.txt")]);
        assert_eq!(ch.removed, [PathBuf::from("gone.txt")]);
        assert_eq!(ch.modified, [PathBuf::from("same.txt"), PathBuf::from("src/lib.py")]);
        let d = diff(b.path(), &sb, c.path(), &sc, &DiffLimits::default()).unwrap();
        assert_eq!((d.lines_added, d.lines_removed), (3, 2), "{}", d.unified);
        assert!(
            d.unified.contains(
                "--- a/src/lib.py\n+++ b/src/lib.py\n@@ -1,5 +1,5 @@\n def f():\n-    return 1\n+    return 10\n"
            ),
            "{}",
            d.unified
        );
        assert!(
            d.unified.contains("new file mode 100644\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n\\ No newline at end of file\n"),
            "{}",
            d.unified
        );
        assert!(d.unified.contains("--- a/gone.txt\n+++ /dev/null\n@@ -1,1 +0,0 @@\n-bye\n"), "{}", d.unified);
        assert!(d.unified.contains("Binary files /dev/null and b/blob.bin differ"), "{}", d.unified);
        assert!(
            d.unified.contains("diff --git a/same.txt b/same.txt\nold mode 100644\nnew mode 100755"),
            "{}",
            d.unified
        );
        let lib = d.files.iter().find(|f| f.path == Path::new("src/lib.py")).unwrap();
        let added: Vec<(u64, &str)> = lib.added_lines().map(|l| (l.new_line.unwrap(), l.text.as_str())).collect();
        assert_eq!(added, [(2, "    return 10")]);
        let st = d.stats();
        assert_eq!((st.files_added, st.files_removed, st.files_modified), (2, 1, 2));
        assert_eq!(st.binary_files, ["blob.bin"]);
    }

    /// The unified text is close enough to git's that `git apply` turns the baseline into the candidate (text
    /// files, additions, removals, a last line without newline, an execute bit).
    #[test]
    fn the_unified_diff_applies_with_git() {
        if std::process::Command::new("git").arg("--version").output().is_err() {
            return; // no git here: nothing to check against
        }
        let (b, c) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let body: String = (1..=40).map(|i| format!("line {i}\n")).collect();
        for r in [b.path(), c.path()] {
            write(r, "src/a.txt", &body);
            write(r, "run.sh", "echo hi\n");
        }
        write(b.path(), "old.txt", "bye\n");
        write(
            c.path(),
            "src/a.txt",
            &body.replace("line 3\n", "line three\n").replace("line 30\n", "").replace("line 40\n", "line 40"),
        );
        write(c.path(), "src/new/b.txt", "one\ntwo\n");
        std::fs::set_permissions(c.path().join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        symlink("src/a.txt", b.path().join("link")).unwrap();
        symlink("run.sh", c.path().join("link")).unwrap();
        symlink("gone", b.path().join("old-link")).unwrap();
        symlink("src/new", c.path().join("new-link")).unwrap();
        let l = SnapshotLimits::default();
        let (sb, sc) = (snapshot(b.path(), &l).unwrap(), snapshot(c.path(), &l).unwrap());
        let d = diff(b.path(), &sb, c.path(), &sc, &DiffLimits::default()).unwrap();
        let patch = b.path().join("..").join(format!("{}.patch", std::process::id()));
        std::fs::write(&patch, &d.unified).unwrap();
        let out = std::process::Command::new("git").arg("apply").arg(&patch).current_dir(b.path()).output().unwrap();
        let _ = std::fs::remove_file(&patch);
        assert!(out.status.success(), "git apply: {}\n{}", String::from_utf8_lossy(&out.stderr), d.unified);
        let after = snapshot(b.path(), &l).unwrap();
        assert_eq!(changes(&after, &sc), TreeChange::default(), "{}", d.unified);
    }

    #[test]
    fn a_file_changed_after_its_snapshot_is_an_error() {
        let (b, c) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        write(b.path(), "a.txt", "one\n");
        write(c.path(), "a.txt", "two\n");
        let (sb, sc) = (
            snapshot(b.path(), &SnapshotLimits::default()).unwrap(),
            snapshot(c.path(), &SnapshotLimits::default()).unwrap(),
        );
        write(c.path(), "a.txt", "three\n");
        let e = diff(b.path(), &sb, c.path(), &sc, &DiffLimits::default()).unwrap_err();
        assert!(matches!(e, RepairError::ChangedSinceSnapshot { .. }), "{e}");
    }

    #[test]
    fn links_and_large_files_are_noted() {
        let (b, c) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        symlink("x", b.path().join("l")).unwrap();
        symlink("y", c.path().join("l")).unwrap();
        write(b.path(), "big.txt", &"a\n".repeat(100));
        write(c.path(), "big.txt", &"b\n".repeat(100));
        let (sb, sc) = (
            snapshot(b.path(), &SnapshotLimits::default()).unwrap(),
            snapshot(c.path(), &SnapshotLimits::default()).unwrap(),
        );
        let d =
            diff(b.path(), &sb, c.path(), &sc, &DiffLimits { max_file_bytes: 50, ..DiffLimits::default() }).unwrap();
        assert_eq!(d.files.len(), 2);
        assert_eq!(d.files[0].kind, FileDiffKind::TooLarge { bytes: 200 });
        assert_eq!(
            d.files[1].kind,
            FileDiffKind::NotAFile { old: Some("symlink -> x".into()), new: Some("symlink -> y".into()) }
        );
        assert_eq!(d.stats().undiffed_files, ["big.txt"]);
        assert_eq!(d.size(), 0);
    }
}
