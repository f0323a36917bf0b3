//! Go modules: files of the module cache, `…/pkg/mod/<escaped module path>@<version>/…` (an uppercase letter
//! escaped as `!` and its lowercase). `…/pkg/mod/cache/` (downloads, not sources) is left loose. Go records the
//! hash of a module's tree (go.sum), none of its files: every file's check is not-recorded.

use repro_model::provenance::ComponentKind;

use super::{parts, purl, Label};

/// The module a normalised path is a file of.
pub(super) fn resolve(norm: &[u8]) -> Option<Label> {
    let segs: Vec<&str> = parts(norm).map(std::str::from_utf8).collect::<Result<_, _>>().ok()?;
    let at = (0..segs.len().saturating_sub(1)).find(|&i| segs[i] == "pkg" && segs[i + 1] == "mod")?;
    let first = at + 2;
    if segs.get(first) == Some(&"cache") {
        return None;
    }
    // The segment with the version ends the module path; a file must follow it.
    let last = (first..segs.len().saturating_sub(1)).find(|&i| segs[i].contains('@'))?;
    let (tail, version) = segs[last].split_once('@')?;
    let version = unescape(version)?;
    if !version.starts_with('v') || version.len() > 256 || version.contains('@') {
        return None;
    }
    let mut path: Vec<String> = Vec::new();
    for s in segs[first..last].iter().copied().chain([tail]) {
        path.push(unescape(s)?);
    }
    let name = path.pop()?;
    if path.iter().chain([&name]).any(|s| s.is_empty() || s == "..") {
        return None;
    }
    let namespace: Vec<&str> = path.iter().map(String::as_str).collect();
    let purl = purl::purl("golang", &namespace, &name, Some(&version), &[]);
    let module = if namespace.is_empty() { name } else { format!("{}/{name}", namespace.join("/")) };
    Some(Label {
        kind: ComponentKind::Golang,
        name: module,
        version: Some(version),
        purl: Some(purl),
        archive_sha256: None,
    })
}

/// A module cache path element unescaped: `!x` is `X`; any other `!` makes it invalid.
fn unescape(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '!' {
            let n = chars.next().filter(char::is_ascii_lowercase)?;
            out.push(n.to_ascii_uppercase());
        } else {
            out.push(c);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_paths() {
        let l = resolve(b"/root/go/pkg/mod/github.com/!burnt!sushi/toml@v1.2.0/decode.go").unwrap();
        assert_eq!(l.name, "github.com/BurntSushi/toml");
        assert_eq!(l.version.as_deref(), Some("v1.2.0"));
        assert_eq!(l.purl.as_deref(), Some("pkg:golang/github.com/BurntSushi/toml@v1.2.0"));
        let l = resolve(b"/g/pkg/mod/golang.org/x/sys@v0.1.0-rc.1/unix/a/b.go").unwrap();
        assert_eq!(l.name, "golang.org/x/sys");
        assert_eq!(l.purl.as_deref(), Some("pkg:golang/golang.org/x/sys@v0.1.0-rc.1"));
        assert!(resolve(b"/g/pkg/mod/cache/download/golang.org/x/sys/@v/v0.1.0.zip").is_none());
        assert!(resolve(b"/g/pkg/mod/github.com/x/y@v1.0.0").is_none());
        assert!(resolve(b"/g/pkg/mod/github.com/!X/y@v1.0.0/a.go").is_none());
        assert!(resolve(b"/g/pkg/mod/github.com/x/y@1.0.0/a.go").is_none());
        assert!(resolve(b"/g/pkg/mod/@v1.0.0/a.go").is_none());
        assert!(resolve(b"/g/pkg/other/x@v1/a.go").is_none());
        assert_eq!(resolve(b"/g/pkg/mod/std@v1.0.0/a.go").unwrap().purl.as_deref(), Some("pkg:golang/std@v1.0.0"));
    }
}
