//! A parser for the Prometheus text exposition format (version 0.0.4) and a tiny HTTP GET for scraping.
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
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
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
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
            let (parsed, remaining) = parse_labels(after).map_err(|m| err(&m))?;
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

/// Parses `a="x",b="y"}` and returns the labels and what follows `}`.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
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
            return Err("expected a label name".into());
        }
        let key: String = bytes[start..i].iter().collect();
        while i < bytes.len() && bytes[i].is_whitespace() {
            i += 1;
        }
        if i >= bytes.len() || bytes[i] != '=' {
            return Err(format!("expected '=' after label {key}"));
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_whitespace() {
            i += 1;
        }
        if i >= bytes.len() || bytes[i] != '"' {
            return Err(format!("expected '\"' to open the value of label {key}"));
        }
        i += 1;
        let mut val = String::new();
        loop {
            if i >= bytes.len() {
                return Err(format!("unterminated value of label {key}"));
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
                        None => return Err(format!("unterminated value of label {key}")),
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
            _ => return Err("expected ',' or '}' after a label".into()),
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

/// GETs `url` (`http://127.0.0.1:<port>/<path>` only: traffic stays on the loopback) and returns the body.
/// The largest scrape response read (bytes).
pub const MAX_BODY: usize = 8 << 20;

/// The most samples one scrape records; a larger exposition is recorded as a failed scrape.
pub const MAX_SAMPLES: usize = 100_000;

pub fn http_get(url: &str, timeout: Duration) -> Result<String, String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| format!("{url}: only http:// URLs are supported"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr: SocketAddr = hostport
        .replace("localhost", "127.0.0.1")
        .parse()
        .map_err(|_| format!("{url}: expected http://127.0.0.1:<port>/path"))?;
    if !addr.ip().is_loopback() {
        return Err(format!("{url}: only loopback addresses may be scraped"));
    }
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("{url}: {e}"))?;
    s.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    let req = format!(
        "GET {path} HTTP/1.0\r\nHost: {hostport}\r\nAccept: text/plain;version=0.0.4\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).map_err(|e| format!("{url}: {e}"))?;
    // Bounded: at most MAX_BODY bytes, and the whole response within twice the timeout (an endpoint that
    // streams without end or drips a byte at a time does not hold the scraper).
    let deadline = std::time::Instant::now() + timeout.saturating_mul(2);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = s.read(&mut chunk).map_err(|e| format!("{url}: {e}"))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_BODY {
            return Err(format!("{url}: the response is larger than {MAX_BODY} bytes"));
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("{url}: the response took longer than {:?}", timeout.saturating_mul(2)));
        }
    }
    parse_response(url, &buf)
}

/// The body of the HTTP/1.x response `buf` to a GET of `url` (the status must be 200; a chunked body is
/// joined). The exporter is outside input: any bytes give a body or an error naming `url`.
pub fn parse_response(url: &str, buf: &[u8]) -> Result<String, String> {
    let split =
        buf.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| format!("{url}: malformed HTTP response"))?;
    let (head, body) = (String::from_utf8_lossy(&buf[..split]), &buf[split + 4..]);
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1).is_none_or(|c| c != "200") {
        return Err(format!("{url}: {status}"));
    }
    if head.lines().any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding: chunked")) {
        return Ok(String::from_utf8_lossy(&dechunk(body)).into_owned());
    }
    Ok(String::from_utf8_lossy(body).into_owned())
}

/// The chunks of a chunked body, joined (bytes: a chunk may end inside a UTF-8 character).
fn dechunk(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size_line = String::from_utf8_lossy(&rest[..eol]);
        let after = &rest[eol + 2..];
        let size = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        if size == 0 || after.len() < size {
            break;
        }
        out.extend_from_slice(&after[..size]);
        rest = &after[size..];
        while let Some(r) = rest.strip_prefix(b"\r\n") {
            rest = r;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    /// Regression (fuzz): a chunk that ends inside a UTF-8 character panicked (a str sliced off a char
    /// boundary); chunk sizes count bytes.
    #[test]
    fn chunks_may_split_a_character() {
        let resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nx \xc3\r\n4\r\n\xa9 1\n\r\n0\r\n\r\n";
        assert_eq!(parse_response("u", resp).unwrap(), "x \u{e9} 1\n");
        assert_eq!(parse_response("u", b"HTTP/1.0 200 OK\r\n\r\nup 1\n").unwrap(), "up 1\n");
        assert_eq!(parse_response("u", b"HTTP/1.0 404 Not Found\r\n\r\n").unwrap_err(), "u: HTTP/1.0 404 Not Found");
        assert!(parse_response("u", b"HTTP/1.0 200").unwrap_err().contains("malformed"));
    }

    #[test]
    fn refuses_non_loopback() {
        assert!(http_get("http://10.0.0.1:80/metrics", Duration::from_millis(10)).unwrap_err().contains("loopback"));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,80}") {
            let _ = parse(&s);
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

    /// A one-connection HTTP server on loopback that writes a header, then calls `body` with the stream.
    fn serve(body: impl FnOnce(&mut TcpStream) + Send + 'static) -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let _ = c.write_all(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n");
            body(&mut c);
        });
        format!("http://127.0.0.1:{port}/metrics")
    }

    #[test]
    fn an_endless_response_is_cut_at_the_size_limit() {
        let url = serve(|c| {
            let line = "m 1\n".repeat(4096);
            while c.write_all(line.as_bytes()).is_ok() {}
        });
        let e = http_get(&url, Duration::from_secs(10)).unwrap_err();
        assert!(e.ends_with(&format!("the response is larger than {MAX_BODY} bytes")), "{e}");
    }

    #[test]
    fn a_dripping_response_is_cut_at_twice_the_timeout() {
        let url = serve(|c| {
            for _ in 0..100 {
                if c.write_all(b"m").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let t = std::time::Instant::now();
        let e = http_get(&url, Duration::from_millis(200)).unwrap_err();
        assert!(e.contains("the response took longer than"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }
}
