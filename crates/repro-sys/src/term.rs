//! The caller's terminal settings, saved before a run and put back after it: a guest inherits the terminal as
//! its standard input and may change it (`stty -echo`, raw mode) and be killed before it undoes that.

use std::os::fd::AsFd;

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::termios::{self, SetArg, Termios};

/// The settings of standard input when it is a terminal, put back when dropped (also on an error's way out).
pub struct SavedTerminal {
    saved: Termios,
}

impl SavedTerminal {
    /// Saves standard input's settings; `None` when it is not a terminal (then there is nothing to put back).
    pub fn stdin() -> Option<SavedTerminal> {
        let saved = termios::tcgetattr(stdin().as_fd()).ok()?;
        Some(SavedTerminal { saved })
    }

    /// Puts the saved settings back if they differ from the terminal's now. Returns whether it changed them.
    pub fn restore(&self) -> nix::Result<bool> {
        let now = termios::tcgetattr(stdin().as_fd())?;
        if same(&now, &self.saved) {
            return Ok(false);
        }
        // From a background process group tcsetattr would stop us with SIGTTOU; with it blocked the kernel lets
        // the change through (the caller's terminal had these very settings when the run began).
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let mut old = SigSet::empty();
        nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old))?;
        let set = termios::tcsetattr(stdin().as_fd(), SetArg::TCSANOW, &self.saved);
        nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None)?;
        set.map(|()| true)
    }
}

impl Drop for SavedTerminal {
    fn drop(&mut self) {
        // Best effort: a terminal that went away (hung up) has nothing to put back.
        let _ = self.restore();
    }
}

fn stdin() -> std::io::Stdin {
    std::io::stdin()
}

fn same(a: &Termios, b: &Termios) -> bool {
    a.input_flags == b.input_flags
        && a.output_flags == b.output_flags
        && a.control_flags == b.control_flags
        && a.local_flags == b.local_flags
        && a.control_chars == b.control_chars
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_a_terminal_saves_nothing() {
        // Under `cargo test` standard input is not a terminal when run by CI; where it is, saving works.
        let saved = SavedTerminal::stdin();
        assert_eq!(saved.is_some(), nix::unistd::isatty(std::io::stdin()).unwrap_or(false));
    }
}
