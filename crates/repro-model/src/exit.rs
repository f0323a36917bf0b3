//! Every exit status repro itself chooses, in one documented enum.
//!
//! A guest's own exit status passes through unchanged (a guest killed by signal N gives 128 + N); the codes below
//! are the ones repro uses when it speaks for itself. README.md's "Exit status" paragraphs and docs/chaos.md's
//! verdict table document them for users.

/// An exit status chosen by repro (not the guest's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ExitCode {
    /// Everything asked for happened (a reproduced failure, a passing experiment, identical verify runs).
    Success = 0,
    /// The failure did not reproduce (`replay`), or a chaos check failed (verdict FAIL).
    Failure = 1,
    /// Bad usage or bad input: an unknown option, a malformed value, an unreadable or invalid file; also a chaos
    /// run whose harness broke (verdict ERROR).
    Usage = 2,
    /// The guest was stuck: every task waited, for `--stuck-after` of wall time, in a wait only another guest task
    /// could end (a deadlock), and the supervisor stopped it. Not 124, which is `timeout`'s.
    Stuck = 120,
    /// The supervisor could not enforce determinism (even if the guest exited 0).
    NotDeterministic = 121,
    /// `run --verify` found the runs differ.
    VerifyDiffers = 122,
    /// A replay diverged from its network tape.
    Diverged = 123,
    /// repro failed to set the sandbox up (or to write its results).
    Setup = 125,
    /// The command exists but cannot be executed.
    NotExecutable = 126,
    /// The command was not found.
    NotFound = 127,
    /// SIGINT ended the command (128 + 2).
    Interrupted = 130,
    /// stdout was closed under repro (a pipe to `head`): 128 + SIGPIPE.
    ClosedPipe = 141,
    /// SIGTERM ended the command (128 + 15).
    Terminated = 143,
}

impl ExitCode {
    /// Every code, in numeric order.
    pub const ALL: [ExitCode; 13] = [
        ExitCode::Success,
        ExitCode::Failure,
        ExitCode::Usage,
        ExitCode::Stuck,
        ExitCode::NotDeterministic,
        ExitCode::VerifyDiffers,
        ExitCode::Diverged,
        ExitCode::Setup,
        ExitCode::NotExecutable,
        ExitCode::NotFound,
        ExitCode::Interrupted,
        ExitCode::ClosedPipe,
        ExitCode::Terminated,
    ];

    /// The numeric status.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The status a process ended by signal `sig` reports in a shell: 128 + sig.
    pub const fn signalled(sig: i32) -> i32 {
        128 + sig
    }

    /// The code for the status `code`, if repro uses it.
    pub fn from_code(code: i32) -> Option<ExitCode> {
        ExitCode::ALL.into_iter().find(|c| c.code() == code)
    }
}

impl From<ExitCode> for i32 {
    fn from(c: ExitCode) -> i32 {
        c.code()
    }
}

impl std::fmt::Display for ExitCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_sorted_and_round_trip() {
        let codes: Vec<i32> = ExitCode::ALL.iter().map(|c| c.code()).collect();
        let mut sorted = codes.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(codes, sorted);
        for c in ExitCode::ALL {
            assert_eq!(ExitCode::from_code(c.code()), Some(c));
        }
        assert_eq!(ExitCode::from_code(124), None);
    }

    #[test]
    fn signal_codes_follow_the_shell() {
        assert_eq!(ExitCode::signalled(2), ExitCode::Interrupted.code());
        assert_eq!(ExitCode::signalled(15), ExitCode::Terminated.code());
        assert_eq!(ExitCode::signalled(13), ExitCode::ClosedPipe.code());
    }
}
