//! `repro chaos export`: the scraped metrics and the timeline as OpenMetrics text with timestamps, for
//! `promtool tsdb create-blocks-from openmetrics` (and so Prometheus and Grafana).
//!
//! Every series gets the labels `chaos_experiment`, `chaos_run` and, for scraped samples, `chaos_target`.
//! The timeline becomes these families (gauges are 1 while true, 0 after):
//! `chaos_lane_state{chaos_lane, chaos_lane_kind, state}`, `chaos_operation_active{operation, uses, run_no}`,
//! `chaos_timeline_events_total{event}` (a counter), `chaos_check_passed{check, scope}` and
//! `chaos_run_verdict{verdict}`.
use std::collections::BTreeMap;

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::run::{self, LaneKind, Run};

type Labels = Vec<(String, String)>;

#[derive(Default)]
struct Family {
    kind: String,
    help: String,
    /// (sample name, labels) -> (timestamp in ms, value), sorted and de-duplicated on write.
    series: BTreeMap<(String, Labels), Vec<(i64, f64)>>,
}

fn unix_ms(ts: &str) -> Option<i64> {
    let d = OffsetDateTime::parse(ts, &Rfc3339).ok()?;
    Some((d.unix_timestamp_nanos() / 1_000_000) as i64)
}

fn esc_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn om_type(t: &str) -> &'static str {
    match t {
        "counter" => "counter",
        "gauge" => "gauge",
        "summary" => "summary",
        "histogram" => "histogram",
        _ => "unknown",
    }
}

fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

struct Builder {
    families: BTreeMap<String, Family>,
    base: Labels,
}

impl Builder {
    fn family(&mut self, name: &str, kind: &str, help: &str) -> &mut Family {
        let f = self.families.entry(name.to_string()).or_default();
        if f.kind.is_empty() {
            f.kind = kind.to_string();
            f.help = help.to_string();
        }
        f
    }

    #[allow(clippy::too_many_arguments)]
    fn push(&mut self, family: &str, kind: &str, help: &str, sample: &str, labels: &[(&str, &str)], ms: i64, v: f64) {
        let mut l = self.base.clone();
        l.extend(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        l.sort();
        self.family(family, kind, help).series.entry((sample.to_string(), l)).or_default().push((ms, v));
    }
}

/// The OpenMetrics text of a run (ends with `# EOF`).
pub fn export(run: &Run) -> String {
    let base: Labels =
        vec![("chaos_experiment".into(), run.experiment.id.value.clone()), ("chaos_run".into(), run.id.clone())];
    let mut b = Builder { families: BTreeMap::new(), base };
    // The wall-clock start: timeline `t` is relative to it.
    let start_ms = run
        .timeline
        .iter()
        .find_map(|e| {
            let t = e["t"].as_f64()?;
            Some(unix_ms(e["ts"].as_str()?)? - (t * 1000.0).round() as i64)
        })
        .or_else(|| run.manifest["started"].as_str().and_then(unix_ms))
        .unwrap_or(0);
    let at = |t: f64| start_ms + (t * 1000.0).round() as i64;

    for (target, m) in &run.metrics {
        for s in &m.scrapes {
            let ms = unix_ms(&s.ts).unwrap_or_else(|| at(s.t));
            for x in &s.samples {
                let fam = repro_chaos::prom::family_of(&x.name, &m.types).to_string();
                let kind = om_type(m.types.get(&fam).map(String::as_str).unwrap_or("untyped"));
                // OpenMetrics names a counter family without its `_total`; samples keep their names.
                let (fam, kind) = if kind == "counter" {
                    match fam.strip_suffix("_total") {
                        Some(base) if x.name.ends_with("_total") => (base.to_string(), kind),
                        _ if x.name.ends_with("_total") => (fam, kind),
                        // A counter sample without `_total` is not valid OpenMetrics: keep it as unknown.
                        _ => (fam, "unknown"),
                    }
                } else {
                    (fam, kind)
                };
                let mut labels: Vec<(&str, &str)> = x
                    .labels
                    .iter()
                    .filter(|(k, _)| !k.starts_with("chaos_"))
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                labels.push(("chaos_target", target));
                b.push(&fam, kind, "", &x.name, &labels, ms, x.value);
            }
        }
    }

    let lanes = run::lanes(run);
    for lane in &lanes.lanes {
        let kind = match lane.kind {
            LaneKind::Target => "target",
            LaneKind::Instance => "instance",
        };
        for s in &lane.segments {
            let labels = [("chaos_lane", lane.name.as_str()), ("chaos_lane_kind", kind), ("state", s.state.as_str())];
            let help = "1 while the lane (a target or an instance) is in this state";
            b.push("chaos_lane_state", "gauge", help, "chaos_lane_state", &labels, at(s.start), 1.0);
            b.push("chaos_lane_state", "gauge", help, "chaos_lane_state", &labels, at(s.end), 0.0);
        }
    }
    for band in &lanes.bands {
        let run_no = band.run.to_string();
        let labels =
            [("operation", band.operation.as_str()), ("uses", band.uses.as_str()), ("run_no", run_no.as_str())];
        let help = "1 while the operation runs";
        b.push("chaos_operation_active", "gauge", help, "chaos_operation_active", &labels, at(band.start), 1.0);
        b.push(
            "chaos_operation_active",
            "gauge",
            help,
            "chaos_operation_active",
            &labels,
            at(band.end_or(lanes.end)),
            0.0,
        );
    }
    let mut counts: BTreeMap<String, f64> = BTreeMap::new();
    for e in &run.timeline {
        let (Some(t), Some(ev)) = (e["t"].as_f64(), e["event"].as_str()) else { continue };
        let n = counts.entry(ev.to_string()).or_insert(0.0);
        *n += 1.0;
        let n = *n;
        b.push(
            "chaos_timeline_events",
            "counter",
            "timeline events so far",
            "chaos_timeline_events_total",
            &[("event", ev)],
            at(t),
            n,
        );
        if ev == "check.finished" {
            let check = e["check"].as_str().unwrap_or("?");
            let scope = e["scope"].as_str().unwrap_or("");
            let ok = if e["ok"].as_bool() == Some(true) { 1.0 } else { 0.0 };
            b.push(
                "chaos_check_passed",
                "gauge",
                "1 if the check passed",
                "chaos_check_passed",
                &[("check", check), ("scope", scope)],
                at(t),
                ok,
            );
        }
        if ev == "run.finished" {
            let v = e["verdict"].as_str().unwrap_or("?");
            b.push(
                "chaos_run_verdict",
                "gauge",
                "the verdict of the run",
                "chaos_run_verdict",
                &[("verdict", v)],
                at(t),
                1.0,
            );
        }
    }
    if let Some(v) = &run.verdict {
        // A later evaluation (or a verdict without run.finished) still shows up.
        if !run.timeline.iter().any(|e| e["event"].as_str() == Some("run.finished")) {
            let word = v["verdict"].as_str().unwrap_or("?");
            b.push(
                "chaos_run_verdict",
                "gauge",
                "the verdict of the run",
                "chaos_run_verdict",
                &[("verdict", word)],
                at(lanes.end),
                1.0,
            );
        }
    }

    let mut o = String::new();
    for (name, f) in &b.families {
        putln!(o, "# TYPE {name} {}", f.kind);
        if !f.help.is_empty() {
            putln!(o, "# HELP {name} {}", f.help.replace('\\', "\\\\").replace('\n', "\\n"));
        }
        for ((sample, labels), points) in &f.series {
            let mut pts = points.clone();
            pts.sort_by_key(|p| p.0);
            // One value per millisecond: the last one recorded.
            let mut dedup: Vec<(i64, f64)> = Vec::with_capacity(pts.len());
            for p in pts {
                match dedup.last_mut() {
                    Some(last) if last.0 == p.0 => *last = p,
                    _ => dedup.push(p),
                }
            }
            let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", esc_label(v))).collect();
            for (ms, v) in dedup {
                putln!(
                    o,
                    "{sample}{{{}}} {} {}.{:03}",
                    l.join(","),
                    fmt_value(v),
                    ms.div_euclid(1000),
                    ms.rem_euclid(1000)
                );
            }
        }
    }
    o.push_str("# EOF\n");
    o
}
