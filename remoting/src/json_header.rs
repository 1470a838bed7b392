//! The JSON header form read straight into a [`RemotingCommand`]: one pass over the bytes,
//! no `serde_json::Value` tree in between, the top-level keys compared where they lie.
//!
//! Lenient where real clients differ (see `rocketmq-clients.md`): numbers may come as strings
//! (`"code":"10"`), `extFields` values as numbers, booleans or null (the C++ client's), the
//! language as a name or a number, the remark as null, and unknown fields are skipped.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::command::{ExtFields, LanguageCode, RemotingCommand, SerializeType};
use crate::Result;

pub(crate) fn decode(bytes: &[u8]) -> Result<RemotingCommand> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let cmd = de.deserialize_map(HeaderVisitor)?;
    de.end()?;
    Ok(cmd)
}

struct HeaderVisitor;

/// The top-level keys the decoder reads.
enum Key {
    Code,
    Language,
    Version,
    Opaque,
    Flag,
    Remark,
    ExtFields,
    Other,
}

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a header field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Key, E> {
                Ok(match v {
                    "code" => Key::Code,
                    "language" => Key::Language,
                    "version" => Key::Version,
                    "opaque" => Key::Opaque,
                    "flag" => Key::Flag,
                    "remark" => Key::Remark,
                    "extFields" => Key::ExtFields,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = RemotingCommand;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object (a remoting header)")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut cmd = RemotingCommand {
            language: LanguageCode::Java,
            serialize_type: SerializeType::Json,
            ..RemotingCommand::default()
        };
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Code => cmd.code = map.next_value_seed(LenientI32("code"))?,
                Key::Version => cmd.version = map.next_value_seed(LenientI32("version"))?,
                Key::Opaque => cmd.opaque = map.next_value_seed(LenientI32("opaque"))?,
                Key::Flag => cmd.flag = map.next_value_seed(LenientI32("flag"))?,
                Key::Language => cmd.language = map.next_value_seed(Language)?,
                Key::Remark => cmd.remark = map.next_value_seed(Scalar)?,
                Key::ExtFields => cmd.ext_fields = map.next_value_seed(Fields)?,
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(cmd)
    }
}

/// An i32 written as a number or a string of one; null is 0.
struct LenientI32(&'static str);

impl<'de> DeserializeSeed<'de> for LenientI32 {
    type Value = i32;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<i32, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for LenientI32 {
    type Value = i32;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "header field {}: a 32-bit integer", self.0)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<i32, E> {
        i32::try_from(v).map_err(|_| {
            E::custom(format!(
                "header field {}: {v} is not a 32-bit integer",
                self.0
            ))
        })
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<i32, E> {
        i32::try_from(v).map_err(|_| {
            E::custom(format!(
                "header field {}: {v} is not a 32-bit integer",
                self.0
            ))
        })
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<i32, E> {
        v.trim().parse().map_err(|_| {
            E::custom(format!(
                "header field {}: {v:?} is not a 32-bit integer",
                self.0
            ))
        })
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<i32, E> {
        Ok(0)
    }
}

/// The language: a Java enum name, or its ordinal; null is JAVA.
struct Language;

impl<'de> DeserializeSeed<'de> for Language {
    type Value = LanguageCode;
    fn deserialize<D: Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<LanguageCode, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for Language {
    type Value = LanguageCode;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("header field language: a language name or code")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<LanguageCode, E> {
        Ok(LanguageCode::from_name(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<LanguageCode, E> {
        u8::try_from(v)
            .map(LanguageCode::from_code)
            .map_err(|_| E::custom(format!("header field language: {v} is not a language code")))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<LanguageCode, E> {
        u8::try_from(v)
            .map(LanguageCode::from_code)
            .map_err(|_| E::custom(format!("header field language: {v} is not a language code")))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<LanguageCode, E> {
        Ok(LanguageCode::Java)
    }
}

/// A value as the string Java's typed header fields read it from: strings as they are,
/// numbers and booleans in their JSON spelling, arrays and objects as their JSON text;
/// null is no value.
struct Scalar;

impl<'de> DeserializeSeed<'de> for Scalar {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scalar {
    type Value = Option<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
        Ok(Some(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Self::Value, E> {
        Ok(Some(v))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
        Ok(Some(
            serde_json::Number::from_f64(v).map_or_else(|| v.to_string(), |n| n.to_string()),
        ))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(
        self,
        seq: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let v: serde_json::Value =
            de::Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Some(v.to_string()))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Self::Value, A::Error> {
        let v: serde_json::Value =
            de::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Some(v.to_string()))
    }
}

/// `extFields`: an object of scalars (see [`Scalar`]; null values are left out), or null.
struct Fields;

impl<'de> DeserializeSeed<'de> for Fields {
    type Value = ExtFields;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<ExtFields, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Fields {
    type Value = ExtFields;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("header field extFields: an object")
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<ExtFields, E> {
        Ok(ExtFields::new())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<ExtFields, A::Error> {
        let mut fields = ExtFields::new();
        while let Some(k) = map.next_key::<String>()? {
            if let Some(v) = map.next_value_seed(Scalar)? {
                fields.set(&k, &v);
            }
        }
        Ok(fields)
    }
}
