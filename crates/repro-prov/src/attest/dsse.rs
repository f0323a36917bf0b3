//! DSSE v1 (Dead Simple Signing Envelope): the pre-authentication encoding, signing, and the strict opening of
//! an envelope that may come from anyone.
//!
//! The signature is over `PAE(payloadType, payload)` =
//! `"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`, lengths in ASCII decimal, type and body as bytes; only
//! after it verifies is the payload parsed. The JSON envelope is
//! `{"payload": BASE64, "payloadType": TYPE, "signatures": [{"keyid": ID, "sig": BASE64}]}` (written with
//! standard base64; standard and URL-safe are read, as the spec allows).

use std::io::Read;
use std::path::Path;

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::keys::{Signer, Verifier};
use crate::ProvError;

/// The payload type of an in-toto statement: the only one `verify` accepts.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// The largest envelope read (a pack of tens of thousands of blobs has as many subjects, ~200 bytes each).
pub const MAX_ENVELOPE: u64 = 64 << 20;

/// The most signatures an envelope may carry.
pub const MAX_SIGNATURES: usize = 64;

/// The longest key id accepted.
const MAX_KEY_ID: usize = 512;

const DECODE: GeneralPurposeConfig =
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
const STANDARD: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, DECODE);
const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, DECODE);

/// The DSSE v1 pre-authentication encoding of a payload and its type.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + 32);
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

/// A DSSE envelope as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// base64 of the payload.
    pub payload: String,
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    pub signatures: Vec<EnvelopeSignature>,
}

/// One signature of an envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeSignature {
    /// Which key made it (optional in DSSE: an empty or null id matches any key).
    #[serde(default, skip_serializing_if = "String::is_empty", deserialize_with = "null_is_empty")]
    pub keyid: String,
    /// base64 of the signature.
    pub sig: String,
}

fn null_is_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

impl Envelope {
    /// The envelope as one line of JSON, with a final newline (a `.intoto.jsonl` line).
    pub fn to_json(&self) -> Vec<u8> {
        // Strings only: it always serializes.
        let mut v = serde_json::to_vec(self).unwrap_or_default();
        v.push(b'\n');
        v
    }
}

/// Signs `payload` of type `payload_type` into an envelope with one signature.
pub fn sign(payload_type: &str, payload: &[u8], signer: &dyn Signer) -> Result<Envelope, ProvError> {
    let sig = signer.sign(&pae(payload_type, payload))?;
    Ok(Envelope {
        payload: base64::engine::general_purpose::STANDARD.encode(payload),
        payload_type: payload_type.to_string(),
        signatures: vec![EnvelopeSignature {
            keyid: signer.key_id().to_string(),
            sig: base64::engine::general_purpose::STANDARD.encode(sig),
        }],
    })
}

/// What a verified envelope holds.
#[derive(Debug, Clone)]
pub struct Opened {
    pub payload_type: String,
    pub payload: Vec<u8>,
    /// The key id of the signature that verified (the verifier's).
    pub key_id: String,
}

/// Reads an envelope file, at most [`MAX_ENVELOPE`] bytes.
pub fn read(path: &Path) -> Result<Vec<u8>, ProvError> {
    let f = std::fs::File::open(path).map_err(|source| ProvError::Read { path: path.into(), source })?;
    let mut data = Vec::new();
    f.take(MAX_ENVELOPE + 1).read_to_end(&mut data).map_err(|source| ProvError::Read { path: path.into(), source })?;
    if data.len() as u64 > MAX_ENVELOPE {
        return Err(ProvError::TooLarge { path: path.into(), what: "DSSE envelope", limit: MAX_ENVELOPE });
    }
    Ok(data)
}

fn decode(text: &str) -> Option<Vec<u8>> {
    STANDARD.decode(text).ok().or_else(|| URL_SAFE.decode(text).ok())
}

/// Opens an envelope from anyone: parses it strictly (known fields only, the in-toto payload type, at most
/// [`MAX_SIGNATURES`]), and accepts it when a signature whose key id is the verifier's (or empty) verifies over
/// the PAE of the decoded payload. `path` names the envelope in errors; every refusal is
/// [`ProvError::Unverified`] with the reason.
pub fn open(bytes: &[u8], path: &Path, verifier: &dyn Verifier) -> Result<Opened, ProvError> {
    let no = |reason: String| ProvError::Unverified { path: path.into(), reason };
    if bytes.len() as u64 > MAX_ENVELOPE {
        return Err(no(format!("the envelope is larger than {MAX_ENVELOPE} bytes")));
    }
    let env: Envelope = serde_json::from_slice(bytes).map_err(|e| no(format!("not a DSSE envelope: {e}")))?;
    if env.payload_type != PAYLOAD_TYPE {
        return Err(no(format!(
            "payloadType '{}': repro verifies in-toto statements only ('{PAYLOAD_TYPE}')",
            env.payload_type.escape_debug()
        )));
    }
    if env.signatures.is_empty() {
        return Err(no("the envelope has no signature".into()));
    }
    if env.signatures.len() > MAX_SIGNATURES {
        return Err(no(format!("{} signatures (at most {MAX_SIGNATURES} are read)", env.signatures.len())));
    }
    let payload = decode(&env.payload).ok_or_else(|| no("the payload is not base64: it was changed".into()))?;
    let message = pae(&env.payload_type, &payload);
    let mine = verifier.key_id();
    let mut tried = 0;
    let mut others = Vec::new();
    for (i, s) in env.signatures.iter().enumerate() {
        if s.keyid.len() > MAX_KEY_ID {
            return Err(no(format!("signatures[{i}]: a key id of {} bytes (at most {MAX_KEY_ID})", s.keyid.len())));
        }
        if !s.keyid.is_empty() && s.keyid != mine {
            others.push(s.keyid.escape_debug().to_string());
            continue;
        }
        tried += 1;
        let Some(sig) = decode(&s.sig) else {
            continue;
        };
        if verifier.verify(&message, &sig) {
            return Ok(Opened { payload_type: env.payload_type, payload, key_id: mine.to_string() });
        }
    }
    if tried == 0 {
        return Err(no(format!(
            "no signature by the key given (key id {mine}): the envelope is signed by {} (another key)",
            others.join(", ")
        )));
    }
    Err(no(format!(
        "the signature by key {mine} does not verify: the payload, its type or the signature was changed after \
         signing, or another key made it"
    )))
}

/// An envelope read without checking its signature: the payload and the key ids its signatures name (claims).
#[derive(Debug, Clone)]
pub struct Unchecked {
    pub payload: Vec<u8>,
    pub key_ids: Vec<String>,
}

/// Reads an envelope from anyone as [`open`] does (strictly: known fields, the in-toto payload type, at most
/// [`MAX_SIGNATURES`], base64), but checks no signature: for `repro drift` without `--key`, which says so. A
/// refusal is [`ProvError::Parse`] (bad input), naming `path`.
pub fn open_unchecked(bytes: &[u8], path: &Path) -> Result<Unchecked, ProvError> {
    let bad = |reason: String| ProvError::Parse { path: path.into(), line: None, reason };
    if bytes.len() as u64 > MAX_ENVELOPE {
        return Err(bad(format!("the envelope is larger than {MAX_ENVELOPE} bytes")));
    }
    let env: Envelope = serde_json::from_slice(bytes).map_err(|e| bad(format!("not a DSSE envelope: {e}")))?;
    if env.payload_type != PAYLOAD_TYPE {
        return Err(bad(format!(
            "payloadType '{}': repro reads in-toto statements only ('{PAYLOAD_TYPE}')",
            env.payload_type.escape_debug()
        )));
    }
    if env.signatures.len() > MAX_SIGNATURES {
        return Err(bad(format!("{} signatures (at most {MAX_SIGNATURES} are read)", env.signatures.len())));
    }
    let payload = decode(&env.payload).ok_or_else(|| bad("the payload is not base64".into()))?;
    let key_ids = env
        .signatures
        .iter()
        .filter(|s| !s.keyid.is_empty())
        .map(|s| s.keyid.chars().take(MAX_KEY_ID).collect::<String>().escape_debug().to_string())
        .collect();
    Ok(Unchecked { payload, key_ids })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attest::keys::PrivateKey;
    use proptest::prelude::*;

    #[test]
    fn pae_is_the_specs_test_vector() {
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
        );
        assert_eq!(pae("", b""), b"DSSEv1 0  0 ");
        // Lengths are bytes, not characters.
        assert_eq!(pae("é", "ü".as_bytes()), "DSSEv1 2 é 2 ü".as_bytes());
    }

    fn key(n: u8) -> PrivateKey {
        PrivateKey::from_seed(&[n; 32])
    }

    fn signed(payload: &[u8]) -> (PrivateKey, Vec<u8>) {
        let k = key(1);
        let env = sign(PAYLOAD_TYPE, payload, &k).unwrap();
        (k, env.to_json())
    }

    fn reason(r: Result<Opened, ProvError>) -> String {
        match r {
            Ok(_) => panic!("verified"),
            Err(e @ ProvError::Unverified { .. }) => e.to_string(),
            Err(e) => panic!("not an Unverified error: {e}"),
        }
    }

    #[test]
    fn a_signed_envelope_opens_with_its_key() {
        let (k, bytes) = signed(b"{\"a\":1}");
        let o = open(&bytes, Path::new("e"), &k.public()).unwrap();
        assert_eq!(o.payload, b"{\"a\":1}");
        assert_eq!(o.key_id, k.id());
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["payloadType"], PAYLOAD_TYPE);
        assert_eq!(v["signatures"][0]["keyid"], k.id());
        assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 1, "one line");
    }

    #[test]
    fn tampering_is_refused_with_the_reason() {
        let (k, bytes) = signed(b"{\"a\":1}");
        let mut env: Envelope = serde_json::from_slice(&bytes).unwrap();
        // Another payload.
        let mut t = env.clone();
        t.payload = base64::engine::general_purpose::STANDARD.encode(b"{\"a\":2}");
        assert!(reason(open(&t.to_json(), Path::new("e"), &k.public())).contains("does not verify"));
        // Another payload type.
        let mut t = env.clone();
        t.payload_type = "application/json".into();
        assert!(reason(open(&t.to_json(), Path::new("e"), &k.public())).contains("in-toto statements only"));
        // A signature of another key under this key's id.
        let mut t = env.clone();
        let other = sign(PAYLOAD_TYPE, b"{\"a\":1}", &key(2)).unwrap();
        t.signatures[0].sig = other.signatures[0].sig.clone();
        assert!(reason(open(&t.to_json(), Path::new("e"), &k.public())).contains("does not verify"));
        // Another key.
        let r = reason(open(&bytes, Path::new("e"), &key(2).public()));
        assert!(r.contains("no signature by the key given") && r.contains(k.id()), "{r}");
        // No signature; garbage; an unknown field.
        env.signatures.clear();
        assert!(reason(open(&env.to_json(), Path::new("e"), &k.public())).contains("no signature"));
        assert!(reason(open(b"{}", Path::new("e"), &k.public())).contains("not a DSSE envelope"));
        let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        v["extra"] = 1.into();
        assert!(reason(open(&serde_json::to_vec(&v).unwrap(), Path::new("e"), &k.public())).contains("unknown field"));
    }

    #[test]
    fn an_empty_key_id_is_tried_and_other_ids_are_not() {
        let (k, bytes) = signed(b"x");
        let mut env: Envelope = serde_json::from_slice(&bytes).unwrap();
        env.signatures[0].keyid.clear();
        assert!(open(&env.to_json(), Path::new("e"), &k.public()).is_ok());
        let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        v["signatures"][0]["keyid"] = serde_json::Value::Null;
        assert!(open(&serde_json::to_vec(&v).unwrap(), Path::new("e"), &k.public()).is_ok());
        // A bad signature first, by another key, then the good one: accepted.
        let mut env: Envelope = serde_json::from_slice(&bytes).unwrap();
        let other = sign(PAYLOAD_TYPE, b"x", &key(3)).unwrap();
        env.signatures.insert(0, other.signatures[0].clone());
        assert!(open(&env.to_json(), Path::new("e"), &k.public()).is_ok());
    }

    #[test]
    fn url_safe_and_unpadded_base64_are_read() {
        let k = key(4);
        let payload = [0xfbu8, 0xff, 0xfe, 0x01];
        let env = sign(PAYLOAD_TYPE, &payload, &k).unwrap();
        let mut t = env.clone();
        t.payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(payload);
        assert_ne!(t.payload, env.payload);
        assert_eq!(open(&t.to_json(), Path::new("e"), &k.public()).unwrap().payload, payload);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn open_never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let k = key(5);
            prop_assert!(open(&bytes, Path::new("e"), &k.public()).is_err());
        }

        #[test]
        fn a_changed_byte_of_a_valid_envelope_never_verifies_another_payload(i in 0usize..4096, b in any::<u8>()) {
            let k = key(6);
            let env = sign(PAYLOAD_TYPE, b"{\"_type\":\"https://in-toto.io/Statement/v1\"}", &k).unwrap();
            let mut bytes = env.to_json();
            let i = i % bytes.len();
            bytes[i] = b;
            if let Ok(o) = open(&bytes, Path::new("e"), &k.public()) {
                // Only a change that leaves the decoded payload and its signature the same (JSON whitespace, the
                // key id's...) may still verify.
                prop_assert_eq!(o.payload, b"{\"_type\":\"https://in-toto.io/Statement/v1\"}".to_vec());
            }
        }
    }
}
