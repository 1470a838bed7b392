//! `plain_acl.yml`: RocketMQ ACL 1.0's file, read as RocketMQ 4.x/5.x read it, so an
//! operator's existing file works unchanged.
//!
//! ```yaml
//! globalWhiteRemoteAddresses:      # these peers need no account at all
//!   - 10.10.103.*
//! accounts:
//!   - accessKey: RocketMQ          # longer than 6 characters
//!     secretKey: 12345678          # longer than 6 characters (a number is read as text)
//!     whiteRemoteAddress:          # peers that may use this key without a signature
//!     admin: false
//!     defaultTopicPerm: DENY       # for topics not listed below; DENY when absent
//!     defaultGroupPerm: SUB        # for groups not listed below; DENY when absent
//!     topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
//!     groupPerms: [groupA=DENY, groupB=PUB|SUB]
//! ```
//!
//! Unknown keys (`dataVersion`) are ignored, as RocketMQ ignores them. Where RocketMQ reads a
//! permission it does not know as DENY, corvus refuses the file: a typo should not silently
//! lock an application out (or, in the default perm, let it in).

use std::collections::HashMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use crate::addr::AddrPattern;
use crate::{Account, AclConfig, AclError, Perm};

/// RocketMQ's minimum: an access key and a secret key are longer than 6 characters.
const KEY_CHARS_MIN: usize = 7;

/// A YAML scalar read as text: `secretKey: 12345678` is a number to YAML, a string to
/// RocketMQ (SnakeYAML into a String field).
struct Text(String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Text, E> {
                Ok(Text(String::new()))
            }
        }
        d.deserialize_any(V)
    }
}

/// An allow-list pattern, checked where it is read (so a bad one names its line).
struct Pattern(AddrPattern);

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Text(t) = Text::deserialize(d)?;
        AddrPattern::parse(&t)
            .map(Pattern)
            .map_err(de::Error::custom)
    }
}

struct PermText(Perm);

impl<'de> Deserialize<'de> for PermText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Text(t) = Text::deserialize(d)?;
        Perm::parse(&t).map(PermText).map_err(de::Error::custom)
    }
}

/// `name=PERM`, as in `topicPerms` and `groupPerms`.
struct ResourcePerm(String, Perm);

impl<'de> Deserialize<'de> for ResourcePerm {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Text(t) = Text::deserialize(d)?;
        let parts: Vec<&str> = t.split('=').filter(|p| !p.is_empty()).collect();
        match parts.as_slice() {
            [name, perm] if !name.trim().is_empty() => {
                let perm = Perm::parse(perm).map_err(de::Error::custom)?;
                Ok(ResourcePerm(name.trim().to_string(), perm))
            }
            _ => Err(de::Error::custom(format!(
                "`{t}` is not `Name=PERM` (for example topicA=SUB)"
            ))),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawAccount {
    access_key: Option<Text>,
    secret_key: Option<Text>,
    white_remote_address: Option<Pattern>,
    admin: Option<bool>,
    default_topic_perm: Option<PermText>,
    default_group_perm: Option<PermText>,
    topic_perms: Option<Vec<ResourcePerm>>,
    group_perms: Option<Vec<ResourcePerm>>,
}

/// An account, checked where it is read.
struct AccountEntry(Account);

impl<'de> Deserialize<'de> for AccountEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawAccount::deserialize(d)?;
        let access_key = raw.access_key.map(|t| t.0).unwrap_or_default();
        let secret_key = raw.secret_key.map(|t| t.0).unwrap_or_default();
        if access_key.chars().count() < KEY_CHARS_MIN {
            return Err(de::Error::custom(format!(
                "accessKey `{access_key}` must be longer than 6 characters"
            )));
        }
        if secret_key.chars().count() < KEY_CHARS_MIN {
            return Err(de::Error::custom(format!(
                "the secretKey of `{access_key}` must be longer than 6 characters"
            )));
        }
        let table = |list: Option<Vec<ResourcePerm>>| -> HashMap<String, Perm> {
            list.unwrap_or_default()
                .into_iter()
                .map(|ResourcePerm(name, perm)| (name, perm))
                .collect()
        };
        Ok(AccountEntry(Account {
            access_key,
            secret_key,
            white_remote_address: raw
                .white_remote_address
                .map(|p| p.0)
                .unwrap_or(AddrPattern::Nobody),
            admin: raw.admin.unwrap_or(false),
            default_topic_perm: raw.default_topic_perm.map(|p| p.0).unwrap_or(Perm::DENY),
            default_group_perm: raw.default_group_perm.map(|p| p.0).unwrap_or(Perm::DENY),
            topic_perms: table(raw.topic_perms),
            group_perms: table(raw.group_perms),
        }))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawFile {
    global_white_remote_addresses: Option<Vec<Pattern>>,
    accounts: Option<Vec<AccountEntry>>,
}

pub(crate) fn parse(text: &str) -> Result<AclConfig, AclError> {
    if text.trim().is_empty() {
        return Ok(AclConfig::default());
    }
    let raw: RawFile = serde_yaml_ng::from_str(text).map_err(|e| AclError::Parse {
        line: e.location().map(|l| l.line()),
        reason: e.to_string(),
    })?;
    let mut accounts = HashMap::new();
    for AccountEntry(a) in raw.accounts.unwrap_or_default() {
        let key = a.access_key.clone();
        if accounts.insert(key.clone(), a).is_some() {
            return Err(AclError::Parse {
                line: line_of(text, &key),
                reason: format!("accessKey `{key}` appears twice"),
            });
        }
    }
    Ok(AclConfig {
        global_white: raw
            .global_white_remote_addresses
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.0)
            .collect(),
        accounts,
    })
}

/// The last line naming `accessKey: key`, for an error the parser cannot place.
fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains("accessKey") && l.contains(key))
        .map(|(i, _)| i + 1)
        .last()
}
