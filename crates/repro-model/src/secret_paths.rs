//! Host paths that hold credentials: never shown to a guest as a toolchain, never accepted as a bind. A rule is
//! either absolute (`/etc/shadow`) or a path under any home directory (`.ssh` matches `/root/.ssh` and
//! `/home/u/.ssh`, wherever that sequence of components appears).

use std::path::{Component, Path};

/// The rules: the path (absolute, or components found anywhere) and what it holds.
pub const SECRET_PATHS: [(&str, &str); 15] = [
    (".ssh", "ssh keys"),
    (".gnupg", "gpg keys"),
    (".aws", "AWS credentials"),
    (".azure", "Azure credentials"),
    (".kube", "Kubernetes credentials"),
    (".config/gcloud", "Google Cloud credentials"),
    (".docker/config.json", "Docker credentials"),
    (".netrc", "netrc passwords"),
    (".git-credentials", "git credentials"),
    (".password-store", "a password store"),
    (".local/share/keyrings", "keyrings"),
    ("/etc/shadow", "the password hashes"),
    ("/etc/gshadow", "the group password hashes"),
    ("/etc/ssh", "the host's ssh keys"),
    ("/etc/sudoers.d", "sudo rules"),
];

/// A rule that `p` (absolute, normalized) is or lies inside: `(rule, what it holds)`.
pub fn secret_path(p: &Path) -> Option<(&'static str, &'static str)> {
    let comps: Vec<Component> = p.components().collect();
    SECRET_PATHS.iter().copied().find(|(rule, _)| {
        if rule.starts_with('/') {
            return p.starts_with(rule);
        }
        let want: Vec<Component> = Path::new(rule).components().collect();
        comps.windows(want.len()).any(|w| w == want.as_slice())
    })
}

/// A secret location that lies inside the directory `p` and exists there: the path and its rule. A directory
/// holding one (a home directory) cannot be shown whole.
pub fn holds_secret(p: &Path) -> Option<(std::path::PathBuf, &'static str)> {
    SECRET_PATHS.iter().find_map(|(rule, _)| {
        let inside = if rule.starts_with('/') {
            Path::new(rule).starts_with(p).then(|| Path::new(rule).to_path_buf())
        } else {
            Some(p.join(rule))
        };
        inside.filter(|q| q != p && std::fs::symlink_metadata(q).is_ok()).map(|q| (q, *rule))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_inside_any_home() {
        assert_eq!(secret_path(Path::new("/root/.ssh")).map(|r| r.0), Some(".ssh"));
        assert_eq!(secret_path(Path::new("/home/u/.ssh/id_ed25519")).map(|r| r.0), Some(".ssh"));
        assert_eq!(secret_path(Path::new("/home/u/.config/gcloud/x")).map(|r| r.0), Some(".config/gcloud"));
        assert_eq!(secret_path(Path::new("/etc/shadow")).map(|r| r.0), Some("/etc/shadow"));
        assert_eq!(secret_path(Path::new("/root/.pyenv/versions/3.11.7")), None);
        assert_eq!(secret_path(Path::new("/home/u/.config")), None);
        assert_eq!(secret_path(Path::new("/home/u/ssh")), None);
        assert_eq!(secret_path(Path::new("/etc/shadowy")), None);
    }

    #[test]
    fn a_home_holding_keys_holds_a_secret() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(holds_secret(t.path()), None);
        std::fs::create_dir(t.path().join(".ssh")).unwrap();
        assert_eq!(holds_secret(t.path()), Some((t.path().join(".ssh"), ".ssh")));
        assert_eq!(holds_secret(Path::new("/etc")).map(|r| r.1), Some("/etc/shadow"));
    }
}
