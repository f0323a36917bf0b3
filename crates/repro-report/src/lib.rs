//! Reports of `repro chaos` run directories: a self-contained HTML report, a Markdown share page with SVG
//! charts, an OpenMetrics export and a loopback dashboard comparing runs. Everything reads the run
//! directory only, and the same run directory gives the same bytes.
pub mod error;
pub mod html;
pub mod openmetrics;
pub mod run;
pub mod serve;
pub mod svg;

use std::path::{Path, PathBuf};

pub use error::{ReportError, Result};
pub use run::Run;

fn write_atomic(path: &Path, content: &str) -> Result<()> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default()
    ));
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
