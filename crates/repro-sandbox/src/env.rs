//! The guest's environment: replaced, never inherited.

use std::collections::BTreeMap;

use crate::parse::EnvSpec;

/// The fixed PATH of the guest.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The guest's home directory (a private tmpfs).
pub const HOME: &str = "/home/repro";
/// The guest's user name.
pub const USER: &str = "repro";

/// Builds the guest environment: the fixed variables, then each `--env` in order (a later one wins).
/// `host` looks a host variable up for `--env NAME`; a name the host does not have is left unset.
pub fn guest_env(
    epoch_unix: i64,
    specs: &[EnvSpec],
    host: impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = [
        ("PATH", PATH.to_string()),
        ("TZ", "UTC".into()),
        ("LC_ALL", "C.UTF-8".into()),
        ("LANG", "C.UTF-8".into()),
        ("PYTHONHASHSEED", "0".into()),
        ("GODEBUG", "randautoseed=0".into()),
        ("MALLOC_ARENA_MAX", "1".into()),
        ("SOURCE_DATE_EPOCH", epoch_unix.to_string()),
        ("HOME", HOME.into()),
        ("USER", USER.into()),
        ("LOGNAME", USER.into()),
        ("TERM", "dumb".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for spec in specs {
        match spec {
            EnvSpec::Set(k, v) => {
                env.insert(k.clone(), v.clone());
            }
            EnvSpec::Pass(k) => match host(k) {
                Some(v) => {
                    env.insert(k.clone(), v);
                }
                None => {
                    env.remove(k);
                }
            },
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_variables_and_overrides() {
        let specs = vec![
            EnvSpec::Set("TZ".into(), "Europe/Paris".into()),
            EnvSpec::Pass("FROM_HOST".into()),
            EnvSpec::Pass("MISSING".into()),
        ];
        let env = guest_env(42, &specs, |k| (k == "FROM_HOST").then(|| "yes".to_string()));
        assert_eq!(env["TZ"], "Europe/Paris");
        assert_eq!(env["FROM_HOST"], "yes");
        assert_eq!(env["SOURCE_DATE_EPOCH"], "42");
        assert_eq!(env["PYTHONHASHSEED"], "0");
        assert!(!env.contains_key("MISSING"));
        assert_eq!(env.len(), 13);
    }
}
