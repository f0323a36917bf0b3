//! Reports of `repro chaos` run directories: a self-contained HTML report, a Markdown share page with SVG
//! charts, an OpenMetrics export and a loopback dashboard comparing runs. Everything reads the run
//! directory only, and the same run directory gives the same bytes.
/// `write!` into a `String`: formatting into memory cannot fail, so there is no `fmt::Result` to drop.
macro_rules! put {
    ($o:expr, $($arg:tt)*) => {{
        use $crate::PushFmt as _;
        $o.push_fmt(format_args!($($arg)*))
    }};
}

/// `writeln!` into a `String` (see [`put!`]).
macro_rules! putln {
    ($o:expr, $($arg:tt)*) => {{
        use $crate::PushFmt as _;
        $o.push_fmt(format_args!($($arg)*));
        $o.push('\n')
    }};
}

pub mod error;
pub mod html;
pub mod openmetrics;
pub mod run;
pub mod serve;
pub mod svg;

use std::path::{Path, PathBuf};

pub use error::{ReportError, Result};
pub use run::Run;

/// Appends formatted text to a `String`; what [`put!`] and [`putln!`] call.
trait PushFmt {
    fn push_fmt(&mut self, args: std::fmt::Arguments<'_>);
}

impl PushFmt for String {
    fn push_fmt(&mut self, args: std::fmt::Arguments<'_>) {
        match args.as_str() {
            Some(s) => self.push_str(s),
            None => self.push_str(&std::fmt::format(args)),
        }
    }
}

/// Writes `content` to `NAME.tmp` beside `path`, then renames it over `path`.
fn write_atomic(path: &Path, content: &str) -> Result<()> {
    let Some(name) = path.file_name() else {
        let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, "expected a file name");
        return Err(ReportError::io(path, e));
    };
    let mut tmp_name = name.to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    std::fs::write(&tmp, content).map_err(|e| ReportError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| ReportError::io(path, e))
}

/// Writes the HTML report of `run_dir` to `out` (default `RUN/report.html`); returns where.
pub fn write_report(run_dir: &Path, out: Option<&Path>) -> Result<PathBuf> {
    let run = Run::read(run_dir)?;
    let path = out.map(Path::to_path_buf).unwrap_or_else(|| run_dir.join("report.html"));
    write_atomic(&path, &html::report(&run))?;
    Ok(path)
}

/// Writes the share page (`README.md` and the SVG charts) into `out` (default `RUN/share/`); returns the
/// directory and the files written.
pub fn write_share(run_dir: &Path, out: Option<&Path>) -> Result<(PathBuf, Vec<PathBuf>)> {
    let run = Run::read(run_dir)?;
    let dir = out.map(Path::to_path_buf).unwrap_or_else(|| run_dir.join("share"));
    std::fs::create_dir_all(&dir).map_err(|e| ReportError::io(&dir, e))?;
    let mut written = Vec::new();
    for (name, content) in html::share(&run) {
        let p = dir.join(name);
        write_atomic(&p, &content)?;
        written.push(p);
    }
    Ok((dir, written))
}

/// Writes the OpenMetrics export to `out` (default `RUN/metrics.om`); returns where.
pub fn write_export(run_dir: &Path, out: Option<&Path>) -> Result<PathBuf> {
    let run = Run::read(run_dir)?;
    let path = out.map(Path::to_path_buf).unwrap_or_else(|| run_dir.join("metrics.om"));
    write_atomic(&path, &openmetrics::export(&run))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_and_putln_format_into_a_string() {
        let mut o = String::new();
        put!(o, "a{}", 1);
        putln!(o, " b");
        putln!(o, "{:>3}", 2);
        assert_eq!(o, "a1 b\n  2\n");
    }

    #[test]
    fn write_atomic_renames_a_sibling_and_names_what_failed() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("metrics.om");
        write_atomic(&p, "# EOF\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "# EOF\n");
        assert!(!d.path().join("metrics.om.tmp").exists());
        let e = write_atomic(&d.path().join("no/such/dir/x.html"), "").unwrap_err().to_string();
        assert!(e.contains("no/such/dir/x.html.tmp: "), "{e}");
        let e = write_atomic(Path::new("/"), "").unwrap_err().to_string();
        assert_eq!(e, "/: expected a file name");
    }

    #[test]
    fn a_dashboard_needs_runs() {
        let e = serve::Dashboard::bind(vec![], 0).err().unwrap();
        assert_eq!(e.to_string(), "dashboard: no run directories given");
    }
}
