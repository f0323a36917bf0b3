use std::error::Error;
use std::fmt;

/// An error that ends the command: what went wrong, with its whole story (every cause in its source chain), and
/// the documented exit status.
#[derive(Debug)]
pub struct CliError {
    pub code: i32,
    error: Box<dyn Error + Send + Sync + 'static>,
}

/// A message without a cause.
#[derive(Debug)]
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for Message {}

impl CliError {
    /// An error with a message and no cause.
    pub fn new(code: impl Into<i32>, message: impl Into<String>) -> Self {
        CliError { code: code.into(), error: Box::new(Message(message.into())) }
    }
    /// A usage error (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        CliError::new(repro_model::ExitCode::Usage, message)
    }
    /// A library error, kept whole: its causes are printed after it.
    pub fn from_error(code: impl Into<i32>, error: impl Error + Send + Sync + 'static) -> Self {
        CliError { code: code.into(), error: Box::new(error) }
    }
}

/// `error` followed by each cause in its source chain, joined with ": " ("cannot unpack X: cannot create Y: No
/// space left on device"). A cause whose message the text already holds (an error that prints its source
/// itself) is not repeated.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let m = e.to_string();
        if !m.is_empty() && !text.contains(&m) {
            text.push_str(": ");
            text.push_str(&m);
        }
        cause = e.source();
    }
    text
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&chain(self.error.as_ref()))
    }
}

/// The whole chain is in the Display: no source, so nothing prints a cause twice.
impl Error for CliError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that does not print its cause.
    #[derive(Debug, thiserror::Error)]
    #[error("cannot unpack {0}")]
    struct Unpack(&'static str, #[source] Create);

    #[derive(Debug, thiserror::Error)]
    #[error("cannot create {0}")]
    struct Create(&'static str, #[source] std::io::Error);

    /// An error that prints its cause itself.
    #[derive(Debug, thiserror::Error)]
    #[error("cannot write 'x': {0}")]
    struct Write(#[source] std::io::Error);

    fn enospc() -> std::io::Error {
        std::io::Error::from_raw_os_error(28)
    }

    #[test]
    fn the_whole_chain_is_printed() {
        let e = CliError::from_error(125, Unpack("p.repro", Create("/d/y", enospc())));
        let text = e.to_string();
        assert!(text.starts_with("cannot unpack p.repro: cannot create /d/y: No space left on device"), "{text}");
        assert_eq!(e.code, 125);
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let e = CliError::from_error(125, Write(enospc()));
        assert_eq!(e.to_string().matches("No space left on device").count(), 1, "{e}");
        let e = CliError::from_error(125, Unpack("p", Create("y", std::io::Error::other("cannot create y"))));
        assert_eq!(e.to_string(), "cannot unpack p: cannot create y");
    }

    #[test]
    fn plain_messages_and_codes() {
        let e = CliError::usage("--runs 0: expected at least 1");
        assert_eq!((e.code, e.to_string().as_str()), (2, "--runs 0: expected at least 1"));
        assert_eq!(CliError::new(repro_model::ExitCode::Setup, "x").code, 125);
    }
}
