//! A small, forgiving scanner of the XML that JUnit reports are: start and end tags with their attributes,
//! skipping comments, CDATA, processing instructions and declarations. No XML crate is in the workspace; this
//! reads what test runners write and never panics on what they do not.

/// A tag the scanner met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tag {
    /// `<name attr="v">` (`empty` for `<name/>`).
    Start { name: String, attrs: Vec<(String, String)>, empty: bool },
    /// `</name>`.
    End { name: String },
}

/// The tags of `text`, in order. Malformed markup ends the scan (what was read until then is kept).
pub fn tags(text: &str) -> Vec<Tag> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = memchr(b'<', &b[i..]) {
        i += off;
        let rest = &text[i..];
        if rest.starts_with("<!--") {
            match rest.find("-->") {
                Some(e) => i += e + 3,
                None => break,
            }
            continue;
        }
        if rest.starts_with("<![CDATA[") {
            match rest.find("]]>") {
                Some(e) => i += e + 3,
                None => break,
            }
            continue;
        }
        if rest.starts_with("<?") || rest.starts_with("<!") {
            match rest.find('>') {
                Some(e) => i += e + 1,
                None => break,
            }
            continue;
        }
        // A tag: find its end outside quoted values.
        let Some(end) = tag_end(&b[i..]) else { break };
        let inner = &text[i + 1..i + end];
        i += end + 1;
        if let Some(name) = inner.strip_prefix('/') {
            out.push(Tag::End { name: name.trim().to_string() });
            continue;
        }
        let (inner, empty) = match inner.strip_suffix('/') {
            Some(s) => (s, true),
            None => (inner, false),
        };
        let name_end = inner.find(|c: char| c.is_whitespace()).unwrap_or(inner.len());
        let name = &inner[..name_end];
        if name.is_empty() {
            continue;
        }
        out.push(Tag::Start { name: name.to_string(), attrs: attrs(&inner[name_end..]), empty });
    }
    out
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&c| c == needle)
}

/// The index of the `>` closing the tag that starts at `b[0] == b'<'`.
fn tag_end(b: &[u8]) -> Option<usize> {
    let mut quote = None;
    for (j, &c) in b.iter().enumerate().skip(1) {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == b'"' || c == b'\'' => quote = Some(c),
            None if c == b'>' => return Some(j),
            None if c == b'<' => return None,
            None => {}
        }
    }
    None
}

/// `name="value"` pairs (either quote), values unescaped.
fn attrs(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start();
        let Some(eq) = rest.find('=') else { break };
        let name = rest[..eq].trim();
        let after = rest[eq + 1..].trim_start();
        let Some(q) = after.chars().next().filter(|c| *c == '"' || *c == '\'') else { break };
        let body = &after[1..];
        let Some(close) = body.find(q) else { break };
        out.push((name.to_string(), unescape(&body[..close])));
        rest = &body[close + 1..];
    }
    out
}

/// Replaces the five named entities and numeric character references; anything else is kept as written.
pub fn unescape(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let semi = rest.find(';').filter(|&n| n <= 12);
        let decoded = semi.and_then(|n| {
            let ent = &rest[1..n];
            let c = match ent {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                _ => {
                    let num = ent.strip_prefix('#')?;
                    let v = match num.strip_prefix(['x', 'X']) {
                        Some(h) => u32::from_str_radix(h, 16).ok()?,
                        None => num.parse::<u32>().ok()?,
                    };
                    char::from_u32(v)
                }
            };
            c.map(|c| (c, n))
        });
        match decoded {
            Some((c, n)) => {
                out.push(c);
                rest = &rest[n + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_tags_attributes_and_skips_the_rest() {
        let t = tags(
            r#"<?xml version="1.0"?><!-- <testcase name="no"/> --><a x="1 > 0" y='&lt;q&gt;&#65;&#x42;&amp;&bogus;'><b/><![CDATA[<c>]]></a>"#,
        );
        assert_eq!(
            t,
            [
                Tag::Start {
                    name: "a".into(),
                    attrs: vec![("x".into(), "1 > 0".into()), ("y".into(), "<q>AB&&bogus;".into())],
                    empty: false
                },
                Tag::Start { name: "b".into(), attrs: vec![], empty: true },
                Tag::End { name: "a".into() },
            ]
        );
    }

    #[test]
    fn malformed_input_stops_quietly() {
        assert_eq!(tags("<a"), []);
        assert_eq!(tags("<a x=\"unclosed>"), []);
        assert_eq!(tags("<!-- never closed"), []);
        assert_eq!(tags("<a><b"), [Tag::Start { name: "a".into(), attrs: vec![], empty: false }]);
        assert_eq!(unescape("&#xFFFFFFFF; &#; &"), "&#xFFFFFFFF; &#; &");
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}") {
            let _ = tags(&s);
            let _ = unescape(&s);
        }

        #[test]
        fn never_panics_on_markup(s in "[<>/!?\\[\\]CDATA=\"' a-z&;#x0-9-]{0,120}") {
            let _ = tags(&s);
        }
    }
}
