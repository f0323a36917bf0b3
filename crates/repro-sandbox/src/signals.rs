//! The signals repro handles for a run and their names.

/// Signals the init (and `repro run`) handle through a signalfd (blocked before the init's exec).
pub const INIT_SIGNALS: [i32; 4] = [libc_sig::INT, libc_sig::TERM, libc_sig::HUP, libc_sig::CHLD];

/// Signal numbers (x86_64 and aarch64 agree on these).
pub mod libc_sig {
    pub const HUP: i32 = 1;
    pub const INT: i32 = 2;
    pub const KILL: i32 = 9;
    pub const TERM: i32 = 15;
    pub const CHLD: i32 = 17;
}

/// The conventional name of a signal number.
pub fn signal_name(sig: i32) -> String {
    let names = [
        "",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    names.get(sig as usize).filter(|n| !n.is_empty()).map(|n| n.to_string()).unwrap_or_else(|| format!("SIG{sig}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(2), "SIGINT");
        assert_eq!(signal_name(40), "SIG40");
    }
}
