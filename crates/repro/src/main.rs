//! The `repro` binary: everything lives in `repro-cli`.
fn main() -> std::process::ExitCode {
    repro_cli::main()
}
