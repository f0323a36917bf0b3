//! Writing to stdout and stderr without panicking: `println!` panics when stdout is a pipe whose reader is
//! gone (`repro runs | head -n 1`). A closed stdout ends the process quietly with 141 (what a shell reports for
//! a command ended by SIGPIPE); a closed stderr is ignored.
use std::fmt;
use std::io::Write;

/// `print!` that never panics.
macro_rules! out {
    ($($t:tt)*) => { $crate::out::write_out(format_args!($($t)*)) };
}

/// `println!` that never panics.
macro_rules! outln {
    () => { $crate::out::write_out(format_args!("\n")) };
    ($($t:tt)*) => { $crate::out::write_out(format_args!("{}\n", format_args!($($t)*))) };
}

/// `eprint!` that never panics.
macro_rules! errout {
    ($($t:tt)*) => { $crate::out::write_err(format_args!($($t)*)) };
}

/// `eprintln!` that never panics.
macro_rules! errln {
    () => { $crate::out::write_err(format_args!("\n")) };
    ($($t:tt)*) => { $crate::out::write_err(format_args!("{}\n", format_args!($($t)*))) };
}

pub fn write_out(args: fmt::Arguments<'_>) {
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_fmt(args) {
        closed(&e);
    }
}

/// Writes bytes to stdout (completion scripts, exported text).
pub fn write_out_bytes(bytes: &[u8]) {
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_all(bytes).and_then(|()| o.flush()) {
        closed(&e);
    }
}

/// Flushes stdout (before a long wait, so a reader sees what was printed).
pub fn flush_out() {
    if let Err(e) = std::io::stdout().lock().flush() {
        closed(&e);
    }
}

pub fn write_err(args: fmt::Arguments<'_>) {
    // A closed stderr is ignored (see above): there is nowhere left to say so.
    let _ = std::io::stderr().lock().write_fmt(args);
}

fn closed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(repro_model::ExitCode::ClosedPipe.code());
    }
    write_err(format_args!("repro: cannot write to stdout: {e}\n"));
    std::process::exit(repro_model::ExitCode::Failure.code());
}
