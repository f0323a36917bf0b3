//! The HTML report, the Markdown share page and the dashboard page. Self-contained: inline CSS and SVG,
//! no scripts, nothing fetched.
use std::collections::BTreeSet;

use serde_json::Value;

use crate::error::ReportError;
use crate::run::{self, Lanes, Run, Series};
use crate::svg::{self, esc, fmt_secs, fmt_value, LineChart, TimelineStyle};

/// One chart with what it shows.
#[derive(Debug, Clone)]
pub struct Chart {
    /// A file-name-safe slug, unique within the run.
    pub slug: String,
    pub title: String,
    pub description: String,
    pub svg: String,
}

/// A family whose every series held one value the whole run.
#[derive(Debug, Clone)]
pub struct Constant {
    pub target: String,
    pub family: String,
    pub series: usize,
    pub value: String,
}

/// Every chart of a run.
pub struct Charts {
    pub lanes: Lanes,
    pub timeline: String,
    /// The experiment's `metrics`, in its order.
    pub listed: Vec<Chart>,
    /// The other scraped families that changed, by target then family.
    pub others: Vec<Chart>,
    pub constants: Vec<Constant>,
}

fn slug(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' }).collect()
}

fn constant(series: &[Series]) -> Option<f64> {
    let first = series.first()?.points.first()?.1;
    let same = |v: f64| v == first || (v.is_nan() && first.is_nan());
    series.iter().all(|s| s.points.iter().all(|p| same(p.1))).then_some(first)
}

/// A target, its families and its failed scrapes.
type TargetFamilies = (String, std::collections::BTreeMap<String, Vec<Series>>, Vec<(f64, String)>);

/// Draws the charts of `run`; `width` is the timeline's width, `small` the small multiples' width.
pub fn charts(run: &Run, width: f64, small: f64, others: bool) -> Charts {
    let lanes = run::lanes(run);
    let timeline = svg::timeline(&lanes, &TimelineStyle { width });
    let end = lanes.end;
    let mut listed = Vec::new();
    let mut wanted: BTreeSet<(String, String)> = BTreeSet::new();
    let fams: Vec<TargetFamilies> =
        run.metrics.iter().map(|(t, m)| (t.clone(), run::families(m), run::scrape_errors(m))).collect();
    for (i, m) in run.experiment.metrics.iter().enumerate() {
        wanted.insert((m.target.clone(), m.family.clone()));
        let found = fams.iter().find(|f| f.0 == m.target);
        let empty = Vec::new();
        let series = found.and_then(|f| f.1.get(&m.family)).unwrap_or(&empty);
        let errors = found.map(|f| f.2.clone()).unwrap_or_default(); // a target never scraped has no errors
        let subtitle = if series.is_empty() {
            format!("{}: never scraped", m.target)
        } else {
            format!("{} · {} series", m.target, series.len())
        };
        let svg = svg::line_chart(&LineChart {
            title: &m.family,
            subtitle: &subtitle,
            series,
            bands: &lanes.bands,
            errors: &errors,
            end,
            width: small,
            height: 110.0,
            max_series: 8,
        });
        listed.push(Chart {
            slug: format!("metric-{:02}-{}-{}", i + 1, slug(&m.target), slug(&m.family)),
            title: format!("{} / {}", m.target, m.family),
            description: m.description.clone(),
            svg,
        });
    }
    let mut other_charts = Vec::new();
    let mut constants = Vec::new();
    if others {
        for (target, families, errors) in &fams {
            for (family, series) in families {
                if wanted.contains(&(target.clone(), family.clone())) {
                    continue;
                }
                if let Some(v) = constant(series) {
                    constants.push(Constant {
                        target: target.clone(),
                        family: family.clone(),
                        series: series.len(),
                        value: fmt_value(v),
                    });
                    continue;
                }
                let subtitle = format!("{target} · {} series", series.len());
                let svg = svg::line_chart(&LineChart {
                    title: family,
                    subtitle: &subtitle,
                    series,
                    bands: &lanes.bands,
                    errors,
                    end,
                    width: small,
                    height: 80.0,
                    max_series: 4,
                });
                other_charts.push(Chart {
                    slug: format!("other-{}-{}", slug(target), slug(family)),
                    title: format!("{target} / {family}"),
                    description: String::new(),
                    svg,
                });
            }
        }
    }
    Charts { lanes, timeline, listed, others: other_charts, constants }
}

const CSS: &str = r#"
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d1d1f; margin: 0; background: #fff; }
main { max-width: 1000px; margin: 0 auto; padding: 20px 20px 60px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #e5e5e5; padding-bottom: 4px; }
h3 { font-size: 14px; margin: 14px 0 6px; }
.meta { color: #666; font-size: 12.5px; }
.meta code { font-size: 12px; }
.verdict { display: inline-block; font-weight: 700; padding: 3px 12px; border-radius: 4px; color: #fff; letter-spacing: .03em; }
.v-PASS { background: #2e9d4f; } .v-XFAIL { background: #5f8f3a; } .v-FAIL { background: #d64545; }
.v-ERROR { background: #b5179e; } .v-n-a { background: #888; } .v-INCOMPLETE { background: #e07b39; }
blockquote { margin: 10px 0; padding: 8px 14px; background: #f5f7fb; border-left: 4px solid #3b7dd8; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #eee; vertical-align: top; }
th { background: #fafafa; font-weight: 600; }
td.ok { color: #2e9d4f; font-weight: 600; } td.bad { color: #d64545; font-weight: 600; } td.x { color: #8a6d00; font-weight: 600; }
p, h1, h2, h3, td, th, code, .meta { overflow-wrap: anywhere; }
pre { margin: 2px 0 0; font-size: 12px; white-space: pre-wrap; word-break: break-all; color: #444; }
table.checks td:first-child, table.checks td:nth-child(2) { white-space: nowrap; }
table.manifest th { white-space: nowrap; width: 1%; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(310px, 1fr)); gap: 10px; }
.card { border: 1px solid #e6e6e6; border-radius: 6px; padding: 6px; background: #fff; }
.card p { margin: 2px 4px 4px; color: #555; font-size: 12px; }
.chart { display: block; max-width: 100%; height: auto; }
.scroll { overflow-x: auto; }
details summary { cursor: pointer; color: #3b7dd8; }
footer { margin-top: 30px; color: #888; font-size: 12px; }
.runs { display: grid; gap: 16px; margin-top: 16px; }
.run { border: 1px solid #e3e3e3; border-radius: 8px; padding: 10px; min-width: 0; }
.run h2 { margin-top: 6px; }
"#;

fn head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<link rel=\"icon\" href=\"data:,\">\n<title>{}</title>\n<style>{CSS}</style>\n</head>\n",
        esc(title)
    )
}

fn verdict_class(v: &str) -> String {
    format!("v-{}", v.replace('/', "-"))
}

fn outcome_cell(c: &Value) -> (String, &'static str) {
    let outcome = c["outcome"].as_str().unwrap_or(if c["passed"].as_bool() == Some(true) { "ok" } else { "failed" });
    let class = match outcome {
        "ok" => "ok",
        "xfail" | "flaky" => "x",
        _ => "bad",
    };
    (outcome.to_string(), class)
}

/// A check's details, one line each (none when it was recorded without).
fn check_details(c: &Value) -> Vec<String> {
    c["details"].as_array().map(|a| a.iter().map(repro_chaos::timeline::value_text).collect()).unwrap_or_default()
}

/// A Markdown code fence longer than any run of backticks in `text` (so the text cannot close it).
fn fence_for(text: &str) -> String {
    let longest = text.split(|ch| ch != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

fn check_table(run: &Run, o: &mut String) {
    let checks = run.checks();
    if checks.is_empty() {
        o.push_str("<p class=\"meta\">No check results (the run has no verdict.json).</p>\n");
        return;
    }
    o.push_str("<table class=\"checks\">\n<tr><th>check</th><th>scope</th><th>outcome</th><th>issue</th><th>details</th></tr>\n");
    for c in &checks {
        let (outcome, class) = outcome_cell(c);
        let details = check_details(c);
        putln!(
            o,
            "<tr><td><code>{}</code></td><td>{}</td><td class=\"{class}\">{}</td><td>{}</td><td>{}</td></tr>",
            esc(c["id"].as_str().unwrap_or("?")),
            esc(c["scope"].as_str().unwrap_or("")),
            esc(&outcome),
            esc(c["issue"].as_str().unwrap_or("")),
            if details.is_empty() { String::new() } else { format!("<pre>{}</pre>", esc(&details.join("\n"))) }
        );
    }
    o.push_str("</table>\n");
    // History checks that found a non-linearizable window: drawn below the table, at full width.
    for c in &checks {
        let w = &c["data"]["details"]["window"];
        if w.is_object() {
            putln!(
                o,
                "<h3>{}: the {}non-linearizable window</h3>\n<p class=\"meta\">One lane per process; each operation from its call to its return. Hover for its values and times.</p>\n{}",
                esc(c["id"].as_str().unwrap_or("?")),
                if w["minimal"] == true { "smallest " } else { "" },
                crate::svg::history_window(w)
            );
        }
    }
}

fn manifest_table(run: &Run, o: &mut String) {
    let m = &run.manifest;
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: &Value| {
        let s = repro_chaos::timeline::value_text(v);
        if !v.is_null() && !s.is_empty() {
            rows.push((k.to_string(), s));
        }
    };
    put("experiment sha256", &m["experiment"]["sha256"]);
    put("adapter", &m["adapter"]["name"]);
    put("adapter sha256", &m["adapter"]["sha256"]);
    put("repro version", &m["repro_version"]);
    put("git sha", &m["git_sha"]);
    put("seed", &m["seed"]);
    put("started", &m["started"]);
    for key in ["systems", "docker", "images"] {
        if let Some(obj) = m[key].as_object() {
            for (k, v) in obj {
                put(&format!("{key}: {k}"), v);
            }
        }
    }
    if rows.is_empty() {
        return;
    }
    o.push_str("<h2>Manifest</h2>\n<table class=\"manifest\">\n");
    for (k, v) in rows {
        putln!(o, "<tr><th>{}</th><td><code>{}</code></td></tr>", esc(&k), esc(&v));
    }
    o.push_str("</table>\n");
}

fn header(run: &Run, o: &mut String, level: &str) {
    let e = &run.experiment;
    let v = run.verdict_word();
    putln!(o, "<{level}>{}</{level}>", esc(&e.title));
    let seed = repro_chaos::timeline::value_text(&run.manifest["seed"]);
    putln!(
        o,
        "<p class=\"meta\"><code>{}</code> v{} · run <code>{}</code> · adapter <code>{}</code>{} · {}</p>",
        esc(&e.id.value),
        e.version,
        esc(&run.id),
        esc(&run.adapter),
        if seed.is_empty() || seed == "null" { String::new() } else { format!(" · seed {}", esc(&seed)) },
        esc(&fmt_secs(run.duration()))
    );
    putln!(
        o,
        "<p><span class=\"verdict {}\">{}</span> <span class=\"reason\">{}</span></p>",
        verdict_class(&v),
        esc(&v),
        esc(&run.verdict_reason())
    );
}

/// The self-contained HTML report of a run.
pub fn report(run: &Run) -> String {
    let ch = charts(run, 960.0, 310.0, true);
    let e = &run.experiment;
    let mut o = head(&format!("{} · {} · {}", e.id.value, run.id, run.verdict_word()));
    o.push_str("<body>\n<main>\n");
    header(run, &mut o, "h1");
    putln!(o, "<h2>Hypothesis</h2>\n<blockquote>{}</blockquote>", esc(e.hypothesis.trim()));
    if !e.description.trim().is_empty() {
        putln!(o, "<p>{}</p>", esc(e.description.trim()));
    }
    o.push_str("<h2>Checks</h2>\n");
    check_table(run, &mut o);
    o.push_str("<h2>Timeline</h2>\n<p class=\"meta\">One lane per target and instance (state over time); operations as bands; watcher signals (◆) and check results (●) as marks. Hover for details.</p>\n");
    putln!(o, "<div class=\"scroll\">{}</div>", ch.timeline);
    if !ch.listed.is_empty() {
        o.push_str("<h2>Metrics of the experiment</h2>\n<div class=\"grid\">\n");
        for c in &ch.listed {
            card(&mut o, c);
        }
        o.push_str("</div>\n");
    }
    if !ch.others.is_empty() || !ch.constants.is_empty() {
        o.push_str("<h2>Other scraped families</h2>\n");
        if !ch.others.is_empty() {
            putln!(
                o,
                "<p class=\"meta\">{} families that changed during the run.</p>\n<div class=\"grid\">",
                ch.others.len()
            );
            for c in &ch.others {
                card(&mut o, c);
            }
            o.push_str("</div>\n");
        }
        if !ch.constants.is_empty() {
            putln!(
                o,
                "<details><summary>{} families that held one value the whole run</summary>\n<table>\n<tr><th>target</th><th>family</th><th>series</th><th>value</th></tr>",
                ch.constants.len()
            );
            for k in &ch.constants {
                putln!(
                    o,
                    "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                    esc(&k.target),
                    esc(&k.family),
                    k.series,
                    esc(&k.value)
                );
            }
            o.push_str("</table>\n</details>\n");
        }
    }
    manifest_table(run, &mut o);
    putln!(
        o,
        "<footer>Made by <code>repro chaos report</code> from the run directory <code>{}</code> only.</footer>",
        esc(&run.id)
    );
    o.push_str("</main>\n</body>\n</html>\n");
    o
}

fn card(o: &mut String, c: &Chart) {
    put!(o, "<div class=\"card\" id=\"{}\">{}", esc(&c.slug), c.svg);
    if !c.description.is_empty() {
        put!(o, "<p>{}</p>", esc(&c.description));
    }
    o.push_str("</div>\n");
}

/// The Markdown share page and the SVG files it links: (file name, content), the page first.
pub fn share(run: &Run) -> Vec<(String, String)> {
    let ch = charts(run, 960.0, 420.0, false);
    let e = &run.experiment;
    let mut md = String::new();
    putln!(md, "## {}: **{}**\n", e.title, run.verdict_word());
    putln!(
        md,
        "`{}` v{} · run `{}` · adapter `{}` · {}\n",
        e.id.value,
        e.version,
        run.id,
        run.adapter,
        fmt_secs(run.duration())
    );
    putln!(md, "> {}\n", e.hypothesis.split_whitespace().collect::<Vec<_>>().join(" "));
    putln!(md, "{}\n", run.verdict_reason());
    let checks = run.checks();
    if !checks.is_empty() {
        md.push_str("| check | outcome | issue |\n|---|---|---|\n");
        for c in &checks {
            let (outcome, _) = outcome_cell(c);
            putln!(
                md,
                "| `{}` | {} | {} |",
                c["id"].as_str().unwrap_or("?").replace('|', "\\|"),
                outcome,
                c["issue"].as_str().unwrap_or("").replace('|', "\\|")
            );
        }
        md.push('\n');
        let detailed: Vec<(&Value, Vec<String>)> =
            checks.iter().map(|c| (c, check_details(c))).filter(|(_, d)| !d.is_empty()).collect();
        if !detailed.is_empty() {
            md.push_str("### Check details\n\n");
            for (c, details) in detailed {
                let text = details.join("\n");
                let fence = fence_for(&text);
                putln!(
                    md,
                    "`{}`:\n\n{fence}text\n{text}\n{fence}\n",
                    c["id"].as_str().unwrap_or("?").replace('`', "'")
                );
            }
        }
    }
    let mut files = Vec::new();
    md.push_str("### Timeline\n\n![timeline](timeline.svg)\n\n");
    files.push(("timeline.svg".to_string(), ch.timeline.clone()));
    if !ch.listed.is_empty() {
        md.push_str("### Metrics\n\n");
        for c in &ch.listed {
            let name = format!("{}.svg", c.slug);
            putln!(md, "![{}]({name})", c.title);
            if !c.description.is_empty() {
                putln!(md, "\n{}", c.description);
            }
            md.push('\n');
            files.push((name, c.svg.clone()));
        }
    }
    putln!(md, "<sub>made by `repro chaos share` from the run directory `{}`</sub>", run.id);
    let mut out = vec![("README.md".to_string(), md)];
    out.extend(files);
    out
}

/// The dashboard page: a table of the runs, then one column per run (verdict, checks, timeline, metrics).
/// `links[i]` is where run `i`'s full report is served.
pub fn dashboard(runs: &[Result<Run, ReportError>], links: &[String]) -> String {
    let mut o = head("repro chaos dashboard");
    o.push_str("<body>\n<main style=\"max-width:none\">\n<h1>repro chaos dashboard</h1>\n");
    putln!(o, "<p class=\"meta\">{} runs, read from their run directories on every page load.</p>", runs.len());
    o.push_str("<table class=\"summary\">\n<tr><th>#</th><th>experiment</th><th>run</th><th>adapter</th><th>verdict</th><th>checks ok</th><th>checks not ok</th><th>duration</th><th>operations</th></tr>\n");
    for (i, r) in runs.iter().enumerate() {
        match r {
            Ok(run) => {
                let checks = run.checks();
                let ok = checks.iter().filter(|c| c["outcome"].as_str() == Some("ok")).count();
                let l = run::lanes(run);
                let v = run.verdict_word();
                putln!(
                    o,
                    "<tr><td>{}</td><td><code>{}</code></td><td><a href=\"{}\">{}</a></td><td>{}</td><td><span class=\"verdict {}\">{}</span></td><td>{ok}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    i + 1,
                    esc(&run.experiment.id.value),
                    esc(links.get(i).map(String::as_str).unwrap_or("#")),
                    esc(&run.id),
                    esc(&run.adapter),
                    verdict_class(&v),
                    esc(&v),
                    checks.len() - ok,
                    esc(&fmt_secs(run.duration())),
                    l.bands.len()
                );
            }
            Err(e) => {
                putln!(o, "<tr><td>{}</td><td colspan=\"8\" class=\"bad\">{}</td></tr>", i + 1, esc(&e.to_string()));
            }
        }
    }
    o.push_str("</table>\n");
    let n = runs.len().max(1);
    putln!(
        o,
        "<div class=\"scroll\"><div class=\"runs\" style=\"grid-template-columns: repeat({n}, minmax(560px, 1fr))\">"
    );
    for r in runs.iter() {
        let Ok(run) = r else { continue };
        let ch = charts(run, 640.0, 300.0, false);
        o.push_str("<section class=\"run\">\n");
        header(run, &mut o, "h2");
        let failed: Vec<String> = run
            .checks()
            .iter()
            .filter(|c| c["outcome"].as_str() != Some("ok"))
            .map(|c| format!("{} ({})", c["id"].as_str().unwrap_or("?"), outcome_cell(c).0))
            .collect();
        if !failed.is_empty() {
            putln!(o, "<p class=\"meta\">not ok: {}</p>", esc(&failed.join(", ")));
        }
        putln!(o, "<div class=\"scroll\">{}</div>", ch.timeline);
        for c in &ch.listed {
            card(&mut o, c);
        }
        o.push_str("</section>\n");
    }
    o.push_str("</div></div>\n</main>\n</body>\n</html>\n");
    o
}

#[cfg(test)]
mod fence_tests {
    #[test]
    fn a_fence_is_longer_than_any_backtick_run_in_the_text() {
        assert_eq!(super::fence_for("plain"), "```");
        assert_eq!(super::fence_for("a ``` b"), "````");
        assert_eq!(super::fence_for("`````"), "``````");
    }
}
