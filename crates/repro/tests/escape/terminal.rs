//! The caller's terminal: a guest that changes it (echo off) leaves it as it was once `repro run` returns.

use crate::common::require_cmd;
use crate::harness::*;

/// Runs `repro [args]` (as `caller`, in `dir`) with a new pseudo-terminal's far end as its standard input; prints
/// `echo before:B after:A` from the terminal's settings before the run and after `repro` exited.
const DRIVER: &str = r#"
import pty, subprocess, sys, termios
m, s = pty.openpty()
before = bool(termios.tcgetattr(s)[3] & termios.ECHO)
p = subprocess.run(sys.argv[1:], stdin=s, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
after = bool(termios.tcgetattr(s)[3] & termios.ECHO)
print("status", p.returncode, "echo before:%s after:%s" % (before, after))
sys.stdout.write(p.stderr.decode(errors="replace"))
"#;

/// `stty -echo` on the inherited terminal, with the guest ending normally and SIGKILLed, supervised and with
/// `--no-supervisor`, as root and unprivileged: echo is on again after the run.
#[test]
fn a_guest_that_turns_echo_off_leaves_the_terminal_as_it_was() {
    require_cmd("python3");
    for caller in CALLERS {
        for supervisor in [&[][..], &["--no-supervisor"][..]] {
            for (script, status) in [("stty -echo", "status 0"), ("stty -echo; kill -9 $$", "status 137")] {
                let d = workdir(caller);
                let repro = repro_as(caller, d.path());
                let o = std::process::Command::new("python3")
                    .arg("-c")
                    .arg(DRIVER)
                    .arg(repro.get_program())
                    .args(repro.get_args())
                    .args(["run", "-q"])
                    .args(supervisor)
                    .args(["--", "sh", "-c", script])
                    .current_dir(d.path())
                    .env_remove("REPRO_STATE_DIR")
                    .output()
                    .expect("python3 runs");
                let out = String::from_utf8_lossy(&o.stdout);
                let at = format!("{caller:?} {supervisor:?} {script}");
                assert!(out.contains(status), "{at}: {out}{}", String::from_utf8_lossy(&o.stderr));
                assert!(out.contains("echo before:True after:True"), "{at}: {out}");
            }
        }
    }
}
