//! Package URLs (the purl spec: `pkg:TYPE/NAMESPACE/NAME@VERSION?QUALIFIERS`), written from their parts.

/// Percent-encodes one part of a purl (a namespace segment, the name, the version, a qualifier's value): every
/// byte but ASCII letters, digits and `.-_~` is `%XX` in uppercase hex, so `+` is `%2B`, `:` (an epoch) `%3A`,
/// `@` (an npm scope) `%40` and `/` `%2F`.
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b & 15)]));
        }
    }
    out
}

/// A purl of type `ty` (lowercase ASCII, written as is): each namespace segment, the name, the version and each
/// qualifier value percent-encoded; qualifiers sorted by key, those with an empty value left out.
pub(crate) fn purl(
    ty: &str,
    namespace: &[&str],
    name: &str,
    version: Option<&str>,
    qualifiers: &[(&str, &str)],
) -> String {
    let mut out = format!("pkg:{ty}/");
    for segment in namespace.iter().filter(|s| !s.is_empty()) {
        out.push_str(&encode(segment));
        out.push('/');
    }
    out.push_str(&encode(name));
    if let Some(v) = version.filter(|v| !v.is_empty()) {
        out.push('@');
        out.push_str(&encode(v));
    }
    let mut q: Vec<&(&str, &str)> = qualifiers.iter().filter(|(_, v)| !v.is_empty()).collect();
    q.sort();
    for (i, (k, v)) in q.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(k);
        out.push('=');
        out.push_str(&encode(v));
    }
    out
}

/// A Python distribution's name normalised per PEP 503: lowercase, each run of `-`, `_` and `.` one `-`.
pub(crate) fn pep503(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_run = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_run {
                out.push('-');
            }
            in_run = true;
        } else {
            out.extend(c.to_lowercase());
            in_run = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_percent_encoded() {
        assert_eq!(
            purl("deb", &["debian"], "bash", Some("5.2.15-2+b2"), &[("distro", "debian-12"), ("arch", "amd64")]),
            "pkg:deb/debian/bash@5.2.15-2%2Bb2?arch=amd64&distro=debian-12"
        );
        assert_eq!(
            purl("deb", &["debian"], "tzdata", Some("1:2024a-0+deb12u1"), &[]),
            "pkg:deb/debian/tzdata@1%3A2024a-0%2Bdeb12u1"
        );
        assert_eq!(purl("npm", &["@scope"], "name", Some("1.2.3"), &[]), "pkg:npm/%40scope/name@1.2.3");
        assert_eq!(purl("cargo", &[], "serde", Some("1.0.228"), &[]), "pkg:cargo/serde@1.0.228");
        assert_eq!(
            purl("golang", &["github.com", "BurntSushi"], "toml", Some("v1.2.0"), &[]),
            "pkg:golang/github.com/BurntSushi/toml@v1.2.0"
        );
        assert_eq!(purl("pypi", &[], "a b", None, &[("x", "")]), "pkg:pypi/a%20b");
        assert_eq!(encode("é/?#&="), "%C3%A9%2F%3F%23%26%3D");
    }

    #[test]
    fn pep503_names() {
        assert_eq!(pep503("PyYAML"), "pyyaml");
        assert_eq!(pep503("Foo.-_Bar__baz"), "foo-bar-baz");
        assert_eq!(pep503("zope.interface"), "zope-interface");
    }
}
