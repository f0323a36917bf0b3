//! SVG charts drawn by hand: the timeline (a lane per target and instance, operation bands, marks) and
//! line charts of scraped series. Output depends only on the input: coordinates are printed with a fixed
//! number of decimals and everything is iterated in a fixed order, so the same run gives the same bytes.

use crate::run::{Band, LaneKind, Lanes, Mark, MarkKind, Series};

/// Escapes text for HTML and SVG (element content and attribute values).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// A coordinate with one decimal ("-0.0" never appears).
fn c(x: f64) -> String {
    let v = (x * 10.0).round() / 10.0;
    if v == 0.0 {
        "0".to_string()
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A value for an axis label or a tooltip: short and stable.
pub fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    let a = v.abs();
    let (x, suffix) = if a >= 1e12 {
        (v / 1e12, "T")
    } else if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = if x.fract() == 0.0 || x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}").trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        let s = format!("{x:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    format!("{s}{suffix}")
}

/// Seconds for the time axis and tooltips.
pub fn fmt_secs(t: f64) -> String {
    if t >= 60.0 {
        let m = (t / 60.0).floor();
        format!("{}m{}s", m as u64, fmt_value(((t - m * 60.0) * 10.0).round() / 10.0))
    } else {
        format!("{}s", fmt_value((t * 1000.0).round() / 1000.0))
    }
}

fn tick_step(span: f64, max_ticks: f64) -> f64 {
    const STEPS: [f64; 17] =
        [0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0];
    for s in STEPS {
        if span / s <= max_ticks {
            return s;
        }
    }
    (span / max_ticks / 3600.0).ceil() * 3600.0
}

/// Colour of a lane state.
pub fn state_colour(state: &str) -> &'static str {
    match state {
        "starting" => "#f0ad4e",
        "up" => "#2e9d4f",
        "running" => "#3b7dd8",
        "unhealthy" => "#e07b39",
        "down" => "#d64545",
        "stopped" => "#c4c4c4",
        "frozen" => "#5bc0de",
        "paused" => "#5bc0de",
        "succeeded" => "#a9d8b3",
        "failed" | "killed" => "#f0a3a3",
        "timedout" => "#f5c58f",
        _ => "#d9d9d9",
    }
}

const BAND_FILL: &str = "#7b61ff";
const PALETTE: [&str; 8] = ["#3b7dd8", "#e4572e", "#2e9d4f", "#9b59b6", "#f0ad4e", "#17a2b8", "#8c564b", "#e377c2"];

pub struct TimelineStyle {
    pub width: f64,
}

impl Default for TimelineStyle {
    fn default() -> Self {
        TimelineStyle { width: 960.0 }
    }
}

fn axis(out: &mut String, x0: f64, x1: f64, y_top: f64, y_bottom: f64, end: f64, max_ticks: f64) {
    let span = end.max(0.001);
    let step = tick_step(span, max_ticks);
    let mut i = 0u32;
    loop {
        let t = f64::from(i) * step;
        if t > span + 1e-9 {
            break;
        }
        let x = x0 + (x1 - x0) * t / span;
        let anchor = if i == 0 { "start" } else { "middle" };
        put!(
            out,
            r##"<line x1="{x}" y1="{yt}" x2="{x}" y2="{yb}" stroke="#e4e4e4"/><text x="{x}" y="{ty}" text-anchor="{anchor}" fill="#666">{l}</text>"##,
            x = c(x),
            yt = c(y_top),
            yb = c(y_bottom),
            ty = c(y_bottom + 12.0),
            l = esc(&fmt_secs(t))
        );
        i += 1;
    }
}

/// The timeline chart.
/// The least distance between two marks of a row, in px (a check mark is 8 px wide).
const MARK_GAP: f64 = 9.0;

/// The x of each mark: its time's, moved right as far as needed to keep [`MARK_GAP`] from the mark before it in
/// its row (signals in one row, checks and errors in the other), in time order.
fn dodge(marks: &[Mark], xt: &dyn Fn(f64) -> f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..marks.len()).collect();
    order.sort_by(|&a, &b| marks[a].t.total_cmp(&marks[b].t));
    let mut xs = vec![0.0; marks.len()];
    let mut last: [Option<f64>; 2] = [None, None];
    for i in order {
        let row = usize::from(marks[i].kind != MarkKind::Signal);
        let mut x = xt(marks[i].t);
        if let Some(prev) = last[row] {
            x = x.max(prev + MARK_GAP);
        }
        last[row] = Some(x);
        xs[i] = x;
    }
    xs
}

pub fn timeline(l: &Lanes, style: &TimelineStyle) -> String {
    let left = 160.0;
    let right = 12.0;
    let row = 20.0;
    let top = 8.0;
    let x0 = left;
    let x1 = style.width - right;
    let end = l.end.max(0.001);
    let xt = |t: f64| x0 + (x1 - x0) * (t.clamp(0.0, end) / end);
    let rows = 1 + l.lanes.len() + 2;
    let chart_bottom = top + row * rows as f64;
    let mut states: Vec<&str> = Vec::new();
    for lane in &l.lanes {
        for s in &lane.segments {
            if !states.contains(&s.state.as_str()) {
                states.push(&s.state);
            }
        }
    }
    // The legend: one entry per state drawn, then the operation swatch; wrapped to the chart's width.
    let mut entries: Vec<(String, &str, &str)> =
        states.iter().map(|st| (st.to_string(), state_colour(st), "1")).collect();
    if !l.bands.is_empty() {
        entries.push(("operation".to_string(), BAND_FILL, "0.35"));
    }
    let mut placed: Vec<(f64, f64, usize)> = Vec::new();
    let (mut lx, mut ly) = (left, chart_bottom + 30.0);
    for (i, (label, _, _)) in entries.iter().enumerate() {
        let w = 24.0 + 6.5 * label.len() as f64;
        if lx + w > style.width - right && lx > left {
            lx = left;
            ly += 16.0;
        }
        placed.push((lx, ly, i));
        lx += w;
    }
    let height = ly + 14.0;
    let mut o = String::new();
    put!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart timeline" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11" role="img" aria-label="timeline">"#,
        w = c(style.width),
        h = c(height)
    );
    o.push_str(
        "<title>Timeline: lanes per target and instance, operations as bands, signals and checks as marks</title>",
    );
    // Row backgrounds and labels.
    let mut labels: Vec<(String, &str)> = vec![("operations".to_string(), "#555")];
    for lane in &l.lanes {
        let kind = match lane.kind {
            LaneKind::Target => "#222",
            LaneKind::Instance => "#335",
        };
        labels.push((lane.name.clone(), kind));
    }
    labels.push(("signals".to_string(), "#555"));
    labels.push(("checks".to_string(), "#555"));
    for (i, (name, colour)) in labels.iter().enumerate() {
        let y = top + row * i as f64;
        if i % 2 == 0 {
            put!(o, r##"<rect x="0" y="{}" width="{}" height="{}" fill="#f7f7f9"/>"##, c(y), c(style.width), c(row));
        }
        let shown: String = if name.chars().count() > 24 {
            format!("{}…", name.chars().take(23).collect::<String>())
        } else {
            name.clone()
        };
        let italic = if i == 0 || i + 2 >= labels.len() { r#" font-style="italic""# } else { "" };
        put!(
            o,
            r#"<text x="6" y="{}" fill="{colour}"{italic}><title>{}</title>{}</text>"#,
            c(y + row * 0.68),
            esc(name),
            esc(&shown)
        );
    }
    axis(&mut o, x0, x1, top, chart_bottom, end, 10.0);
    // Operation bands across every lane, and their bars in the operations row.
    // In start order, so that a label is drawn only where the one before it left room (its band's title keeps
    // it on hover): labels of overlapping or close operations are never drawn over each other.
    let mut by_start: Vec<&Band> = l.bands.iter().collect();
    by_start.sort_by(|a, b| a.start.total_cmp(&b.start));
    let mut label_floor = f64::MIN;
    for b in by_start {
        band(&mut o, b, &xt, l.end, top, chart_bottom, row, &mut label_floor, style.width);
    }
    // Lanes.
    for (i, lane) in l.lanes.iter().enumerate() {
        let y = top + row * (i + 1) as f64 + 4.0;
        for s in &lane.segments {
            let xa = xt(s.start);
            let w = (xt(s.end) - xa).max(1.0);
            put!(
                o,
                r#"<rect class="seg" x="{}" y="{}" width="{}" height="{}" fill="{}" rx="2"><title>{}: {} from {} to {}</title></rect>"#,
                c(xa),
                c(y),
                c(w),
                c(row - 8.0),
                state_colour(&s.state),
                esc(&lane.name),
                esc(&s.state),
                fmt_secs(s.start),
                fmt_secs(s.end)
            );
        }
    }
    // Marks.
    let sig_y = top + row * (l.lanes.len() + 1) as f64 + row / 2.0;
    let chk_y = sig_y + row;
    // Marks at (nearly) the same time would be drawn on top of each other and read as one: each is drawn at
    // least MARK_GAP px right of the previous one in its row (its title keeps the true time).
    let xs = dodge(&l.marks, &xt);
    for (m, x) in l.marks.iter().zip(xs) {
        match m.kind {
            MarkKind::Signal => {
                put!(
                    o,
                    r##"<path class="mark signal" d="M{} {}l5 5l-5 5l-5 -5z" fill="#9b59b6"><title>{} at {}</title></path>"##,
                    c(x),
                    c(sig_y - 5.0),
                    esc(&m.label),
                    fmt_secs(m.t)
                );
            }
            MarkKind::CheckOk | MarkKind::CheckFailed => {
                let fill = if m.kind == MarkKind::CheckOk { "#2e9d4f" } else { "#d64545" };
                put!(
                    o,
                    r#"<circle class="mark check" cx="{}" cy="{}" r="4" fill="{fill}" fill-opacity="0.8"><title>{} at {}</title></circle>"#,
                    c(x),
                    c(chk_y),
                    esc(&m.label),
                    fmt_secs(m.t)
                );
            }
            MarkKind::Error => {
                put!(
                    o,
                    r##"<path class="mark error" d="M{a} {b}l8 8m0 -8l-8 8" stroke="#d64545" stroke-width="2.5"><title>{} at {}</title></path>"##,
                    esc(&m.label),
                    fmt_secs(m.t),
                    a = c(x - 4.0),
                    b = c(chk_y - 4.0)
                );
            }
        }
    }
    // Legend.
    for (x, y, i) in placed {
        let (label, colour, opacity) = &entries[i];
        put!(
            o,
            r##"<rect x="{}" y="{}" width="12" height="10" fill="{colour}" fill-opacity="{opacity}" rx="2"/><text x="{}" y="{}" fill="#444">{}</text>"##,
            c(x),
            c(y - 9.0),
            c(x + 16.0),
            c(y),
            esc(label)
        );
    }
    o.push_str("</svg>");
    o
}

#[allow(clippy::too_many_arguments)]
fn band(
    o: &mut String,
    b: &Band,
    xt: &dyn Fn(f64) -> f64,
    run_end: f64,
    top: f64,
    bottom: f64,
    row: f64,
    label_floor: &mut f64,
    right: f64,
) {
    let xa = xt(b.start);
    let w = (xt(b.end_or(run_end)) - xa).max(2.0);
    let label = format!(
        "{} #{} ({}){}: {} to {}",
        b.operation,
        b.run,
        b.uses,
        if b.hits.is_empty() { String::new() } else { format!(" on {}", b.hits.join(", ")) },
        fmt_secs(b.start),
        fmt_secs(b.end_or(run_end))
    );
    put!(
        o,
        r#"<rect class="band" x="{}" y="{}" width="{}" height="{}" fill="{BAND_FILL}" fill-opacity="0.10"/>"#,
        c(xa),
        c(top + row),
        c(w),
        c(bottom - top - row)
    );
    put!(
        o,
        r#"<rect class="op" x="{}" y="{}" width="{}" height="{}" fill="{BAND_FILL}" fill-opacity="0.6" rx="2"><title>{}</title></rect>"#,
        c(xa),
        c(top + 3.0),
        c(w),
        c(row - 6.0),
        esc(&label)
    );
    // After the bar; where the chart ends first, before it (right-aligned); else cut to the room there is.
    let after = xa + w + 3.0;
    let width = label_width(&b.operation);
    let (x, anchor, text) = if after + width <= right {
        (after, "start", b.operation.clone())
    } else if xa - 3.0 - width >= label_floor.max(0.0) {
        (xa - 3.0, "end", b.operation.clone())
    } else {
        let room = ((right - after) / 6.0).floor() as usize;
        let t: String = b.operation.chars().take(room.saturating_sub(1)).collect();
        (after, "start", format!("{t}…"))
    };
    let left = if anchor == "end" { x - width } else { x };
    if left >= *label_floor && text.chars().count() >= 4 {
        put!(
            o,
            r##"<text class="op-label" x="{}" y="{}" fill="#333" font-size="10" text-anchor="{anchor}">{}</text>"##,
            c(x),
            c(top + row * 0.68),
            esc(&text)
        );
        *label_floor = left + label_width(&text) + 4.0;
    }
}

/// The width of `text` at font-size 10 in a sans-serif face, over-estimated (6 px a character).
fn label_width(text: &str) -> f64 {
    6.0 * text.chars().count() as f64
}

/// At most the first, lowest, highest and last point of each pixel column, in time order: a line with
/// thousands of points draws the same and weighs a few hundred.
fn thin(points: &[(f64, f64)], width_px: f64) -> Vec<(f64, f64)> {
    if points.len() as f64 <= 4.0 * width_px {
        return points.to_vec();
    }
    let mut out: Vec<(f64, f64)> = Vec::new();
    let mut i = 0;
    while i < points.len() {
        let col = points[i].0.floor();
        let mut j = i;
        let (mut lo, mut hi) = (i, i);
        while j < points.len() && points[j].0.floor() == col {
            if points[j].1 < points[lo].1 {
                lo = j;
            }
            if points[j].1 > points[hi].1 {
                hi = j;
            }
            j += 1;
        }
        let mut keep = vec![i, lo, hi, j - 1];
        keep.sort_unstable();
        keep.dedup();
        out.extend(keep.into_iter().map(|k| points[k]));
        i = j;
    }
    out
}

/// A line chart of `series` over `[0, end]`, with the operation bands shaded and failed scrapes as red ticks.
pub struct LineChart<'a> {
    pub title: &'a str,
    pub subtitle: &'a str,
    pub series: &'a [Series],
    pub bands: &'a [Band],
    pub errors: &'a [(f64, String)],
    pub end: f64,
    pub width: f64,
    pub height: f64,
    pub max_series: usize,
}

pub fn line_chart(ch: &LineChart) -> String {
    let left = 46.0;
    let right = 8.0;
    let top = 30.0;
    let plot_h = ch.height;
    let shown: Vec<&Series> = ch.series.iter().take(ch.max_series).collect();
    let legend_lines = shown.len() + usize::from(ch.series.len() > shown.len());
    let legend_top = top + plot_h + 28.0;
    let total_h = legend_top + 12.0 * legend_lines as f64 + 4.0;
    let x0 = left;
    let x1 = ch.width - right;
    let end = ch.end.max(0.001);
    let xt = |t: f64| x0 + (x1 - x0) * (t.clamp(0.0, end) / end);
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for s in &shown {
        for &(_, v) in &s.points {
            if v.is_finite() {
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
    }
    if !lo.is_finite() {
        lo = 0.0;
        hi = 1.0;
    }
    if hi - lo < 1e-12 {
        let pad = if lo.abs() > 1e-12 { lo.abs() * 0.1 } else { 1.0 };
        lo -= pad;
        hi += pad;
        if lo < 0.0 && ch.series.iter().all(|s| s.points.iter().all(|p| p.1 >= 0.0)) {
            lo = 0.0;
        }
    }
    let yb = top + plot_h;
    let yv = |v: f64| yb - plot_h * ((v - lo) / (hi - lo));
    let mut o = String::new();
    put!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart metric" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="10" role="img" aria-label="{t}">"#,
        w = c(ch.width),
        h = c(total_h),
        t = esc(ch.title)
    );
    put!(
        o,
        r##"<text x="4" y="12" font-size="12" font-weight="bold" fill="#222">{}</text><text x="4" y="24" fill="#666">{}</text>"##,
        esc(ch.title),
        esc(ch.subtitle)
    );
    put!(
        o,
        r##"<rect x="{}" y="{}" width="{}" height="{}" fill="#fbfbfd" stroke="#ddd"/>"##,
        c(x0),
        c(top),
        c(x1 - x0),
        c(plot_h)
    );
    for b in ch.bands {
        let xa = xt(b.start);
        let w = (xt(b.end_or(ch.end)) - xa).max(1.5);
        put!(
            o,
            r#"<rect class="band" x="{}" y="{}" width="{}" height="{}" fill="{BAND_FILL}" fill-opacity="0.15"><title>{} #{} ({})</title></rect>"#,
            c(xa),
            c(top),
            c(w),
            c(plot_h),
            esc(&b.operation),
            b.run,
            esc(&b.uses)
        );
    }
    axis(&mut o, x0, x1, top, yb, end, 5.0);
    for (v, dy) in [(lo, 0.0), ((lo + hi) / 2.0, 3.0), (hi, 8.0)] {
        put!(
            o,
            r##"<text x="{}" y="{}" text-anchor="end" fill="#666">{}</text>"##,
            c(x0 - 3.0),
            c(yv(v) + dy),
            esc(&fmt_value(v))
        );
    }
    for (t, e) in ch.errors {
        put!(
            o,
            r##"<line class="scrape-error" x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#d64545" stroke-width="1.5"><title>scrape failed at {}: {}</title></line>"##,
            c(yb - 6.0),
            c(yb),
            fmt_secs(*t),
            esc(e),
            x = c(xt(*t))
        );
    }
    for (i, s) in shown.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        // A series is broken where a value is not finite.
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for &(t, v) in &s.points {
            if v.is_finite() {
                if let Some(r) = runs.last_mut() {
                    r.push((xt(t), yv(v)));
                }
            } else if runs.last().is_some_and(|r| !r.is_empty()) {
                runs.push(Vec::new());
            }
        }
        let width_px = (x1 - x0).max(1.0);
        for r in runs.iter().filter(|r| !r.is_empty()).map(|r| thin(r, width_px)) {
            if r.len() == 1 {
                put!(o, r#"<circle cx="{}" cy="{}" r="2" fill="{colour}"/>"#, c(r[0].0), c(r[0].1));
                continue;
            }
            let pts: Vec<String> = r.iter().map(|(x, y)| format!("{},{}", c(*x), c(*y))).collect();
            put!(
                o,
                r#"<polyline class="series" points="{}" fill="none" stroke="{colour}" stroke-width="1.5"><title>{}</title></polyline>"#,
                pts.join(" "),
                esc(&s.label())
            );
        }
        let last = s.points.last().map(|p| fmt_value(p.1)).unwrap_or_default(); // no point: no last value
        let label = s.label();
        let label: String = if label.chars().count() > 52 {
            format!("{}…", label.chars().take(51).collect::<String>())
        } else {
            label
        };
        let ly = legend_top + 12.0 * i as f64;
        put!(
            o,
            r##"<rect x="4" y="{}" width="10" height="3" fill="{colour}"/><text x="18" y="{}" fill="#333">{} = {}</text>"##,
            c(ly - 4.0),
            c(ly),
            esc(&label),
            esc(&last)
        );
    }
    if ch.series.len() > shown.len() {
        put!(
            o,
            r##"<text x="4" y="{}" fill="#666">and {} more series</text>"##,
            c(legend_top + 12.0 * shown.len() as f64),
            ch.series.len() - shown.len()
        );
    }
    o.push_str("</svg>");
    o
}

/// A non-linearizable window of a history check (the checker's `window`: `ops` with `process`, `f`, `value`,
/// `result`, `outcome`, `call`, `ret`; `failing`; `start`, `end`): a lane per process, each operation a bar from
/// its call to its return (to the right edge if it never returned), labelled with what it did; the operation
/// that cannot be linearized in red. Times are shown in milliseconds from the window's start.
pub fn history_window(w: &serde_json::Value) -> String {
    use serde_json::Value;
    let Some(ops) = w["ops"].as_array() else { return String::new() };
    let ops: Vec<&Value> = ops.iter().take(50).collect();
    let start = w["start"].as_u64().unwrap_or(0);
    let last_ret = ops.iter().filter_map(|o| o["ret"].as_u64()).max().unwrap_or(start);
    let end = w["end"].as_u64().unwrap_or(last_ret).max(last_ret).max(start + 1);
    let span = (end - start) as f64;
    let proc_name = |o: &Value| match &o["process"] {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    let mut lanes: Vec<String> = Vec::new();
    for o in &ops {
        let p = proc_name(o);
        if !lanes.contains(&p) {
            lanes.push(p);
        }
    }
    let (left, width, lane_h) = (110.0, 560.0, 26.0);
    let height = 24.0 + lane_h * lanes.len() as f64 + 18.0;
    let x = |t: u64| left + width * (t.saturating_sub(start) as f64 / span).min(1.0);
    let failing = (&w["failing"]["process"], &w["failing"]["call"], &w["failing"]["line"]);
    let mut o = format!(
        "<svg class=\"history-window\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"the smallest non-linearizable window\">",
        c(left + width + 10.0),
        c(height),
        c(left + width + 10.0),
        c(height)
    );
    o.push_str(&format!(
        "<text x=\"0\" y=\"14\" font-size=\"11\" fill=\"#555\">{} operations, {} ms; red: the operation at whose return the history stops being linearizable</text>",
        ops.len(),
        fmt_value(span / 1e6)
    ));
    for (i, l) in lanes.iter().enumerate() {
        let y = 24.0 + lane_h * i as f64;
        o.push_str(&format!(
            "<text x=\"0\" y=\"{}\" font-size=\"11\" font-family=\"monospace\">{}</text><line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#ddd\"/>",
            c(y + 15.0),
            esc(l),
            c(left),
            c(y + lane_h - 2.0),
            c(left + width),
            c(y + lane_h - 2.0)
        ));
    }
    for op in &ops {
        let lane = lanes.iter().position(|l| *l == proc_name(op)).unwrap_or(0);
        let y = 24.0 + lane_h * lane as f64 + 3.0;
        let call = op["call"].as_u64().unwrap_or(start);
        let (x0, x1) = (x(call), op["ret"].as_u64().map_or(left + width, x));
        let is_failing = (&op["process"], &op["call"], &op["line"]) == failing;
        let f = op["f"].as_str().unwrap_or("?");
        let shown = if op["outcome"] == "ok" && f == "read" { &op["result"] } else { &op["value"] };
        let label = format!("{} {}", f, shown);
        let (fill, stroke) = if is_failing { ("#f8d0d0", "#c0392b") } else { ("#dbe8f8", "#3b7dd8") };
        let tip = format!(
            "{} {} {} -> {} ({}), {} .. {}",
            proc_name(op),
            f,
            op["value"],
            op["result"],
            op["outcome"].as_str().unwrap_or("?"),
            call,
            op["ret"].as_u64().map_or("never returned".to_string(), |r| r.to_string())
        );
        o.push_str(&format!(
            "<g><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"18\" rx=\"3\" fill=\"{fill}\" stroke=\"{stroke}\"/><text x=\"{}\" y=\"{}\" font-size=\"10\" font-family=\"monospace\">{}</text></g>",
            esc(&tip),
            c(x0),
            c(y),
            c((x1 - x0).max(2.0)),
            c(x0 + 3.0),
            c(y + 13.0),
            esc(&label)
        ));
    }
    o.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#555\">0 ms</text><text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#555\" text-anchor=\"end\">{} ms</text></svg>",
        c(left),
        c(height - 4.0),
        c(left + width),
        c(height - 4.0),
        fmt_value(span / 1e6)
    ));
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_at_the_same_time_are_drawn_apart_in_their_row() {
        let mark = |t: f64, kind: MarkKind| Mark { t, kind, label: String::new() };
        let marks = [
            mark(1.0, MarkKind::CheckOk),
            mark(1.0, MarkKind::CheckFailed),
            mark(1.0, MarkKind::Signal),
            mark(0.5, MarkKind::Error),
            mark(1.0, MarkKind::CheckOk),
            mark(9.0, MarkKind::CheckOk),
        ];
        let xs = dodge(&marks, &|t| 100.0 + t * 10.0);
        // In time order within the checks row: the error at 105, then the three at 110 spread out.
        assert_eq!(xs[3], 105.0);
        assert_eq!(xs[0], 114.0);
        assert_eq!(xs[1], 123.0);
        assert_eq!(xs[4], 132.0);
        // The signal row is its own: the signal stays at its time.
        assert_eq!(xs[2], 110.0);
        // A mark far enough away is not moved.
        assert_eq!(xs[5], 190.0);
    }

    #[test]
    fn operation_labels_stay_inside_the_chart() {
        let long = "an-operation-with-a-very-long-name-indeed".to_string();
        let b = Band {
            operation: long.clone(),
            run: 1,
            uses: "kill".into(),
            start: 99.0,
            end: Some(99.5),
            reverted: false,
            hits: vec![],
        };
        let l = Lanes { lanes: vec![], bands: vec![b], marks: vec![], end: 100.0 };
        let style = TimelineStyle::default();
        let svg = timeline(&l, &style);
        let t = svg.split("class=\"op-label\"").nth(1).expect("a label");
        let x: f64 = t.split("x=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
        assert!(t.contains("text-anchor=\"end\""), "placed before its bar: {t}");
        assert!(x <= style.width && x - label_width(&long) >= 0.0, "{x}");
    }

    #[test]
    fn operation_labels_are_never_drawn_over_each_other() {
        let band = |op: &str, start: f64| Band {
            operation: op.into(),
            run: 1,
            uses: "kill".into(),
            start,
            end: Some(start + 0.1),
            reverted: false,
            hits: vec![],
        };
        let labels = |bands: Vec<Band>| {
            let l = Lanes { lanes: vec![], bands, marks: vec![], end: 100.0 };
            let svg = timeline(&l, &TimelineStyle::default());
            svg.matches("class=\"op-label\"").count()
        };
        // Three operations at the same moment: one label (each band's title still names its operation).
        assert_eq!(labels(vec![band("kill-primary", 10.0), band("kill-replica", 10.0), band("freeze", 10.2)]), 1);
        // Far apart: each has its label.
        assert_eq!(labels(vec![band("kill-primary", 10.0), band("kill-replica", 50.0), band("freeze", 90.0)]), 3);
        // Given out of order, the earliest is the one labelled.
        let l =
            Lanes { lanes: vec![], bands: vec![band("later", 10.5), band("first", 10.0)], marks: vec![], end: 100.0 };
        let svg = timeline(&l, &TimelineStyle::default());
        assert!(svg.contains(">first</text>") && !svg.contains(">later</text>"), "{svg}");
    }

    #[test]
    fn values_are_short_and_stable() {
        assert_eq!(fmt_value(0.0), "0");
        assert_eq!(fmt_value(1.5), "1.5");
        assert_eq!(fmt_value(12345.0), "12.35k");
        assert_eq!(fmt_value(2_500_000.0), "2.5M");
        assert_eq!(fmt_value(0.00012), "0.0001");
        assert_eq!(fmt_value(f64::NAN), "NaN");
        assert_eq!(fmt_secs(75.5), "1m15.5s");
        assert_eq!(c(-0.01), "0");
        assert_eq!(c(3.04), "3");
        assert_eq!(esc("<a&\"b'>"), "&lt;a&amp;&quot;b&#39;&gt;");
    }

    #[test]
    fn thinning_keeps_each_columns_extremes_in_order() {
        let pts: Vec<(f64, f64)> = (0..1000).map(|i| (f64::from(i) / 100.0, f64::from(i % 7))).collect();
        let t = thin(&pts, 10.0);
        assert!(t.len() <= 40, "{}", t.len());
        assert!(t.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(t.first(), pts.first());
        assert_eq!(t.last(), pts.last());
        assert!(t.iter().any(|p| p.1 == 6.0) && t.iter().any(|p| p.1 == 0.0));
        assert_eq!(thin(&pts[..30], 10.0), pts[..30].to_vec());
    }

    #[test]
    fn ticks_fit() {
        assert_eq!(tick_step(3.9, 10.0), 0.5);
        assert_eq!(tick_step(100.0, 10.0), 10.0);
        assert_eq!(tick_step(100000.0, 10.0), 3600.0 * 3.0);
    }

    #[test]
    fn a_history_window_is_a_lane_per_process_with_the_failing_op_in_red() {
        let w = serde_json::json!({
            "start": 1000, "end": 5000,
            "ops": [
                {"process": "writer-0", "f": "write", "value": 17, "result": null, "outcome": "ok", "call": 1000, "ret": 3000, "line": 4},
                {"process": "reader-1", "f": "read", "value": null, "result": 15, "outcome": "ok", "call": 2000, "ret": 4000, "line": 21},
                {"process": 3, "f": "write", "value": 9, "result": null, "outcome": "info", "call": 2500, "ret": null, "line": 7}
            ],
            "failing": {"process": "reader-1", "f": "read", "call": 2000, "line": 21}
        });
        let s = history_window(&w);
        assert_eq!(s.matches("<rect").count(), 3);
        assert_eq!(s.matches("#c0392b").count(), 1, "one failing op");
        assert!(
            s.contains(">read 15<") && s.contains(">write 17<") && s.contains(">writer-0<") && s.contains(">3<"),
            "{s}"
        );
        assert!(s.contains("never returned"));
        assert_eq!(s, history_window(&w), "the same window, the same bytes");
        assert_eq!(history_window(&serde_json::json!({"ops": "x"})), "");
    }
}
