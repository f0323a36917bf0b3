//! ed25519 keys: `repro key gen` (a PKCS#8 PEM private key and an SPKI PEM public key), loading them with
//! errors that say what the file is and what was expected, and the key id.
//!
//! The key id is securesystemslib's default key id, so that an envelope repro signs names the key the way
//! in-toto's and TUF's tools do: the lowercase hex sha256 of the canonical JSON (OLPC: sorted keys, no
//! whitespace) of the key's dictionary,
//!
//! ```text
//! {"keytype":"ed25519","keyval":{"public":"<64 hex digits of the raw public key>"},"scheme":"ed25519"}
//! ```
//!
//! Signing and verifying go through the [`Signer`] and [`Verifier`] traits, so that another kind of key (a
//! keyless Fulcio certificate, a KMS or hardware key) can be added without touching DSSE or the statements.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use sha2::Digest as _;

use crate::error::PemError;
use crate::ProvError;

/// The largest key file read (a PEM ed25519 key is about 120 bytes).
const MAX_KEY_FILE: u64 = 64 << 10;

/// What signs a DSSE envelope: an id to put beside the signature, and the signature of a message.
pub trait Signer {
    /// The key id written into the envelope's signature (`keyid`).
    fn key_id(&self) -> &str;
    /// The signature of `message` (the DSSE pre-authentication encoding).
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, ProvError>;
}

/// What checks a signature of a DSSE envelope.
pub trait Verifier {
    /// The key id of this key; a signature with another (non-empty) key id is not tried.
    fn key_id(&self) -> &str;
    /// Whether `signature` is this key's signature of `message`.
    fn verify(&self, message: &[u8], signature: &[u8]) -> bool;
}

/// An ed25519 private key with its key id.
pub struct PrivateKey {
    key: SigningKey,
    id: String,
}

/// An ed25519 public key with its key id.
#[derive(Debug, Clone)]
pub struct PublicKey {
    key: VerifyingKey,
    id: String,
}

/// The key id of an ed25519 public key (see the module's documentation).
pub fn key_id(public: &VerifyingKey) -> String {
    let hex = crate::identity::hex(public.as_bytes());
    let canonical = format!(r#"{{"keytype":"ed25519","keyval":{{"public":"{hex}"}},"scheme":"ed25519"}}"#);
    crate::identity::hex(&sha2::Sha256::digest(canonical.as_bytes()))
}

impl PrivateKey {
    /// A new key from 32 bytes of the operating system's randomness.
    pub fn generate() -> Result<PrivateKey, ProvError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| ProvError::Key {
            path: PathBuf::from("(new key)"),
            reason: format!("cannot get randomness from the operating system: {e}"),
        })?;
        Ok(PrivateKey::from_seed(&seed))
    }

    /// The key of a 32-byte seed (RFC 8032's private key).
    pub fn from_seed(seed: &[u8; 32]) -> PrivateKey {
        let key = SigningKey::from_bytes(seed);
        let id = key_id(&key.verifying_key());
        PrivateKey { key, id }
    }

    pub fn public(&self) -> PublicKey {
        PublicKey { key: self.key.verifying_key(), id: self.id.clone() }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// PKCS#8 v1 (RFC 8410: the seed only, as OpenSSL and pyca/cryptography write it) in PEM.
    pub fn to_pem(&self) -> String {
        let bytes = ed25519_dalek::pkcs8::KeypairBytes { secret_key: self.key.to_bytes(), public_key: None };
        // Encoding 32 bytes into a fixed structure cannot fail.
        bytes
            .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
            .map(|s| s.to_string())
            .unwrap_or_default()
    }

    /// Reads a private key file (`repro key gen`'s PREFIX.key).
    pub fn load(path: &Path) -> Result<PrivateKey, ProvError> {
        let text = read_key_file(path)?;
        let bad = |reason: String| ProvError::Key { path: path.into(), reason };
        let pem = Pem::parse(&text).map_err(|r| bad(format!("{r}; {EXPECT_PRIVATE}")))?;
        match pem.label.as_str() {
            "PRIVATE KEY" => {}
            "PUBLIC KEY" => {
                return Err(bad(format!(
                    "this is a public key (PEM 'PUBLIC KEY'); signing needs the private key (PREFIX.key of `repro key \
                     gen`, beside PREFIX.pub); {EXPECT_PRIVATE}"
                )))
            }
            other => return Err(bad(format!("{}; {EXPECT_PRIVATE}", other_label(other)))),
        }
        let der = pem.der().map_err(|r| bad(format!("{r}; {EXPECT_PRIVATE}")))?;
        let key = SigningKey::from_pkcs8_der(&der)
            .map_err(|e| bad(format!("{}; {EXPECT_PRIVATE}", der_problem(&der, "private", &e.to_string()))))?;
        let id = key_id(&key.verifying_key());
        Ok(PrivateKey { key, id })
    }
}

impl Signer for PrivateKey {
    fn key_id(&self) -> &str {
        &self.id
    }
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, ProvError> {
        Ok(self.key.sign(message).to_bytes().to_vec())
    }
}

const EXPECT_PRIVATE: &str =
    "expected an ed25519 private key in PKCS#8 PEM ('-----BEGIN PRIVATE KEY-----'), as `repro key gen` writes";
const EXPECT_PUBLIC: &str =
    "expected an ed25519 public key in SPKI PEM ('-----BEGIN PUBLIC KEY-----'), as `repro key gen` writes";

impl PublicKey {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        self.key.as_bytes()
    }

    /// SPKI (RFC 8410) in PEM.
    pub fn to_pem(&self) -> String {
        // Encoding 32 bytes into a fixed structure cannot fail.
        self.key.to_public_key_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF).unwrap_or_default()
    }

    /// Reads a public key file (`repro key gen`'s PREFIX.pub, or any SPKI PEM ed25519 key).
    pub fn load(path: &Path) -> Result<PublicKey, ProvError> {
        let text = read_key_file(path)?;
        PublicKey::from_pem(path, &text)
    }

    /// Parses an SPKI PEM public key; `path` names it in errors.
    pub fn from_pem(path: &Path, text: &str) -> Result<PublicKey, ProvError> {
        let bad = |reason: String| ProvError::Key { path: path.into(), reason };
        let pem = Pem::parse(text).map_err(|r| bad(format!("{r}; {EXPECT_PUBLIC}")))?;
        match pem.label.as_str() {
            "PUBLIC KEY" => {}
            "PRIVATE KEY" | "ENCRYPTED PRIVATE KEY" | "RSA PRIVATE KEY" | "EC PRIVATE KEY" | "OPENSSH PRIVATE KEY" => {
                return Err(bad(format!(
                    "this is a private key (PEM '{}'): verifying takes the public key (PREFIX.pub of `repro key gen`); \
                     never hand a private key to a verifier; {EXPECT_PUBLIC}",
                    pem.label
                )))
            }
            other => return Err(bad(format!("{}; {EXPECT_PUBLIC}", other_label(other)))),
        }
        let der = pem.der().map_err(|r| bad(format!("{r}; {EXPECT_PUBLIC}")))?;
        let key = VerifyingKey::from_public_key_der(&der)
            .map_err(|e| bad(format!("{}; {EXPECT_PUBLIC}", der_problem(&der, "public", &e.to_string()))))?;
        let id = key_id(&key);
        Ok(PublicKey { key, id })
    }
}

impl Verifier for PublicKey {
    fn key_id(&self) -> &str {
        &self.id
    }
    fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        let Ok(sig) = ed25519_dalek::Signature::from_slice(signature) else {
            return false;
        };
        // Strict: refuses the small-order keys and non-canonical signatures that plain verification accepts.
        self.key.verify_strict(message, &sig).is_ok()
    }
}

/// What `repro key gen` wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GeneratedKey {
    pub private: PathBuf,
    pub public: PathBuf,
    pub key_id: String,
}

/// `repro key gen --out PREFIX`: a new key pair written to PREFIX.key (mode 0600) and PREFIX.pub (0644), each
/// created with O_EXCL: an existing file is never overwritten (and nothing is written when either exists).
pub fn generate(prefix: &Path) -> Result<GeneratedKey, ProvError> {
    let private = with_suffix(prefix, ".key");
    let public = with_suffix(prefix, ".pub");
    for p in [&private, &public] {
        if p.symlink_metadata().is_ok() {
            return Err(ProvError::Key {
                path: p.clone(),
                reason: "already exists: `repro key gen` never overwrites a key (remove it, or choose another --out)"
                    .into(),
            });
        }
    }
    let key = PrivateKey::generate()?;
    create_new(&private, key.to_pem().as_bytes(), 0o600)?;
    if let Err(e) = create_new(&public, key.public().to_pem().as_bytes(), 0o644) {
        // Only the file this call created is removed.
        let _ = std::fs::remove_file(&private);
        return Err(e);
    }
    Ok(GeneratedKey { private, public, key_id: key.id().to_string() })
}

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// Creates `path` with O_EXCL (never following or replacing anything there), writes `data`, syncs.
fn create_new(path: &Path, data: &[u8], mode: u32) -> Result<(), ProvError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::AlreadyExists {
            ProvError::Key {
                path: path.into(),
                reason: "already exists: `repro key gen` never overwrites a key (remove it, or choose another --out)"
                    .into(),
            }
        } else {
            ProvError::Write { path: path.into(), source }
        }
    })?;
    // The umask may have cleared bits of `mode`, never added any: 0600 stays 0600 or less.
    f.write_all(data).and_then(|_| f.sync_all()).map_err(|source| ProvError::Write { path: path.into(), source })
}

fn read_key_file(path: &Path) -> Result<String, ProvError> {
    let f = std::fs::File::open(path).map_err(|source| ProvError::Read { path: path.into(), source })?;
    let mut data = Vec::new();
    f.take(MAX_KEY_FILE + 1).read_to_end(&mut data).map_err(|source| ProvError::Read { path: path.into(), source })?;
    if data.len() as u64 > MAX_KEY_FILE {
        return Err(ProvError::Key {
            path: path.into(),
            reason: format!("larger than {MAX_KEY_FILE} bytes: not a key file (an ed25519 PEM key is ~120 bytes)"),
        });
    }
    String::from_utf8(data).map_err(|_| ProvError::Key {
        path: path.into(),
        reason: "not text: a binary file (a DER key?) where a PEM key was expected".into(),
    })
}

/// One PEM block: its label and base64 body.
struct Pem {
    label: String,
    body: String,
}

impl Pem {
    /// The first PEM block of `text`, with the reason it is not one.
    fn parse(text: &str) -> Result<Pem, PemError> {
        let mut lines = text.lines().map(str::trim);
        let label = loop {
            match lines.next() {
                None if text.trim().is_empty() => return Err(PemError::Empty),
                None => return Err(PemError::NotPem),
                Some(l) => {
                    if let Some(rest) = l.strip_prefix("-----BEGIN ") {
                        match rest.strip_suffix("-----") {
                            Some(label) => break label.to_string(),
                            None => return Err(PemError::MalformedHeader { line: l.into() }),
                        }
                    }
                    if l.starts_with("ssh-ed25519 ") || l.starts_with("ssh-rsa ") {
                        return Err(PemError::OpenSsh);
                    }
                }
            }
        };
        let end = format!("-----END {label}-----");
        let mut body = String::new();
        let mut ended = false;
        for l in lines {
            if l == end {
                ended = true;
                break;
            }
            if l.starts_with("-----END ") {
                return Err(PemError::WrongEnd { line: l.into(), label });
            }
            if l.contains(':') {
                // RFC 1421 headers (Proc-Type: 4,ENCRYPTED): an encrypted traditional key.
                return Err(PemError::Encrypted { line: l.into() });
            }
            body.push_str(l);
        }
        if !ended {
            return Err(PemError::Truncated { label });
        }
        Ok(Pem { label, body })
    }

    /// The decoded body (after the label was found to be the one expected).
    fn der(&self) -> Result<Vec<u8>, PemError> {
        let der =
            base64::engine::general_purpose::STANDARD.decode(self.body.as_bytes()).map_err(PemError::NotBase64)?;
        if der.is_empty() {
            return Err(PemError::EmptyBlock { label: self.label.clone() });
        }
        Ok(der)
    }
}

/// What a PEM label other than the expected ones means.
fn other_label(label: &str) -> String {
    let what = match label {
        "RSA PRIVATE KEY" => "an RSA private key (PKCS#1)",
        "RSA PUBLIC KEY" => "an RSA public key (PKCS#1)",
        "EC PRIVATE KEY" => "an elliptic-curve private key (SEC 1)",
        "OPENSSH PRIVATE KEY" => "an OpenSSH private key (convert it, or make one with `repro key gen`)",
        "ENCRYPTED PRIVATE KEY" => "an encrypted PKCS#8 key (repro reads unencrypted keys only)",
        "CERTIFICATE" => "an X.509 certificate",
        "PGP PUBLIC KEY BLOCK" | "PGP PRIVATE KEY BLOCK" => "an OpenPGP key",
        _ => "",
    };
    if what.is_empty() {
        format!("a PEM '{}' block", label.escape_debug())
    } else {
        format!("a PEM '{label}' block: {what}")
    }
}

/// Why a DER key did not decode as ed25519: the algorithm it is, if it names a known one, else the decoder's
/// message (a truncated or corrupt structure).
fn der_problem(der: &[u8], which: &str, decoder: &str) -> String {
    // The algorithm identifiers' encoded OIDs.
    const ALGORITHMS: [(&[u8], &str); 6] = [
        (&[0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01], "an RSA key"),
        (&[0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a], "an RSA-PSS key"),
        (&[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01], "an elliptic-curve (ECDSA) key"),
        (&[0x06, 0x03, 0x2b, 0x65, 0x6e], "an X25519 key (key agreement, not signing)"),
        (&[0x06, 0x03, 0x2b, 0x65, 0x71], "an Ed448 key"),
        (&[0x06, 0x03, 0x2b, 0x65, 0x6f], "an X448 key"),
    ];
    for (oid, what) in ALGORITHMS {
        if der.windows(oid.len()).any(|w| w == oid) {
            return format!("{what}, not an ed25519 {which} key");
        }
    }
    format!("not a valid ed25519 {which} key ({decoder}): the file is corrupt or truncated")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(n: u8) -> [u8; 32] {
        [n; 32]
    }

    fn err_of(r: Result<impl Sized, ProvError>) -> String {
        match r {
            Ok(_) => panic!("expected an error"),
            Err(e) => crate::error::chain(&e),
        }
    }

    #[test]
    fn the_key_id_is_securesystemslibs_default() {
        // RFC 8032's first test vector: secret 9d61b19d..., public d75a9801...
        let secret: [u8; 32] = hex32("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
        let k = PrivateKey::from_seed(&secret);
        assert_eq!(
            crate::identity::hex(k.public().as_bytes()),
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
        );
        let canonical = r#"{"keytype":"ed25519","keyval":{"public":"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"},"scheme":"ed25519"}"#;
        assert_eq!(k.id(), crate::identity::hex(&sha2::Sha256::digest(canonical.as_bytes())));
        assert_eq!(k.id().len(), 64);
    }

    fn hex32(s: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }

    #[test]
    fn pem_round_trips_and_signatures_verify() {
        let d = tempfile::tempdir().unwrap();
        let k = PrivateKey::from_seed(&seed(7));
        let priv_pem = k.to_pem();
        assert!(priv_pem.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{priv_pem}");
        let pub_pem = k.public().to_pem();
        assert!(pub_pem.starts_with("-----BEGIN PUBLIC KEY-----\n"), "{pub_pem}");
        std::fs::write(d.path().join("k.key"), &priv_pem).unwrap();
        std::fs::write(d.path().join("k.pub"), &pub_pem).unwrap();
        let k2 = PrivateKey::load(&d.path().join("k.key")).unwrap();
        let p2 = PublicKey::load(&d.path().join("k.pub")).unwrap();
        assert_eq!((k2.id(), p2.id()), (k.id(), k.id()));
        let sig = k2.sign(b"message").unwrap();
        assert!(p2.verify(b"message", &sig));
        assert!(!p2.verify(b"messagE", &sig));
        assert!(!p2.verify(b"message", &sig[..63]));
        assert!(!PrivateKey::from_seed(&seed(8)).public().verify(b"message", &sig));
    }

    #[test]
    fn generate_writes_0600_and_never_overwrites() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let prefix = d.path().join("ci");
        let g = generate(&prefix).unwrap();
        let mode = std::fs::metadata(&g.private).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "private key mode {mode:o}");
        assert_eq!(PrivateKey::load(&g.private).unwrap().id(), g.key_id);
        assert_eq!(PublicKey::load(&g.public).unwrap().id(), g.key_id);
        let before = std::fs::read(&g.private).unwrap();
        let e = err_of(generate(&prefix));
        assert!(e.contains("already exists") && e.contains("ci.key"), "{e}");
        assert_eq!(std::fs::read(&g.private).unwrap(), before);
        // Only the public half there: still refused, and no private key is written beside it.
        let other = d.path().join("half");
        std::fs::write(d.path().join("half.pub"), "x").unwrap();
        let e = err_of(generate(&other));
        assert!(e.contains("half.pub") && e.contains("already exists"), "{e}");
        assert!(!d.path().join("half.key").exists());
        // A dangling symbolic link is not followed either.
        std::os::unix::fs::symlink(d.path().join("nowhere"), d.path().join("link.key")).unwrap();
        assert!(err_of(generate(&d.path().join("link"))).contains("already exists"));
        assert!(!d.path().join("nowhere").exists());
    }

    #[test]
    fn two_generated_keys_differ() {
        assert_ne!(PrivateKey::generate().unwrap().id(), PrivateKey::generate().unwrap().id());
    }

    fn write(d: &Path, name: &str, text: &str) -> PathBuf {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn loading_the_wrong_thing_says_what_it_is_and_what_was_expected() {
        let d = tempfile::tempdir().unwrap();
        let k = PrivateKey::from_seed(&seed(1));
        let pubf = write(d.path(), "k.pub", &k.public().to_pem());
        let keyf = write(d.path(), "k.key", &k.to_pem());
        let e = err_of(PrivateKey::load(&pubf));
        assert!(e.contains("k.pub") && e.contains("public key") && e.contains("PKCS#8"), "{e}");
        let e = err_of(PublicKey::load(&keyf));
        assert!(e.contains("k.key") && e.contains("private key") && e.contains("SPKI"), "{e}");
        // Truncated: no END line, or a cut body.
        let pem = k.to_pem();
        let e = err_of(PrivateKey::load(&write(d.path(), "t1", &pem[..pem.len() - 20])));
        assert!(e.contains("truncated"), "{e}");
        let lines: Vec<&str> = pem.lines().collect();
        let cut = format!("{}\n{}\n{}\n", lines[0], &lines[1][..20], lines[2]);
        let e = err_of(PrivateKey::load(&write(d.path(), "t2", &cut)));
        assert!(e.contains("corrupt or truncated"), "{e}");
        let e = err_of(PrivateKey::load(&write(d.path(), "empty", "")));
        assert!(e.contains("empty") && e.contains("expected an ed25519 private key"), "{e}");
        let e = err_of(PublicKey::load(&write(d.path(), "ssh", "ssh-ed25519 AAAAC3Nza... me@host\n")));
        assert!(e.contains("OpenSSH"), "{e}");
        let e = err_of(PublicKey::load(&d.path().join("missing.pub")));
        assert!(e.contains("missing.pub"), "{e}");
    }

    #[test]
    fn rsa_and_ec_keys_are_named() {
        let d = tempfile::tempdir().unwrap();
        // PKCS#1 RSA: named by its label.
        let rsa1 = "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAK\n-----END RSA PRIVATE KEY-----\n";
        let e = err_of(PrivateKey::load(&write(d.path(), "rsa1", rsa1)));
        assert!(e.contains("RSA private key") && e.contains("expected an ed25519"), "{e}");
        // PKCS#8 with the rsaEncryption algorithm: named by its OID.
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut der = vec![0x30, 0x1a, 0x02, 0x01, 0x00, 0x30, 0x0d];
        der.extend_from_slice(&[0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00]);
        der.extend_from_slice(&[0x04, 0x04, 0x30, 0x02, 0x02, 0x00]);
        let rsa8 = format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n", b64.encode(&der));
        let e = err_of(PrivateKey::load(&write(d.path(), "rsa8", &rsa8)));
        assert!(e.contains("an RSA key, not an ed25519 private key"), "{e}");
        let mut der = vec![0x30, 0x13, 0x30, 0x09];
        der.extend_from_slice(&[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01]);
        der.extend_from_slice(&[0x03, 0x02, 0x00, 0x04]);
        let ec = format!("-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n", b64.encode(&der));
        let e = err_of(PublicKey::load(&write(d.path(), "ec.pub", &ec)));
        assert!(e.contains("elliptic-curve") && e.contains("ed25519 public key"), "{e}");
    }
}
