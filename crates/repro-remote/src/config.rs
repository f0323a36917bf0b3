//! The engine's endpoint from `--remote`, `--remote-instance`, `--remote-header`, `--remote-ca-cert` and the
//! `[remote]` table of repro.toml (flags win, key by key). Every field is checked here, with a message naming it.

use crate::RemoteError;
use repro_model::project::RemoteSection;
use repro_model::remote::{RemoteEndpoint, RemoteTransport};
use std::path::PathBuf;

/// What the command line gave (each `None`/empty when the flag was absent).
#[derive(Debug, Clone, Default)]
pub struct RemoteFlags {
    pub url: Option<String>,
    pub instance: Option<String>,
    pub headers: Vec<String>,
    pub ca_cert: Option<PathBuf>,
}

/// The endpoint from the flags over the `[remote]` table (`file`'s relative `ca_cert` is from `base`).
pub fn resolve(
    flags: &RemoteFlags,
    file: Option<&RemoteSection>,
    base: &std::path::Path,
) -> Result<RemoteEndpoint, RemoteError> {
    let url = flags.url.clone().or_else(|| file.and_then(|f| f.url.clone())).ok_or(RemoteError::NoRemote)?;
    let instance = flags.instance.clone().or_else(|| file.and_then(|f| f.instance.clone())).unwrap_or_default();
    let headers = if flags.headers.is_empty() {
        file.map(|f| f.headers.clone()).unwrap_or_default()
    } else {
        flags.headers.clone()
    };
    let ca_cert = flags.ca_cert.clone().or_else(|| file.and_then(|f| f.ca_cert.as_ref()).map(|c| base.join(c)));
    endpoint(&url, &instance, &headers, ca_cert)
}

/// Checks and assembles one endpoint.
pub fn endpoint(
    url: &str,
    instance: &str,
    headers: &[String],
    ca_cert: Option<PathBuf>,
) -> Result<RemoteEndpoint, RemoteError> {
    let bad = |reason: &str| RemoteError::BadUrl { url: url.to_string(), reason: reason.to_string() };
    let (transport, rest) = if let Some(r) = url.strip_prefix("grpc://") {
        (RemoteTransport::Plain, r)
    } else if let Some(r) = url.strip_prefix("grpcs://") {
        (RemoteTransport::Tls, r)
    } else {
        return Err(bad("unknown scheme"));
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') || rest.contains('?') || rest.contains('#') || rest.contains('@') {
        return Err(bad("only HOST:PORT may follow the scheme (no path, user, query or fragment)"));
    }
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (h, p) = v6.split_once("]:").ok_or_else(|| bad("an IPv6 address needs [ADDR]:PORT"))?;
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad("not an IPv6 address between [ and ]"));
        }
        (h, p)
    } else {
        rest.rsplit_once(':').ok_or_else(|| bad("no port"))?
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if !host.contains(':') && !host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_') {
        return Err(bad("the host may hold only letters, digits, '.', '-' and '_'"));
    }
    let port: u16 = port.parse().map_err(|_| bad("the port is not a number from 1 to 65535"))?;
    if port == 0 {
        return Err(bad("the port is not a number from 1 to 65535"));
    }
    check_instance(instance)?;
    let headers = headers.iter().map(|h| header(h)).collect::<Result<Vec<_>, _>>()?;
    if ca_cert.is_some() && transport == RemoteTransport::Plain {
        return Err(bad("a CA certificate was given but the scheme is grpc:// (plain); use grpcs://"));
    }
    Ok(RemoteEndpoint { transport, host: host.to_string(), port, instance: instance.to_string(), headers, ca_cert })
}

/// REAPI: the instance name is path segments, none of them `blobs`, `uploads`, `actions`, `actionResults`,
/// `operations`, `capabilities` or `compressed-blobs`, nor empty.
fn check_instance(instance: &str) -> Result<(), RemoteError> {
    if instance.is_empty() {
        return Ok(());
    }
    let bad = |reason: String| RemoteError::BadInstance { instance: instance.to_string(), reason };
    for seg in instance.split('/') {
        if seg.is_empty() {
            return Err(bad("an empty path segment (a leading, trailing or double '/')".into()));
        }
        if ["blobs", "uploads", "actions", "actionResults", "operations", "capabilities", "compressed-blobs"]
            .contains(&seg)
        {
            return Err(bad(format!("'{seg}' is reserved by the Remote Execution API")));
        }
        if seg.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(bad("blanks and control characters are not allowed".into()));
        }
    }
    Ok(())
}

fn header(h: &str) -> Result<(String, String), RemoteError> {
    let bad = |reason: &str| RemoteError::BadHeader { header: h.to_string(), reason: reason.to_string() };
    let (name, value) = h.split_once(':').ok_or_else(|| bad("no ':'"))?;
    let name = name.trim().to_ascii_lowercase();
    let value = value.trim();
    if name.is_empty() {
        return Err(bad("an empty name"));
    }
    if name.starts_with("grpc-") || name.starts_with(':') {
        return Err(bad("names starting with 'grpc-' or ':' are reserved by gRPC"));
    }
    if name.ends_with("-bin") {
        return Err(bad("binary ('-bin') headers are not supported"));
    }
    if tonic::metadata::MetadataKey::<tonic::metadata::Ascii>::from_bytes(name.as_bytes()).is_err() {
        return Err(bad("the name may hold only lowercase letters, digits, '-', '_' and '.'"));
    }
    if tonic::metadata::MetadataValue::<tonic::metadata::Ascii>::try_from(value).is_err() {
        return Err(bad("the value must be visible ASCII"));
    }
    Ok((name, value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_tls_and_ipv6() {
        let e = endpoint("grpc://127.0.0.1:50051", "main", &[], None).unwrap();
        assert_eq!(
            (e.transport, e.host.as_str(), e.port, e.uri()),
            (RemoteTransport::Plain, "127.0.0.1", 50051, "http://127.0.0.1:50051".into())
        );
        let e = endpoint("grpcs://cas.example.com:443/", "", &["Authorization: Bearer x".into()], None).unwrap();
        assert_eq!(e.transport, RemoteTransport::Tls);
        assert_eq!((e.uri(), e.url()), ("https://cas.example.com:443".into(), "grpcs://cas.example.com:443".into()));
        assert_eq!(e.headers, vec![("authorization".to_string(), "Bearer x".to_string())]);
        let e = endpoint("grpc://[::1]:8980", "a/b", &[], None).unwrap();
        assert_eq!((e.host.as_str(), e.uri()), ("::1", "http://[::1]:8980".into()));
    }

    #[test]
    fn bad_input_is_named() {
        for (url, needle) in [
            ("http://h:1", "unknown scheme"),
            ("grpc://h", "no port"),
            ("grpc://h:0", "port"),
            ("grpc://h:70000", "port"),
            ("grpc://:5", "no host"),
            ("grpc://h:5/x", "only HOST:PORT"),
            ("grpc://u@h:5", "only HOST:PORT"),
            ("grpc://[zz]:5", "IPv6"),
            ("grpc://h h:5", "host"),
        ] {
            let m = endpoint(url, "", &[], None).unwrap_err().to_string();
            assert!(m.contains(needle) && m.contains(url), "{url}: {m}");
        }
        let m = endpoint("grpc://h:5", "main/blobs", &[], None).unwrap_err().to_string();
        assert!(m.contains("'blobs' is reserved"), "{m}");
        assert!(endpoint("grpc://h:5", "a//b", &[], None).is_err());
        for (h, needle) in [
            ("novalue", "no ':'"),
            (": v", "empty name"),
            ("grpc-x: 1", "reserved"),
            ("a b: 1", "name"),
            ("x: \u{7}", "ASCII"),
        ] {
            let m = endpoint("grpc://h:5", "", &[h.to_string()], None).unwrap_err().to_string();
            assert!(m.contains(needle), "{h}: {m}");
        }
        let m = endpoint("grpc://h:5", "", &[], Some("ca.pem".into())).unwrap_err().to_string();
        assert!(m.contains("grpcs://"), "{m}");
    }

    #[test]
    fn flags_win_over_the_file_key_by_key() {
        let file = RemoteSection {
            url: Some("grpc://file:1".into()),
            instance: Some("fromfile".into()),
            headers: vec!["x-a: 1".into()],
            ca_cert: None,
        };
        let flags = RemoteFlags { url: Some("grpc://flag:2".into()), ..Default::default() };
        let e = resolve(&flags, Some(&file), std::path::Path::new("/p")).unwrap();
        assert_eq!((e.host.as_str(), e.port, e.instance.as_str()), ("flag", 2, "fromfile"));
        assert_eq!(e.headers.len(), 1);
        let m = resolve(&RemoteFlags::default(), None, std::path::Path::new("/p")).unwrap_err().to_string();
        assert!(m.contains("--remote"), "{m}");
        let tls =
            RemoteSection { url: Some("grpcs://h:1".into()), ca_cert: Some("ca.pem".into()), ..Default::default() };
        let e = resolve(&RemoteFlags::default(), Some(&tls), std::path::Path::new("/proj")).unwrap();
        assert_eq!(e.ca_cert, Some(PathBuf::from("/proj/ca.pem")));
    }
}
