//! Values that remember where they were written: the line and column of a YAML node.
//!
//! The experiment loader reads YAML with serde-saphyr, whose `Spanned<T>` gives a value with its location.
//! repro-model does not depend on the YAML library (it holds plain data), so [`At`] and the flow nodes speak
//! the same serde protocol `Spanned<T>` uses: they ask for the newtype [`SPANNED_NEWTYPE`], to which the YAML
//! deserializer answers with a map `{MARKER: true, value: T, referenced: {line, column, ..}, defined: ..}`.
//! Any other deserializer (JSON, a test's) gives the plain value, with line and column 0. The loader's tests in
//! repro-chaos pin the protocol: every located error message asserts a line and a column.
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, value::MapAccessDeserializer, Deserializer, IntoDeserializer, MapAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

/// The newtype name serde-saphyr answers with a value and its location.
pub const SPANNED_NEWTYPE: &str = "__yaml_spanned";
/// The first key of serde-saphyr's located map, which tells it from a user's map.
pub const SPANNED_MARKER: &str = "__serde_saphyr_private_spanned";

/// A value together with the line and column where it was written (1-based; 0 when unknown).
#[derive(Debug, Clone, PartialEq)]
pub struct At<T> {
    pub value: T,
    pub line: u64,
    pub column: u64,
}

impl<T> At<T> {
    pub fn new(value: T) -> Self {
        At { value, line: 0, column: 0 }
    }
}

impl<T> std::ops::Deref for At<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: fmt::Display> fmt::Display for At<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for At<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_located(d)
    }
}

impl<T: Serialize> Serialize for At<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

/// Deserializes a `T` with the line and column of its node (see the module's documentation).
pub(crate) fn deserialize_located<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<At<T>, D::Error> {
    d.deserialize_newtype_struct(SPANNED_NEWTYPE, Newtype(PhantomData))
}

struct Newtype<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for Newtype<T> {
    type Value = At<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a value")
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<At<T>, D::Error> {
        d.deserialize_any(LocatedOrPlain(PhantomData))
    }
}

/// The located map of the YAML deserializer, or a plain value from any other.
struct LocatedOrPlain<T>(PhantomData<T>);

macro_rules! plain {
    ($($method:ident: $ty:ty),*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<At<T>, E> {
            T::deserialize(v.into_deserializer()).map(At::new)
        }
    )*};
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for LocatedOrPlain<T> {
    type Value = At<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a value")
    }
    plain!(visit_bool: bool, visit_i8: i8, visit_i16: i16, visit_i32: i32, visit_i64: i64, visit_i128: i128,
        visit_u8: u8, visit_u16: u16, visit_u32: u32, visit_u64: u64, visit_u128: u128, visit_f32: f32,
        visit_f64: f64, visit_char: char, visit_string: String);
    fn visit_str<E: de::Error>(self, v: &str) -> Result<At<T>, E> {
        T::deserialize(v.into_deserializer()).map(At::new)
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<At<T>, E> {
        T::deserialize(de::value::BytesDeserializer::new(v)).map(At::new)
    }
    fn visit_unit<E: de::Error>(self) -> Result<At<T>, E> {
        T::deserialize(().into_deserializer()).map(At::new)
    }
    fn visit_none<E: de::Error>(self) -> Result<At<T>, E> {
        T::deserialize(().into_deserializer()).map(At::new)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<At<T>, A::Error> {
        T::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(At::new)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<At<T>, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return T::deserialize(MapAccessDeserializer::new(map)).map(At::new);
        };
        if first != SPANNED_MARKER {
            // A user's map (from a deserializer that does not locate): the key read is given back.
            return T::deserialize(MapAccessDeserializer::new(Prepend { first: Some(first), rest: map })).map(At::new);
        }
        map.next_value::<de::IgnoredAny>()?;
        let mut value = None;
        let mut at = None;
        // The YAML deserializer gives value, then referenced (where the node is used), then defined; the
        // location of an error is the use site, so reading stops there: `defined` (and a location's `span`)
        // answer only the struct requests of serde-saphyr's own types, and would fail as ignored values.
        while value.is_none() || at.is_none() {
            let Some(key) = map.next_key::<String>()? else { break };
            match key.as_str() {
                "value" => value = Some(map.next_value::<T>()?),
                "referenced" => at = Some(map.next_value::<Location>()?),
                _ => map.next_value::<de::IgnoredAny>().map(drop)?,
            }
        }
        let value = value.ok_or_else(|| de::Error::missing_field("value"))?;
        let at = at.ok_or_else(|| de::Error::missing_field("referenced"))?;
        Ok(At { value, line: at.line, column: at.column })
    }
}

/// A map whose first key was already read.
struct Prepend<A> {
    first: Option<String>,
    rest: A,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Prepend<A> {
    type Error = A::Error;
    fn next_key_seed<K: de::DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        match self.first.take() {
            Some(k) => seed.deserialize(k.into_deserializer()).map(Some),
            None => self.rest.next_key_seed(seed),
        }
    }
    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.rest.next_value_seed(seed)
    }
}

/// `{line, column, ..}` of the located map; read as a struct (the YAML side answers nothing else), and only
/// as far as line and column.
struct Location {
    line: u64,
    column: u64,
}

impl<'de> Deserialize<'de> for Location {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Location;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a source location")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Location, A::Error> {
                let (mut line, mut column) = (None, None);
                while line.is_none() || column.is_none() {
                    let Some(key) = map.next_key::<String>()? else { break };
                    match key.as_str() {
                        "line" => line = Some(map.next_value::<u64>()?),
                        "column" => column = Some(map.next_value::<u64>()?),
                        _ => map.next_value::<de::IgnoredAny>().map(drop)?,
                    }
                }
                Ok(Location {
                    line: line.ok_or_else(|| de::Error::missing_field("line"))?,
                    column: column.ok_or_else(|| de::Error::missing_field("column"))?,
                })
            }
        }
        d.deserialize_struct("Location", &["line", "column", "span", "source_id"], V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_value_has_no_location() {
        let a: At<String> = serde_json::from_str("\"x\"").unwrap();
        assert_eq!(a, At::new("x".to_string()));
        let a: At<Vec<u32>> = serde_json::from_str("[1, 2]").unwrap();
        assert_eq!(a.value, vec![1, 2]);
        let a: At<std::collections::BTreeMap<String, u8>> = serde_json::from_str("{\"k\": 1}").unwrap();
        assert_eq!(a.value["k"], 1);
        assert_eq!(serde_json::to_string(&a).unwrap(), "{\"k\":1}");
    }

    #[test]
    fn the_located_map_gives_value_line_and_column() {
        let text =
            format!("{{\"{SPANNED_MARKER}\": true, \"value\": 42, \"referenced\": {{\"line\": 3, \"column\": 7}}}}");
        let a: At<u32> = serde_json::from_str(&text).unwrap();
        assert_eq!((a.value, a.line, a.column), (42, 3, 7));
        let bad = format!("{{\"{SPANNED_MARKER}\": true, \"value\": 42}}");
        assert!(serde_json::from_str::<At<u32>>(&bad).unwrap_err().to_string().contains("referenced"));
    }
}
