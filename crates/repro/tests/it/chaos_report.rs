//! `repro chaos report|share|export|dashboard`: real runs of the examples, the report loaded in a real
//! browser (Debian's chromium, headless), the export loaded by promtool (Debian's prometheus).
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::{assert_code, repro, repro_path, require_cmd, require_cmds, stderr, stdout, Workdir};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/chaos")
}

/// Runs an example and returns its run directory.
fn run_example(wd: &Workdir, name: &str) -> PathBuf {
    // The smoke example serves with python3 -m http.server.
    require_cmd("python3");
    let o = repro()
        .current_dir(wd.path())
        .args(["chaos", "run"])
        .arg(examples().join(format!("{name}.yaml")))
        .arg("--state-dir")
        .arg(wd.path().join("state"))
        .args(["-q", "--seed", "7"])
        .output()
        .expect("repro runs");
    assert_code(&o, 0);
    PathBuf::from(stdout(&o).lines().last().expect("run dir").trim())
}

fn chaos(args: &[&str], run: &Path) -> Output {
    repro().args(["chaos"]).args(args).arg(run).output().expect("repro runs")
}

/// Headless chromium on `url`: (the DOM, stderr). `--enable-logging=stderr --v=0` prints every console
/// message of the page as an `INFO:CONSOLE` line.
fn chromium(url: &str, screenshot: Option<&Path>) -> (String, String) {
    let profile = tempfile::tempdir().expect("tempdir");
    let mut c = Command::new("chromium");
    c.args(["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"])
        .args(["--enable-logging=stderr", "--v=0", "--window-size=1100,1500"])
        .arg(format!("--user-data-dir={}", profile.path().display()));
    match screenshot {
        Some(p) => c.arg(format!("--screenshot={}", p.display())),
        None => c.arg("--dump-dom"),
    };
    let o = c.arg(url).output().expect("chromium runs (Debian package chromium)");
    assert!(o.status.success(), "chromium failed: {}", stderr(&o));
    (stdout(&o), stderr(&o))
}

fn console_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("CONSOLE")).collect()
}

/// Counts the pixels of a PNG within 12 of each `colour` (python3's zlib decodes it).
fn count_colours(png: &Path, colours: &[&str]) -> Vec<u64> {
    const SCRIPT: &str = r#"
import struct, sys, zlib
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n'
pos, idat = 8, b''
while pos < len(data):
    n, kind = struct.unpack('>I4s', data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b'IHDR':
        w, h, depth, ctype = struct.unpack('>IIBB', body[:10])
    elif kind == b'IDAT':
        idat += body
    pos += 12 + n
assert depth == 8 and ctype in (2, 6), (depth, ctype)
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
prev, rows, i = bytearray(stride), [], 0
for _ in range(h):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b = prev[x]; c = prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line); prev = line
want = [tuple(int(c[k:k + 2], 16) for k in (1, 3, 5)) for c in sys.argv[2:]]
counts = [0] * len(want)
for line in rows:
    for x in range(0, stride, bpp):
        px = line[x:x + 3]
        for j, (r, g, b) in enumerate(want):
            if abs(px[0] - r) <= 12 and abs(px[1] - g) <= 12 and abs(px[2] - b) <= 12:
                counts[j] += 1
print(' '.join(map(str, counts)))
"#;
    let o = Command::new("python3").arg("-c").arg(SCRIPT).arg(png).args(colours).output().expect("python3 runs");
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o).split_whitespace().map(|n| n.parse().expect("a count")).collect()
}

#[test]
fn report_is_self_contained_and_byte_identical_for_the_same_run_directory() {
    let wd = Workdir::new();
    let dir = run_example(&wd, "smoke");
    let o = chaos(&["report"], &dir);
    assert_code(&o, 0);
    assert_eq!(stdout(&o).trim(), dir.join("report.html").display().to_string());
    let first = std::fs::read(dir.join("report.html")).unwrap();
    let html = String::from_utf8(first.clone()).unwrap();
    // Self-contained: no scripts, nothing fetched; the only URL is the SVG namespace.
    assert!(!html.contains("<script"), "scripts in the report");
    assert!(!html.contains(" src="), "a resource is loaded");
    assert!(!html.contains("url("), "a CSS url()");
    let hrefs: Vec<&str> = html.match_indices("href=").map(|(i, _)| &html[i..(i + 14).min(html.len())]).collect();
    assert_eq!(hrefs, ["href=\"data:,\">"], "links in the report");
    for want in [
        "<span class=\"verdict v-PASS\">PASS</span>",
        "class=\"chart timeline\"",
        "class=\"band\"",
        ">web</text>",
        ">ticker-0</text>",
        "frozen",
        "class=\"mark signal\"",
        "class=\"mark check\"",
        "id=\"metric-01-web-chaos_smoke_up\"",
        "<td><code>ticker-0/exited-ok</code></td>",
    ] {
        assert!(html.contains(want), "report lacks {want}");
    }
    // Again, and from a copy of the run directory somewhere else: the same bytes.
    assert_code(&chaos(&["report"], &dir), 0);
    assert_eq!(std::fs::read(dir.join("report.html")).unwrap(), first, "a second report differs");
    let copy = wd.path().join("copied-run");
    assert!(Command::new("cp").arg("-a").arg(&dir).arg(&copy).status().unwrap().success());
    std::fs::remove_file(copy.join("report.html")).unwrap();
    let other = wd.path().join("elsewhere.html");
    let o = repro().args(["chaos", "report"]).arg(&copy).arg("-o").arg(&other).output().unwrap();
    assert_code(&o, 0);
    assert_eq!(std::fs::read(&other).unwrap(), first, "the report of a copied run directory differs");
}

#[test]
fn report_loads_in_chromium_without_console_errors_and_its_screenshot_shows_the_timeline() {
    require_cmds(&["chromium", "python3"]);
    let wd = Workdir::new();
    // The console check catches a page that logs: a control page with a console error.
    let control = wd.path().join("control.html");
    std::fs::write(&control, "<html><body><script>console.error('control-error')</script></body></html>").unwrap();
    let (_, err) = chromium(&format!("file://{}", control.display()), None);
    assert!(console_lines(&err).iter().any(|l| l.contains("control-error")), "console not captured:\n{err}");

    let dir = run_example(&wd, "smoke");
    assert_code(&chaos(&["report"], &dir), 0);
    let url = format!("file://{}", dir.join("report.html").display());
    let (dom, err) = chromium(&url, None);
    assert!(console_lines(&err).is_empty(), "console messages:\n{err}");
    assert!(dom.contains("class=\"chart timeline\""), "the DOM has no timeline");
    let png = wd.path().join("report.png");
    let (_, err) = chromium(&url, Some(&png));
    assert!(console_lines(&err).is_empty(), "console messages:\n{err}");
    // The frozen instance's segment (#5bc0de), a target that was up (#2e9d4f) and a running instance
    // (#3b7dd8) are drawn: each is a bar many pixels wide, more than the legend's swatch (120 px).
    let counts = count_colours(&png, &["#5bc0de", "#2e9d4f", "#3b7dd8"]);
    assert!(counts[0] > 300, "no frozen segment in the screenshot: {counts:?}");
    assert!(counts[1] > 2000, "no up segment in the screenshot: {counts:?}");
    assert!(counts[2] > 2000, "no running segment in the screenshot: {counts:?}");
}

#[test]
fn export_is_openmetrics_that_promtool_turns_into_blocks() {
    require_cmd("promtool");
    let wd = Workdir::new();
    let dir = run_example(&wd, "smoke");
    let o = chaos(&["export"], &dir);
    assert_code(&o, 0);
    let om = std::fs::read_to_string(dir.join("metrics.om")).unwrap();
    assert!(om.ends_with("# EOF\n"));
    assert!(om.contains("# TYPE chaos_lane_state gauge\n"), "no lane states");
    assert!(om.contains("# TYPE chaos_timeline_events counter\n"), "no event counter");
    let stdout_export = chaos(&["export", "-o", "-"], &dir);
    assert_code(&stdout_export, 0);
    assert_eq!(stdout(&stdout_export), om, "stdout and file exports differ");
    let tsdb = wd.path().join("tsdb");
    let o = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(dir.join("metrics.om"))
        .arg(&tsdb)
        .output()
        .expect("promtool runs (Debian package prometheus)");
    assert!(o.status.success(), "promtool rejected the export:\n{}\n{}", stdout(&o), stderr(&o));
    // `dump` opens the database read-only and wants a WAL directory, even an empty one.
    std::fs::create_dir_all(tsdb.join("wal")).unwrap();
    let o = Command::new("promtool").args(["tsdb", "dump"]).arg(&tsdb).output().expect("promtool runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let dump = stdout(&o);
    for want in [
        "chaos_smoke_up",
        "chaos_lane_state",
        "chaos_operation_active",
        "chaos_check_passed",
        "chaos_run_verdict",
        "chaos_timeline_events_total",
    ] {
        assert!(dump.contains(want), "promtool's blocks have no {want}");
    }
    assert!(dump.contains("chaos_target=\"web\""), "scraped samples lack their target label");
}

#[test]
fn share_writes_markdown_with_the_charts_as_svg_files_beside_it() {
    let wd = Workdir::new();
    let dir = run_example(&wd, "smoke");
    let out = wd.path().join("share");
    let o = repro().args(["chaos", "share"]).arg(&dir).arg("-o").arg(&out).output().unwrap();
    assert_code(&o, 0);
    let md = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(md.contains("**PASS**"), "{md}");
    assert!(md.contains("![timeline](timeline.svg)"), "{md}");
    assert!(md.contains("| `ticker-0/exited-ok` | ok |"), "{md}");
    // Each check's details are in the page (as in report.html), not only its outcome.
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("verdict.json")).unwrap()).unwrap();
    let detailed: Vec<(&str, String)> = verdict["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| {
            let first = c["details"].as_array()?.first()?;
            Some((c["id"].as_str()?, first.as_str().map(String::from).unwrap_or_else(|| first.to_string())))
        })
        .collect();
    assert!(!detailed.is_empty(), "the smoke run's checks have details: {verdict:#}");
    assert!(md.contains("### Check details"), "{md}");
    for (id, first) in &detailed {
        assert!(md.contains(&format!("`{id}`:")) && md.contains(first.as_str()), "{id}: {first} not in {md}");
    }
    for line in md.lines().filter(|l| l.starts_with("![")) {
        let file = &line[line.find("](").unwrap() + 2..line.len() - 1];
        let svg = std::fs::read_to_string(out.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""), "{file}");
        assert!(svg.ends_with("</svg>"), "{file}");
    }
    assert!(out.join("metric-01-web-chaos_smoke_up.svg").is_file());
}

fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("dashboard accepts");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let status = buf.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = buf.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default();
    (status, body)
}

struct Killed(std::process::Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `repro chaos dashboard RUN...` in the background: the server (killed when dropped) and the URL it printed.
fn dashboard(runs: &[PathBuf]) -> (Killed, String) {
    let mut child = Command::new(repro_path())
        .args(["chaos", "dashboard"])
        .args(runs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    (Killed(child), line.trim().to_string())
}

#[test]
fn dashboard_serves_runs_side_by_side_on_loopback_and_loads_in_chromium() {
    require_cmds(&["chromium", "python3"]);
    let wd = Workdir::new();
    let a = run_example(&wd, "smoke");
    let b = run_example(&wd, "hello-world");
    let (child, url) = dashboard(&[a.clone(), b.clone()]);
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let addr = url.trim_start_matches("http://").trim_end_matches('/').to_string();
    let (status, page) = http_get(&addr, "/");
    assert_eq!(status, 200);
    let ida = a.file_name().unwrap().to_string_lossy().into_owned();
    let idb = b.file_name().unwrap().to_string_lossy().into_owned();
    assert!(page.contains(&ida) && page.contains(&idb), "both runs are on the page");
    assert_eq!(page.matches("class=\"chart timeline\"").count(), 2, "one timeline per run");
    let (status, report) = http_get(&addr, "/run/2/");
    assert_eq!(status, 200);
    assert!(report.contains("An instance says hello"), "run 2 is hello-world");
    assert_eq!(http_get(&addr, "/run/3/").0, 404);
    let (dom, err) = chromium(&url, None);
    assert!(console_lines(&err).is_empty(), "console messages:\n{err}");
    assert!(dom.contains(&ida) && dom.matches("class=\"chart timeline\"").count() == 2);
    let png = wd.path().join("dashboard.png");
    let (_, err) = chromium(&url, Some(&png));
    assert!(console_lines(&err).is_empty(), "console messages:\n{err}");
    let counts = count_colours(&png, &["#3b7dd8"]);
    assert!(counts[0] > 1000, "no running segments in the dashboard screenshot: {counts:?}");
    drop(child);
}

#[test]
fn reports_of_something_that_is_not_a_run_directory_exit_2_naming_it() {
    let wd = Workdir::new();
    for cmd in ["report", "share", "export", "dashboard"] {
        let o = repro().args(["chaos", cmd]).arg(wd.path().join("nope")).output().unwrap();
        assert_code(&o, 2);
        assert!(stderr(&o).contains("nope: not a run directory (no such directory)"), "{cmd}: {}", stderr(&o));
    }
    let broken = wd.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::copy(examples().join("hello-world.yaml"), broken.join("experiment.yaml")).unwrap();
    std::fs::write(broken.join("timeline.jsonl"), "{\"t\": 0, \"event\": \"run.started\"}\nnot json\n{}\n").unwrap();
    let o = repro().args(["chaos", "report"]).arg(&broken).output().unwrap();
    assert_code(&o, 2);
    assert!(stderr(&o).contains("timeline.jsonl: line 2:"), "{}", stderr(&o));
}

/// Lays the page out in chromium and lists every element that sticks out of its run's column, or out of the
/// window (the summary table, headings and paragraphs outside the sideways-scrolling columns): `tag.class
/// right>limit`, measured by a script appended to the page.
fn overflowing(wd: &Workdir, page: &str) -> Vec<String> {
    let probe = r#"<script>
const out = [];
const W = document.documentElement.clientWidth;
for (const s of document.querySelectorAll('section.run')) {
  const lim = s.getBoundingClientRect().right + 1;
  for (const e of s.querySelectorAll('*')) {
    const r = e.getBoundingClientRect();
    if (r.width > 0 && r.right > lim) out.push(e.tagName + '.' + (e.getAttribute('class') || '') + ' ' + Math.round(r.right) + '>' + Math.round(lim));
  }
}
for (const e of document.querySelectorAll('table.summary, table.summary *, h1, p')) {
  if (e.closest('.scroll')) continue; // the runs' columns scroll sideways, by design
  const r = e.getBoundingClientRect();
  if (r.right > W + 1) out.push(e.tagName + ' ' + Math.round(r.right) + '>' + W);
}
const pre = document.createElement('pre'); pre.id = 'overflow'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"#;
    let f = wd.path().join("measured.html");
    std::fs::write(&f, page.replace("</body>", &format!("{probe}</body>"))).unwrap();
    let (dom, _) = chromium(&format!("file://{}", f.display()), None);
    let json = dom.split("<pre id=\"overflow\">").nth(1).and_then(|s| s.split("</pre>").next()).expect("the probe ran");
    serde_json::from_str(&json.replace("&gt;", ">").replace("&lt;", "<").replace("&amp;", "&")).unwrap()
}

#[test]
fn the_dashboard_does_not_overflow_with_long_names() {
    require_cmds(&["chromium"]);
    let wd = Workdir::new();
    let long = "a-very-long-experiment-identifier-that-goes-on-and-on-without-a-single-space-to-break-at-x";
    let exp = wd.path().join("long.yaml");
    std::fs::write(
        &exp,
        format!(
            "apiVersion: repro.dev/chaos/v1\nid: {long}\nversion: 1\ntitle: {long}\nhypothesis: h\ntimeout: 1m\nworkloads:\n  - name: {w}\n    kind: shell\n    instances: 2\n    run: echo {long}{long} >&2; exit 3\n    checks:\n      - name: {c}\n        kind: shell\n        run: echo {long}{long}{long}; exit 1\noperations:\n  - {{name: {o}, uses: kill, target: {w}}}\nflow:\n  parallel: [{w}, {o}]\n",
            w = "workload-with-a-long-name-that-keeps-going-and-going-and-going",
            c = "check-with-a-name-that-is-much-longer-than-any-column-would-like-it-to-be",
            o = "operation-whose-name-is-long-enough-to-overflow-a-label-on-the-timeline"
        ),
    )
    .unwrap();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let o = repro()
            .current_dir(wd.path())
            .args(["chaos", "run"])
            .arg(&exp)
            .arg("--state-dir")
            .arg(wd.path().join("state"))
            .arg("-q")
            .output()
            .unwrap();
        assert_code(&o, 1);
        runs.push(PathBuf::from(stdout(&o).lines().last().unwrap().trim()));
    }
    let (child, url) = dashboard(&runs);
    let addr = url.trim_start_matches("http://").trim_end_matches('/').to_string();
    let (status, page) = http_get(&addr, "/");
    assert_eq!(status, 200);
    assert!(page.contains(long));
    let bad = overflowing(&wd, &page);
    assert!(bad.is_empty(), "elements stick out of their column or the window: {bad:?}");
    drop(child);
}
