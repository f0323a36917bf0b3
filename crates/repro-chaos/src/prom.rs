//! A parser for the Prometheus text exposition format (version 0.0.4) and the scrape of an exporter on the
//! loopback (HTTP through ureq).
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// One sample: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The result of parsing one exposition: samples and family types (`# TYPE`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    pub samples: Vec<Sample>,
    pub types: BTreeMap<String, String>,
}

/// A parse error with its 1-based line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse::<f64>().ok(),
    }
}

/// Parses the text format. Comments other than `# TYPE` are ignored; timestamps are accepted and dropped.
pub fn parse(text: &str) -> Result<Exposition, ParseError> {
    let mut out = Exposition::default();
    for (i, raw) in text.lines().enumerate() {
        let lineno = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let err = |m: &str| ParseError { line: lineno, message: m.to_string() };
        if let Some(rest) = line.strip_prefix('#') {
            let mut parts = rest.split_whitespace();
            if parts.next() == Some("TYPE") {
                let name = parts.next().ok_or_else(|| err("TYPE without a metric name"))?;
                let ty = parts.next().ok_or_else(|| err("TYPE without a type"))?;
                out.types.insert(name.to_string(), ty.to_string());
            }
            continue;
        }
        let mut chars = line.char_indices().peekable();
        match chars.peek() {
            Some(&(_, c)) if is_name_start(c) => {}
            _ => return Err(err("expected a metric name")),
        }
        let mut name_end = line.len();
        for (idx, c) in line.char_indices() {
            if !is_name_char(c) {
                name_end = idx;
                break;
            }
        }
        let name = &line[..name_end];
        let mut rest = &line[name_end..];
        let mut labels = BTreeMap::new();
        if let Some(after) = rest.strip_prefix('{') {
            let (parsed, remaining) = parse_labels(after, lineno)?;
            labels = parsed;
            rest = remaining;
        }
        let mut fields = rest.split_whitespace();
        let v = fields.next().ok_or_else(|| err("expected a value"))?;
        let value = parse_value(v).ok_or_else(|| err(&format!("invalid value {v:?}")))?;
        if let Some(ts) = fields.next() {
            if ts.parse::<i64>().is_err() {
                return Err(err(&format!("invalid timestamp {ts:?}")));
            }
        }
        if fields.next().is_some() {
            return Err(err("unexpected text after the value"));
        }
        out.samples.push(Sample { name: name.to_string(), labels, value });
    }
    Ok(out)
}

/// Parses `a="x",b="y"}` (of line `line`) and returns the labels and what follows `}`.
fn parse_labels(s: &str, line: usize) -> Result<(BTreeMap<String, String>, &str), ParseError> {
    let err = |message: String| ParseError { line, message };
    let mut labels = BTreeMap::new();
    let bytes: Vec<char> = s.chars().collect();
    let mut i = 0;
    let byte_offset = |i: usize| s.char_indices().nth(i).map(|(b, _)| b).unwrap_or(s.len());
    loop {
        while i < bytes.len() && bytes[i].is_whitespace() {
            i += 1;
        }
        if i < bytes.len() && bytes[i] == '}' {
            return Ok((labels, &s[byte_offset(i + 1)..]));
        }
        let start = i;
        while i < bytes.len() && is_name_char(bytes[i]) {
            i += 1;
        }
        if start == i {
            return Err(err("expected a label name".into()));
        }
        let key: String = bytes[start..i].iter().collect();
        while i < bytes.len() && bytes[i].is_whitespace() {
            i += 1;
        }
        if i >= bytes.len() || bytes[i] != '=' {
            return Err(err(format!("expected '=' after label {key}")));
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_whitespace() {
            i += 1;
        }
        if i >= bytes.len() || bytes[i] != '"' {
            return Err(err(format!("expected '\"' to open the value of label {key}")));
        }
        i += 1;
        let mut val = String::new();
        loop {
            if i >= bytes.len() {
                return Err(err(format!("unterminated value of label {key}")));
            }
            match bytes[i] {
                '\\' => {
                    i += 1;
                    match bytes.get(i) {
                        Some('n') => val.push('\n'),
                        Some('\\') => val.push('\\'),
                        Some('"') => val.push('"'),
                        Some(c) => {
                            val.push('\\');
                            val.push(*c);
                        }
                        None => return Err(err(format!("unterminated value of label {key}"))),
                    }
                }
                '"' => {
                    i += 1;
                    break;
                }
                c => val.push(c),
            }
            i += 1;
        }
        labels.insert(key, val);
        while i < bytes.len() && bytes[i].is_whitespace() {
            i += 1;
        }
        match bytes.get(i) {
            Some(',') => i += 1,
            Some('}') => {}
            _ => return Err(err("expected ',' or '}' after a label".into())),
        }
    }
}

/// The family a sample belongs to, given the declared types (`x_bucket` belongs to histogram `x`).
pub fn family_of<'a>(name: &'a str, types: &BTreeMap<String, String>) -> &'a str {
    if types.contains_key(name) {
        return name;
    }
    for suffix in ["_bucket", "_sum", "_count", "_total", "_created", "_info"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if types.contains_key(base) {
                return base;
            }
        }
    }
    name
}

/// The largest scrape response read (bytes).
pub const MAX_BODY: usize = 8 << 20;

/// The most samples one scrape records; a larger exposition is recorded as a failed scrape.
pub const MAX_SAMPLES: usize = 100_000;

/// Why a scrape failed; every variant names the URL.
#[derive(Debug, thiserror::Error)]
pub enum PromError {
    #[error("{url}: only http:// URLs are supported")]
    Scheme { url: String },
    #[error("{url}: expected http://127.0.0.1:<port>/path")]
    Address { url: String },
    #[error("{url}: only loopback addresses may be scraped")]
    NotLoopback { url: String },
    #[error("{url}: HTTP status {status}{}", reason_text(*reason))]
    Status { url: String, status: u16, reason: Option<&'static str> },
    #[error("{url}: the response is larger than {MAX_BODY} bytes")]
    TooLarge { url: String },
    /// The whole exchange took longer than its limit (twice the timeout).
    #[error("{url}: the response took longer than {limit:?}")]
    Timeout { url: String, limit: Duration },
    /// One step (connecting, a read) took longer than the timeout.
    #[error("{url}: no answer within {after:?} ({phase})")]
    NoAnswer { url: String, phase: ureq::Timeout, after: Duration },
    #[error("{url}: {source}")]
    Http {
        url: String,
        #[source]
        source: ureq::Error,
    },
    #[error("{url}: {source}")]
    Parse {
        url: String,
        #[source]
        source: ParseError,
    },
    #[error("{url}: {count} samples in one scrape, more than the {MAX_SAMPLES} recorded")]
    TooManySamples { url: String, count: usize },
}

/// ` Not Found` for a status with a known reason.
fn reason_text(reason: Option<&'static str>) -> String {
    match reason {
        Some(r) => format!(" {r}"),
        None => String::new(),
    }
}

/// The loopback address and path of `url` (`http://127.0.0.1:<port>/<path>`, `localhost` meaning 127.0.0.1):
/// traffic stays on the loopback, whatever the experiment's adapter writes.
fn loopback_url(url: &str) -> Result<String, PromError> {
    let rest = url.strip_prefix("http://").ok_or_else(|| PromError::Scheme { url: url.to_string() })?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr: SocketAddr =
        hostport.replace("localhost", "127.0.0.1").parse().map_err(|_| PromError::Address { url: url.to_string() })?;
    if !addr.ip().is_loopback() {
        return Err(PromError::NotLoopback { url: url.to_string() });
    }
    Ok(format!("http://{addr}{path}"))
}

/// GETs `url` (loopback only, see [`loopback_url`]) and returns the body as text (invalid UTF-8 replaced).
/// Bounded: at most [`MAX_BODY`] bytes, connecting and each read within `timeout`, the whole response within
/// twice `timeout` (an endpoint that streams without end or drips a byte at a time does not hold the scraper).
/// No proxy and no redirect is followed: a scrape never leaves the loopback.
pub fn get_body(url: &str, timeout: Duration) -> Result<String, PromError> {
    let target = loopback_url(url)?;
    let limit = timeout.saturating_mul(2);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .proxy(None)
        .max_redirects(0)
        .http_status_as_error(false)
        .timeout_connect(Some(timeout))
        .timeout_per_read(Some(timeout))
        .timeout_global(Some(limit))
        .build()
        .into();
    let http = |source: ureq::Error| match source {
        ureq::Error::Timeout(ureq::Timeout::Global) => PromError::Timeout { url: url.to_string(), limit },
        ureq::Error::Timeout(phase) => PromError::NoAnswer { url: url.to_string(), phase, after: timeout },
        ureq::Error::BodyExceedsLimit(_) => PromError::TooLarge { url: url.to_string() },
        source => PromError::Http { url: url.to_string(), source },
    };
    let mut resp = agent.get(&target).header("Accept", "text/plain;version=0.0.4").call().map_err(http)?;
    let status = resp.status();
    if status != ureq::http::StatusCode::OK {
        return Err(PromError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            reason: status.canonical_reason(),
        });
    }
    let body = resp.body_mut().with_config().limit(MAX_BODY as u64).read_to_vec().map_err(http)?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Scrapes `url`: the body of [`get_body`] parsed as a text exposition of at most [`MAX_SAMPLES`] samples.
pub fn scrape(url: &str, timeout: Duration) -> Result<Exposition, PromError> {
    let body = get_body(url, timeout)?;
    let expo = parse(&body).map_err(|source| PromError::Parse { url: url.to_string(), source })?;
    if expo.samples.len() > MAX_SAMPLES {
        return Err(PromError::TooManySamples { url: url.to_string(), count: expo.samples.len() });
    }
    Ok(expo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    #[test]
    fn parses_families_labels_and_special_values() {
        let text = r#"# HELP redis_up Information about the Redis instance
# TYPE redis_up gauge
redis_up 1
# TYPE http_requests_total counter
http_requests_total{method="post",code="200"} 1027 1395066363000
http_requests_total{method="post",code="400"}    3
msg{text="a \"quoted\" \\ line\nnext",} 2.5e3
# TYPE lat histogram
lat_bucket{le="+Inf"} 7
nan_metric NaN
inf_metric -Inf
"#;
        let e = parse(text).unwrap();
        assert_eq!(e.samples.len(), 7);
        assert_eq!(e.types["redis_up"], "gauge");
        assert_eq!(e.samples[1].labels["code"], "200");
        assert_eq!(e.samples[1].value, 1027.0);
        assert_eq!(e.samples[3].labels["text"], "a \"quoted\" \\ line\nnext");
        assert_eq!(e.samples[3].value, 2500.0);
        assert!(e.samples[5].value.is_nan());
        assert_eq!(e.samples[6].value, f64::NEG_INFINITY);
        assert_eq!(family_of("lat_bucket", &e.types), "lat");
        assert_eq!(family_of("http_requests_total", &e.types), "http_requests_total");
    }

    #[test]
    fn reports_bad_lines() {
        assert_eq!(parse("ok 1\n{x=\"1\"} 2").unwrap_err().line, 2);
        assert!(parse("m{a=1} 2").is_err());
        assert!(parse("m{a=\"1\" 2").is_err());
        assert!(parse("m abc").is_err());
        assert!(parse("m").is_err());
        assert!(parse("m 1 2 3").is_err());
    }

    #[test]
    fn refuses_what_is_not_http_on_the_loopback() {
        let e = get_body("http://10.0.0.1:80/metrics", Duration::from_millis(10)).unwrap_err();
        assert!(matches!(e, PromError::NotLoopback { .. }), "{e}");
        assert_eq!(e.to_string(), "http://10.0.0.1:80/metrics: only loopback addresses may be scraped");
        let e = get_body("https://127.0.0.1:1/metrics", Duration::from_millis(10)).unwrap_err();
        assert!(matches!(e, PromError::Scheme { .. }), "{e}");
        let e = get_body("http://exporter:9100/metrics", Duration::from_millis(10)).unwrap_err();
        assert!(matches!(e, PromError::Address { .. }), "{e}");
        assert_eq!(loopback_url("http://localhost:9100").unwrap(), "http://127.0.0.1:9100/");
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,80}") {
            let _ = parse(&s); // any text: samples or a located error, the property is that it returns
        }

        #[test]
        fn round_trips_generated_samples(
            name in "[a-z_][a-z0-9_]{0,10}",
            labels in proptest::collection::btree_map("[a-z_][a-z0-9_]{0,5}", "[ -~]{0,8}", 0..4),
            value in -1e9f64..1e9,
        ) {
            let body: Vec<String> = labels.iter().map(|(k, v)| {
                format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
            }).collect();
            let text = format!("{name}{{{}}} {value}\n", body.join(","));
            let e = parse(&text).unwrap();
            prop_assert_eq!(e.samples.len(), 1);
            prop_assert_eq!(&e.samples[0].name, &name);
            prop_assert_eq!(&e.samples[0].labels, &labels);
            prop_assert_eq!(e.samples[0].value, value);
        }
    }

    /// A one-connection HTTP server on loopback: it reads the request's head, then calls `answer` with the
    /// stream (which writes the whole response, status line included).
    fn serve(answer: impl FnOnce(&mut TcpStream) + Send + 'static) -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && c.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            answer(&mut c);
        });
        format!("http://127.0.0.1:{port}/metrics")
    }

    /// A 200 response head, then `body` written as is.
    fn ok_then(body: impl FnOnce(&mut TcpStream) + Send + 'static) -> String {
        serve(|c| {
            if c.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n").is_ok() {
                body(c);
            }
        })
    }

    /// Regression (fuzz): a chunk that ends inside a UTF-8 character panicked in the hand-written decoder (a
    /// str sliced off a char boundary). Chunk sizes count bytes; the body is joined before it is decoded.
    #[test]
    fn a_chunk_may_end_inside_a_character() {
        let url = serve(|c| {
            let resp: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7\r\nup{x=\"\xc3\r\n6\r\n\xa9\"} 1\n\r\n0\r\n\r\n";
            c.write_all(resp).unwrap();
        });
        let e = scrape(&url, Duration::from_secs(10)).unwrap();
        assert_eq!(e.samples.len(), 1);
        assert_eq!(e.samples[0].labels["x"], "\u{e9}");
        assert_eq!(e.samples[0].value, 1.0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Moved from tests/fuzz.rs with the decoder it tested: an exporter's answer cut into chunks anywhere
        /// (also inside a UTF-8 character) is the body again, now through ureq and a real socket.
        #[test]
        fn chunked_responses_join(body in "\\PC{0,60}", cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..4)) {
            let bytes = body.as_bytes();
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            at.push(0);
            at.push(bytes.len());
            at.sort_unstable();
            at.dedup();
            let mut resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            for w in at.windows(2) {
                resp.extend_from_slice(format!("{:x}\r\n", w[1] - w[0]).as_bytes());
                resp.extend_from_slice(&bytes[w[0]..w[1]]);
                resp.extend_from_slice(b"\r\n");
            }
            resp.extend_from_slice(b"0\r\n\r\n");
            let url = serve(move |c| c.write_all(&resp).unwrap());
            prop_assert_eq!(get_body(&url, Duration::from_secs(10)).unwrap(), body);
        }
    }

    #[test]
    fn a_status_other_than_200_is_an_error_naming_it() {
        let url = serve(|c| {
            c.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno\n").unwrap();
        });
        let e = scrape(&url, Duration::from_secs(10)).unwrap_err();
        assert!(matches!(e, PromError::Status { status: 404, .. }), "{e}");
        assert_eq!(e.to_string(), format!("{url}: HTTP status 404 Not Found"));
    }

    #[test]
    fn a_server_that_never_answers_times_out() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // Holds the connection open without a byte until the client has given up.
        let url = serve(move |_c| {
            let _ = rx.recv(); // the sender is dropped when the test ends: either way the wait is over
        });
        let e = get_body(&url, Duration::from_millis(200)).unwrap_err();
        drop(tx);
        assert!(matches!(e, PromError::NoAnswer { .. } | PromError::Timeout { .. }), "{e:?}");
        // The read times out first; on a machine too busy to connect within 200 ms the whole exchange does.
        let m = e.to_string();
        let read = format!("{url}: no answer within 200ms (");
        let whole = format!("{url}: the response took longer than 400ms");
        assert!(m.starts_with(&read) || m.starts_with(&whole), "{m}");
    }

    #[test]
    fn an_unparsable_body_is_an_error_naming_the_url_and_line() {
        let url = ok_then(|c| {
            c.write_all(b"up 1\nup{ 2\n").unwrap();
        });
        let e = scrape(&url, Duration::from_secs(10)).unwrap_err();
        assert!(matches!(e, PromError::Parse { source: ParseError { line: 2, .. }, .. }), "{e:?}");
        assert!(e.to_string().starts_with(&format!("{url}: line 2: ")), "{e}");
    }

    #[test]
    fn an_endless_response_is_cut_at_the_size_limit() {
        let url = ok_then(|c| {
            let line = "m 1\n".repeat(4096);
            while c.write_all(line.as_bytes()).is_ok() {}
        });
        let e = get_body(&url, Duration::from_secs(10)).unwrap_err();
        assert!(matches!(e, PromError::TooLarge { .. }), "{e:?}");
        assert!(e.to_string().ends_with(&format!("the response is larger than {MAX_BODY} bytes")), "{e}");
    }

    #[test]
    fn a_dripping_response_is_cut_at_twice_the_timeout() {
        // 100 bytes 50 ms apart: each read is within the timeout, the whole is not.
        let url = ok_then(|c| {
            for _ in 0..100 {
                if c.write_all(b"m").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let e = get_body(&url, Duration::from_millis(200)).unwrap_err().to_string();
        assert!(e.contains("the response took longer than 400ms"), "{e}");
    }

    #[test]
    fn a_scrape_reads_the_samples() {
        let url = ok_then(|c| {
            c.write_all(b"# TYPE up gauge\nup{job=\"a\"} 1\n").unwrap();
        });
        let e = scrape(&url, Duration::from_secs(10)).unwrap();
        assert_eq!(e.types["up"], "gauge");
        assert_eq!(
            e.samples,
            vec![Sample { name: "up".into(), labels: [("job".into(), "a".into())].into(), value: 1.0 }]
        );
    }
}
