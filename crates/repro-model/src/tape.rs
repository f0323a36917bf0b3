//! Tapes: what the supervisor recorded of the guest's outside world (socket calls, /proc and /sys reads), so a
//! replay answers the same. They travel as these typed values, serialized with serde (JSON, inside `run.json`'s
//! sibling files, the init's result and the pack), never as hand-built text.
//!
//! A tape is untrusted input when it comes in a pack: decoding checks the kind and version and names the event
//! that is malformed.

use serde::{Deserialize, Serialize};

/// The version of the tape documents written today. Tapes of another version are refused with [`TapeError`].
pub const TAPE_VERSION: u32 = 1;

/// A taped socket call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetOp {
    Socket,
    Connect,
    Accept,
    Read,
    Write,
    /// getsockname: the address the socket was bound to (a server's port chosen by the kernel).
    Sockname,
}

impl NetOp {
    pub const ALL: [NetOp; 6] =
        [NetOp::Socket, NetOp::Connect, NetOp::Accept, NetOp::Read, NetOp::Write, NetOp::Sockname];

    pub fn name(self) -> &'static str {
        match self {
            NetOp::Socket => "socket",
            NetOp::Connect => "connect",
            NetOp::Accept => "accept",
            NetOp::Read => "read",
            NetOp::Write => "write",
            NetOp::Sockname => "sockname",
        }
    }

    pub fn parse(s: &str) -> Option<NetOp> {
        NetOp::ALL.into_iter().find(|o| o.name() == s)
    }
}

/// One socket call: its socket (numbered in order of creation), what it was, its result (a count, or a
/// negative errno), the bytes read or written, and an address (connect's destination, accept's peer,
/// recvfrom's sender).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "wire::NetEvent", try_from = "wire::NetEvent")]
pub struct NetEvent {
    pub socket: u32,
    pub op: NetOp,
    pub result: i64,
    pub data: Vec<u8>,
    pub addr: Vec<u8>,
}

/// The network tape: every taped socket call in the order the supervisor answered them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "wire::NetDoc", try_from = "wire::NetDoc")]
pub struct NetTape {
    pub events: Vec<NetEvent>,
}

/// One /proc or /sys file as the guest read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "wire::ProcRead", try_from = "wire::ProcRead")]
pub struct ProcRead {
    pub path: String,
    pub data: Vec<u8>,
}

/// The /proc and /sys tape, in the order the guest opened the files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "wire::ProcDoc", try_from = "wire::ProcDoc")]
pub struct ProcTape {
    pub reads: Vec<ProcRead>,
}

/// The tapes a run recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedTapes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetTape>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proc: Option<ProcTape>,
}

/// Recording or replaying one tape in a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TapeIo<T> {
    #[default]
    Off,
    Record,
    Replay(T),
}

/// The tapes of a run: what `capture` records and `replay` answers from (part of the init's configuration).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TapeSettings {
    pub network: TapeIo<NetTape>,
    pub proc: TapeIo<ProcTape>,
}

/// The tapes a run recorded and whether a replay diverged from them (part of the init's result).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TapesOut {
    pub network: Option<NetTape>,
    pub proc: Option<ProcTape>,
    pub network_events: u64,
    pub proc_reads: u64,
    /// What the guest did that the tape does not have (the replay was stopped).
    pub diverged: Option<String>,
}

/// A tape that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TapeError {
    #[error("the {kind} tape is not JSON: {reason}")]
    NotJson { kind: &'static str, reason: String },
    #[error("not a {kind} tape (its \"tape\" field is {found:?})")]
    WrongKind { kind: &'static str, found: String },
    #[error("the {kind} tape has version {found}, this repro reads version {TAPE_VERSION}")]
    Version { kind: &'static str, found: u64 },
    #[error("{kind} tape {item} {index}: {what}")]
    Item { kind: &'static str, item: &'static str, index: usize, what: String },
}

/// The kind of tape a document holds.
pub trait TapeKind: Sized {
    /// `network` or `proc`.
    const KIND: &'static str;
    /// What one item is called in errors: `event`, `read`.
    const ITEM: &'static str;
}

impl TapeKind for NetEvent {
    const KIND: &'static str = "network";
    const ITEM: &'static str = "event";
}

impl TapeKind for ProcRead {
    const KIND: &'static str = "proc";
    const ITEM: &'static str = "read";
}

impl NetTape {
    /// The tape as a JSON document: `{"tape": "network", "version": 1, "events": [...]}`.
    pub fn to_json(&self) -> Vec<u8> {
        to_json(self)
    }

    /// Reads a network tape document, naming the event that is malformed.
    pub fn from_json(json: &[u8]) -> Result<NetTape, TapeError> {
        wire::decode::<NetEvent>(json).map(|events| NetTape { events })
    }
}

impl ProcTape {
    /// The tape as a JSON document: `{"tape": "proc", "version": 1, "reads": [...]}`.
    pub fn to_json(&self) -> Vec<u8> {
        to_json(self)
    }

    /// Reads a /proc tape document, naming the read that is malformed.
    pub fn from_json(json: &[u8]) -> Result<ProcTape, TapeError> {
        wire::decode::<ProcRead>(json).map(|reads| ProcTape { reads })
    }
}

fn to_json<T: Serialize>(t: &T) -> Vec<u8> {
    // Serializing these types cannot fail: every map key is a string and every value is plain data.
    serde_json::to_vec_pretty(t).expect("a tape serializes to JSON")
}

/// The JSON shape of tapes, compatible with the version 1 documents written before the types were shared:
/// bytes are `data` when they are UTF-8 text, else `data_hex`; addresses are `addr_hex`.
mod wire {
    use super::*;

    const DIGITS: &[u8; 16] = b"0123456789abcdef";

    /// Lower-case hexadecimal, two digits a byte (a table, not a formatter per byte: tapes carry megabytes).
    pub(super) fn hex(b: &[u8]) -> String {
        let mut s = String::with_capacity(b.len() * 2);
        for &x in b {
            s.push(DIGITS[(x >> 4) as usize] as char);
            s.push(DIGITS[(x & 15) as usize] as char);
        }
        s
    }

    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }

    pub(super) fn unhex(s: &str) -> Option<Vec<u8>> {
        let b = s.as_bytes();
        if !b.len().is_multiple_of(2) {
            return None;
        }
        b.chunks_exact(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
    }

    fn split(b: Vec<u8>) -> (Option<String>, Option<String>) {
        if b.is_empty() {
            return (None, None);
        }
        match String::from_utf8(b) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(hex(e.as_bytes()))),
        }
    }

    /// A `*_hex` field that is not hexadecimal (the error of decoding an item; serde reports it with its place).
    #[derive(Debug, thiserror::Error)]
    #[error("{field}_hex is not hexadecimal")]
    pub struct NotHex {
        field: &'static str,
    }

    fn join(text: Option<String>, hexed: Option<String>, field: &'static str) -> Result<Vec<u8>, NotHex> {
        match (text, hexed) {
            (Some(t), _) => Ok(t.into_bytes()),
            (None, Some(h)) => unhex(&h).ok_or(NotHex { field }),
            (None, None) => Ok(Vec::new()),
        }
    }

    #[derive(Serialize, Deserialize)]
    pub struct NetEvent {
        socket: u32,
        op: NetOp,
        result: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data_hex: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        addr: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        addr_hex: Option<String>,
    }

    impl From<super::NetEvent> for NetEvent {
        fn from(e: super::NetEvent) -> Self {
            let (data, data_hex) = split(e.data);
            let addr_hex = (!e.addr.is_empty()).then(|| hex(&e.addr));
            NetEvent { socket: e.socket, op: e.op, result: e.result, data, data_hex, addr: None, addr_hex }
        }
    }

    impl TryFrom<NetEvent> for super::NetEvent {
        type Error = NotHex;
        fn try_from(w: NetEvent) -> Result<Self, NotHex> {
            Ok(super::NetEvent {
                socket: w.socket,
                op: w.op,
                result: w.result,
                data: join(w.data, w.data_hex, "data")?,
                addr: join(w.addr, w.addr_hex, "addr")?,
            })
        }
    }

    #[derive(Serialize, Deserialize)]
    pub struct ProcRead {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data_hex: Option<String>,
    }

    impl From<super::ProcRead> for ProcRead {
        fn from(r: super::ProcRead) -> Self {
            // An empty read is written as `"data": ""` (as version 1 did), so the field is always present.
            let (data, data_hex) = match split(r.data) {
                (None, None) => (Some(String::new()), None),
                d => d,
            };
            ProcRead { path: r.path, data, data_hex }
        }
    }

    impl TryFrom<ProcRead> for super::ProcRead {
        type Error = NotHex;
        fn try_from(w: ProcRead) -> Result<Self, NotHex> {
            Ok(super::ProcRead { path: w.path, data: join(w.data, w.data_hex, "data")? })
        }
    }

    /// A network tape document.
    #[derive(Serialize, Deserialize)]
    pub struct NetDoc {
        tape: String,
        version: u64,
        events: Vec<super::NetEvent>,
    }

    /// A /proc tape document.
    #[derive(Serialize, Deserialize)]
    pub struct ProcDoc {
        tape: String,
        version: u64,
        reads: Vec<super::ProcRead>,
    }

    impl From<super::NetTape> for NetDoc {
        fn from(t: super::NetTape) -> Self {
            NetDoc { tape: "network".into(), version: TAPE_VERSION.into(), events: t.events }
        }
    }

    impl From<super::ProcTape> for ProcDoc {
        fn from(t: super::ProcTape) -> Self {
            ProcDoc { tape: "proc".into(), version: TAPE_VERSION.into(), reads: t.reads }
        }
    }

    impl TryFrom<NetDoc> for super::NetTape {
        type Error = TapeError;
        fn try_from(d: NetDoc) -> Result<Self, TapeError> {
            check::<super::NetEvent>(&d.tape, d.version)?;
            Ok(super::NetTape { events: d.events })
        }
    }

    impl TryFrom<ProcDoc> for super::ProcTape {
        type Error = TapeError;
        fn try_from(d: ProcDoc) -> Result<Self, TapeError> {
            check::<super::ProcRead>(&d.tape, d.version)?;
            Ok(super::ProcTape { reads: d.reads })
        }
    }

    /// Any tape document, its items left undecoded.
    #[derive(Deserialize)]
    struct AnyDoc {
        tape: String,
        version: u64,
        #[serde(default)]
        events: Option<Vec<serde_json::Value>>,
        #[serde(default)]
        reads: Option<Vec<serde_json::Value>>,
    }

    fn check<T: TapeKind>(tape: &str, version: u64) -> Result<(), TapeError> {
        if tape != T::KIND {
            return Err(TapeError::WrongKind { kind: T::KIND, found: tape.to_string() });
        }
        if version != u64::from(TAPE_VERSION) {
            return Err(TapeError::Version { kind: T::KIND, found: version });
        }
        Ok(())
    }

    /// Decodes a document item by item, so that an error names the item that is malformed.
    pub(super) fn decode<T>(json: &[u8]) -> Result<Vec<T>, TapeError>
    where
        T: TapeKind + serde::de::DeserializeOwned,
    {
        let not_json = |e: serde_json::Error| TapeError::NotJson { kind: T::KIND, reason: e.to_string() };
        let doc: AnyDoc = serde_json::from_slice(json).map_err(not_json)?;
        check::<T>(&doc.tape, doc.version)?;
        let items = if T::KIND == "network" { doc.events } else { doc.reads };
        let items = items.ok_or_else(|| TapeError::Item {
            kind: T::KIND,
            item: T::ITEM,
            index: 0,
            what: format!("the document has no {} list", if T::KIND == "network" { "events" } else { "reads" }),
        })?;
        items
            .into_iter()
            .enumerate()
            .map(|(index, v)| {
                serde_json::from_value(v).map_err(|e| TapeError::Item {
                    kind: T::KIND,
                    item: T::ITEM,
                    index,
                    what: e.to_string(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let h = wire::hex(&all);
        assert_eq!(&h[..8], "00010203");
        assert_eq!(&h[h.len() - 4..], "feff");
        assert_eq!(wire::unhex(&h).unwrap(), all);
        assert_eq!(wire::unhex("FF0a").unwrap(), [255, 10]);
        for bad in ["f", "+f", "gg", "é0"] {
            assert_eq!(wire::unhex(bad), None, "{bad}");
        }
    }

    fn net() -> NetTape {
        NetTape {
            events: vec![
                NetEvent { socket: 0, op: NetOp::Socket, result: 3, data: vec![], addr: vec![] },
                NetEvent { socket: 0, op: NetOp::Connect, result: 0, data: vec![], addr: vec![2, 0, 0x1f, 0x90] },
                NetEvent { socket: 0, op: NetOp::Write, result: 5, data: b"hello".to_vec(), addr: vec![] },
                NetEvent { socket: 0, op: NetOp::Read, result: 3, data: vec![0xff, 0, 0xc3], addr: vec![] },
                NetEvent { socket: 1, op: NetOp::Accept, result: -11, data: vec![], addr: vec![] },
            ],
        }
    }

    #[test]
    fn tapes_round_trip_through_json() {
        let t = net();
        assert_eq!(NetTape::from_json(&t.to_json()).unwrap(), t);
        assert_eq!(serde_json::from_slice::<NetTape>(&serde_json::to_vec(&t).unwrap()).unwrap(), t);
        let p = ProcTape {
            reads: vec![
                ProcRead { path: "/proc/self/stat".into(), data: b"1 (x) R".to_vec() },
                ProcRead { path: "/sys/x".into(), data: vec![] },
                ProcRead { path: "/proc/bin".into(), data: vec![0x80, 0x81] },
            ],
        };
        assert_eq!(ProcTape::from_json(&p.to_json()).unwrap(), p);
        let both = RecordedTapes { network: Some(t), proc: Some(p) };
        assert_eq!(serde_json::from_value::<RecordedTapes>(serde_json::to_value(&both).unwrap()).unwrap(), both);
    }

    #[test]
    fn the_version_1_document_shape_is_kept() {
        let v: serde_json::Value = serde_json::from_slice(&net().to_json()).unwrap();
        assert_eq!(v["tape"], "network");
        assert_eq!(v["version"], 1);
        assert_eq!(v["events"][1]["addr_hex"], "02001f90");
        assert_eq!(v["events"][2]["data"], "hello");
        assert_eq!(v["events"][3]["data_hex"], "ff00c3");
        assert!(v["events"][0].get("data").is_none());
        let old = br#"{"tape": "proc", "version": 1, "reads": [{"path": "/proc/a", "data": "x"}, {"path": "/b", "data_hex": "00"}]}"#;
        let p = ProcTape::from_json(old).unwrap();
        assert_eq!(p.reads[1].data, vec![0]);
    }

    #[test]
    fn bad_tapes_are_refused_naming_what_is_wrong() {
        let e = NetTape::from_json(b"{").unwrap_err();
        assert!(matches!(e, TapeError::NotJson { kind: "network", .. }), "{e}");
        let e = NetTape::from_json(br#"{"tape": "proc", "version": 1, "events": []}"#).unwrap_err();
        assert_eq!(e.to_string(), "not a network tape (its \"tape\" field is \"proc\")");
        let e = ProcTape::from_json(br#"{"tape": "proc", "version": 9, "reads": []}"#).unwrap_err();
        assert_eq!(e.to_string(), "the proc tape has version 9, this repro reads version 1");
        let e = NetTape::from_json(
            br#"{"tape": "network", "version": 1, "events": [{"socket": 0, "op": "socket", "result": 3},
                {"socket": 0, "op": "teleport", "result": 0}]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("network tape event 1: unknown variant `teleport`"), "{e}");
        let e = NetTape::from_json(
            br#"{"tape": "network", "version": 1, "events": [{"socket": 4294967296, "op": "read", "result": 0}]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("network tape event 0:"), "{e}");
        let e = ProcTape::from_json(br#"{"tape": "proc", "version": 1, "reads": [{"path": "/a", "data_hex": "0"}]}"#)
            .unwrap_err();
        assert_eq!(e.to_string(), "proc tape read 0: data_hex is not hexadecimal");
    }
}
