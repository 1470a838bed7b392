//! Access control for corvus: one rule set for the native protocol and RocketMQ's.
//!
//! * The rules are RocketMQ ACL 1.0's `plain_acl.yml` ([`AclConfig::parse`], format in
//!   `file.rs`): accounts with an access key and a secret key, per-topic and per-group
//!   permissions (`PUB`, `SUB`, `PUB|SUB`, `DENY`) with defaults for the rest, an admin flag,
//!   and IP allow-lists ([`AddrPattern`]).
//! * Who is asking: a RocketMQ request carries its access key and a signature over its
//!   fields ([`AclConfig::access_signed`], [`sign`]); a native connection logs in once by
//!   challenge-response and keeps its access key ([`AclConfig::login`],
//!   [`AclConfig::access`]).
//! * What is asked: an [`Action`] (publish to a topic, subscribe to a topic for a group, act
//!   for a group, read broker information, administer), checked by [`Access::check`], which
//!   answers a [`Denied`] saying what was refused.
//!
//! * ACL 2.0 (RocketMQ 5.3's users and policies): [`v2`], the model, its wire forms and the
//!   authorization decision; the broker stores and enforces it.
//!
//! * When it was asked: [`fresh`] refuses a signed request whose time (the workspace's
//!   own signers add one) is outside a window, and the exact replay of one within it.
//!
//! The order of the checks is RocketMQ's (`PlainPermissionManager.validate`): a peer in
//! `globalWhiteRemoteAddresses` may do anything without an account; otherwise the request
//! must name a known access key; a peer in that account's `whiteRemoteAddress` may then do
//! anything without a signature; otherwise the signature must verify and the account's
//! permissions decide. An admin account may do anything. A retry topic `%RETRY%<group>` is
//! the group's (its `groupPerms`/`defaultGroupPerm`, needing SUB), and a publish to
//! `RMQ_SYS_TRACE_TOPIC` needs no permission beyond a valid signature (RocketMQ's exception
//! for message traces).

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod addr;
mod file;
pub mod fresh;
mod reload;
pub mod sign;
pub mod v2;

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::path::Path;

pub use addr::{AddrPattern, LOCALHOST};
pub use reload::{AclFile, AuthFile, Reload, Rules, RulesFile, POLL_INTERVAL};

/// An access key and its secret (RocketMQ's `SessionCredentials`), as in the ACL file: what
/// a client signs its requests with and a broker logs in to its NameServer and master with.
/// The secret never crosses the wire, and `Debug` leaves it out.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

impl Credentials {
    pub fn new(access_key: impl Into<String>, secret_key: impl Into<String>) -> Credentials {
        Credentials {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

/// RocketMQ's retry-topic prefix: `%RETRY%<group>` belongs to the group.
pub const RETRY_TOPIC_PREFIX: &str = "%RETRY%";
/// RocketMQ's message-trace topic, which any valid account may publish to.
pub const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";
/// The file's name in RocketMQ (`<ROCKETMQ_HOME>/conf/plain_acl.yml`).
pub const FILE_NAME: &str = "plain_acl.yml";

#[derive(Debug, thiserror::Error)]
pub enum AclError {
    #[error("{}{reason}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
    Parse { line: Option<usize>, reason: String },
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// RocketMQ's permission bits (`Permission`): DENY = 1, PUB = 4, SUB = 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Perm(u8);

impl Perm {
    pub const DENY: Perm = Perm(1);
    pub const PUB: Perm = Perm(1 << 2);
    pub const SUB: Perm = Perm(1 << 3);
    pub const PUB_SUB: Perm = Perm((1 << 2) | (1 << 3));

    /// `PUB`, `SUB`, `PUB|SUB`, `SUB|PUB`, `DENY`; anything else is an error.
    pub fn parse(text: &str) -> Result<Perm, String> {
        match text.trim() {
            "PUB" => Ok(Perm::PUB),
            "SUB" => Ok(Perm::SUB),
            "PUB|SUB" | "SUB|PUB" => Ok(Perm::PUB_SUB),
            "DENY" => Ok(Perm::DENY),
            other => Err(format!(
                "`{other}` is not a permission (PUB, SUB, PUB|SUB or DENY)"
            )),
        }
    }

    /// RocketMQ's `checkPermission(needed, owned)`: DENY owns nothing.
    pub fn allows(self, needed: Perm) -> bool {
        self.0 & Perm::DENY.0 == 0 && self.0 & needed.0 != 0
    }
}

impl fmt::Display for Perm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match *self {
            Perm::PUB => "PUB",
            Perm::SUB => "SUB",
            Perm::PUB_SUB => "PUB|SUB",
            _ => "DENY",
        })
    }
}

/// One account of the file.
#[derive(Debug, Clone, PartialEq)]
pub struct Account {
    pub access_key: String,
    pub secret_key: String,
    /// Peers that may use this access key without a signature (and then do anything, as in
    /// RocketMQ); `Nobody` when blank.
    pub white_remote_address: AddrPattern,
    pub admin: bool,
    pub default_topic_perm: Perm,
    pub default_group_perm: Perm,
    pub topic_perms: HashMap<String, Perm>,
    /// By group name (the file's `groupA=SUB`), not by retry topic.
    pub group_perms: HashMap<String, Perm>,
}

/// The whole rule set: one file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AclConfig {
    global_white: Vec<AddrPattern>,
    accounts: HashMap<String, Account>,
}

/// What a request asks to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action<'a> {
    /// Write messages to a topic (PUB). To a retry topic: the group's SUB.
    Publish { topic: &'a str },
    /// Read a topic (SUB), for a group when one is named (the group's SUB too).
    Subscribe {
        topic: &'a str,
        group: Option<&'a str>,
    },
    /// Act as a member of a group: heartbeats, offsets, locks, send-back (the group's SUB).
    Group { group: &'a str },
    /// Read-only information that names no topic or group (status, routes, configs): any
    /// authenticated account.
    Info,
    /// A topic's route (a v5 client's QueryRoute): any authenticated account under ACL 1.0;
    /// ACL 2.0 asks Pub or Sub on the topic, as RocketMQ's Proxy does.
    Route { topic: &'a str },
    /// Changes to topics, groups, offsets of others, the broker's config, and anything not
    /// known to be one of the above: admin accounts only. `what` names it for the answer.
    Admin { what: &'a str },
}

/// A refusal, with what was refused; `Display` is the remark an answer carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied(pub String);

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NO_PERMISSION: {}", self.0)
    }
}

impl std::error::Error for Denied {}

/// What an authenticated request may do.
#[derive(Debug, Clone, Copy)]
pub enum Access<'a> {
    /// An allow-listed peer (global, or of its account): everything.
    All,
    /// Whatever this account's permissions allow.
    Account(&'a Account),
}

impl Access<'_> {
    /// Whether this request may do `action`; the refusal names the key and what it may not
    /// do ("NO_PERMISSION: RocketMQ may not PUB to topic T").
    pub fn check(&self, action: &Action) -> Result<(), Denied> {
        let a = match self {
            Access::All => return Ok(()),
            Access::Account(a) if a.admin => return Ok(()),
            Access::Account(a) => a,
        };
        let ak = &a.access_key;
        let group = |group: &str| -> Result<(), Denied> {
            let owned = a
                .group_perms
                .get(group)
                .copied()
                .unwrap_or(a.default_group_perm);
            if owned.allows(Perm::SUB) {
                Ok(())
            } else {
                Err(Denied(format!("{ak} may not SUB as group {group}")))
            }
        };
        let topic = |topic: &str, needed: Perm| -> Result<(), Denied> {
            let owned = a
                .topic_perms
                .get(topic)
                .copied()
                .unwrap_or(a.default_topic_perm);
            if owned.allows(needed) {
                Ok(())
            } else {
                let verb = if needed == Perm::PUB { "to" } else { "from" };
                Err(Denied(format!(
                    "{ak} may not {needed} {verb} topic {topic}"
                )))
            }
        };
        match *action {
            Action::Publish { topic: t } => match t.strip_prefix(RETRY_TOPIC_PREFIX) {
                Some(g) => group(g),
                None if t == TRACE_TOPIC => Ok(()),
                None => topic(t, Perm::PUB),
            },
            Action::Subscribe { topic: t, group: g } => {
                match t.strip_prefix(RETRY_TOPIC_PREFIX) {
                    Some(rg) => group(rg)?,
                    None => topic(t, Perm::SUB)?,
                }
                match g {
                    Some(g) => group(g),
                    None => Ok(()),
                }
            }
            Action::Group { group: g } => group(g),
            Action::Info | Action::Route { .. } => Ok(()),
            Action::Admin { what } => Err(Denied(format!(
                "{ak} is not an admin account and may not {what}"
            ))),
        }
    }
}

impl AclConfig {
    /// Parses the text of a `plain_acl.yml`; an error names the line where it can.
    pub fn parse(text: &str) -> Result<AclConfig, AclError> {
        file::parse(text)
    }

    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<AclConfig, AclError> {
        let text = std::fs::read_to_string(path).map_err(|source| AclError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|e| match e {
            AclError::Parse { line, reason } => AclError::Parse {
                line,
                reason: format!("{}: {reason}", path.display()),
            },
            other => other,
        })
    }

    pub fn account(&self, access_key: &str) -> Option<&Account> {
        self.accounts.get(access_key)
    }

    pub fn accounts(&self) -> impl Iterator<Item = &Account> {
        self.accounts.values()
    }

    /// Whether `peer` is in `globalWhiteRemoteAddresses`.
    pub fn globally_allowed(&self, peer: IpAddr) -> bool {
        self.global_white.iter().any(|p| p.matches(peer))
    }

    /// A request from `peer` on behalf of `access_key` whose signature is already known to
    /// be right (a logged-in native connection), or absent (`None`).
    pub fn access(&self, peer: IpAddr, access_key: Option<&str>) -> Result<Access<'_>, Denied> {
        if self.globally_allowed(peer) {
            return Ok(Access::All);
        }
        let ak = access_key.ok_or_else(|| {
            Denied(format!(
                "no access key: {peer} must log in (or sign its requests)"
            ))
        })?;
        let account = self
            .accounts
            .get(ak)
            .ok_or_else(|| Denied(format!("no acl config for {ak}")))?;
        if account.white_remote_address.matches(peer) {
            return Ok(Access::All);
        }
        Ok(Access::Account(account))
    }

    /// A RocketMQ request from `peer`: its ext fields (`AccessKey`, `Signature` among them)
    /// and body. Signed with [`sign::sign_remoting`] by the account's secret key, or from an
    /// allow-listed peer.
    pub fn access_signed<'a, 'f>(
        &'a self,
        peer: IpAddr,
        fields: impl IntoIterator<Item = (&'f str, &'f str)> + Clone,
        body: &[u8],
    ) -> Result<Access<'a>, Denied> {
        if self.globally_allowed(peer) {
            return Ok(Access::All);
        }
        let find = |key: &str| {
            fields
                .clone()
                .into_iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v)
        };
        let access = self.access(peer, find(sign::ACCESS_KEY))?;
        let Access::Account(account) = access else {
            return Ok(access);
        };
        let signature = find(sign::SIGNATURE).unwrap_or("");
        if sign::verify_remoting(fields.clone(), body, &account.secret_key, signature) {
            Ok(access)
        } else {
            Err(Denied(format!(
                "check signature failed for accessKey={}",
                account.access_key
            )))
        }
    }

    /// A gRPC call from `peer` with RocketMQ 5's `authorization` and `x-mq-date-time`
    /// metadata (see [`sign::parse_grpc_authorization`]), or from an allow-listed peer.
    pub fn access_grpc(
        &self,
        peer: IpAddr,
        authorization: Option<&str>,
        date_time: Option<&str>,
    ) -> Result<Access<'_>, Denied> {
        if self.globally_allowed(peer) {
            return Ok(Access::All);
        }
        let auth = match authorization {
            None => None,
            Some(value) => Some(sign::parse_grpc_authorization(value).ok_or_else(|| {
                Denied("the authorization metadata is not MQv2-HMAC-SHA1 with a Credential and a Signature".into())
            })?),
        };
        let access = self.access(peer, auth.map(|a| a.access_key))?;
        let (Access::Account(account), Some(auth)) = (access, auth) else {
            return Ok(access);
        };
        let date_time =
            date_time.ok_or_else(|| Denied("a signed call without x-mq-date-time".into()))?;
        if sign::verify_grpc(&account.secret_key, date_time, auth.signature) {
            Ok(access)
        } else {
            Err(Denied(format!(
                "check signature failed for accessKey={}",
                account.access_key
            )))
        }
    }

    /// A native login: `signature` is [`sign::login_signature`] over this connection's
    /// `nonce` by the account's secret key. On success the connection acts for `access_key`.
    pub fn login(&self, access_key: &str, nonce: &str, signature: &str) -> Result<(), Denied> {
        let account = self
            .accounts
            .get(access_key)
            .ok_or_else(|| Denied(format!("no acl config for {access_key}")))?;
        if nonce.is_empty()
            || !sign::verify_login(&account.secret_key, nonce, access_key, signature)
        {
            return Err(Denied(format!("login failed for accessKey={access_key}")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
dataVersion:
  - counter: 1
    timestamp: 1
"#;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn rocketmq_sample_file_parses() {
        let c = AclConfig::parse(FILE).unwrap();
        let a = c.account("RocketMQ").unwrap();
        assert_eq!(a.secret_key, "12345678");
        assert_eq!(a.white_remote_address, AddrPattern::Nobody);
        assert_eq!(a.default_topic_perm, Perm::DENY);
        assert_eq!(a.default_group_perm, Perm::SUB);
        assert_eq!(a.topic_perms["topicB"], Perm::PUB_SUB);
        assert_eq!(a.group_perms["groupA"], Perm::DENY);
        assert!(c.account("rocketmq2").unwrap().admin);
        assert!(c.globally_allowed(ip("192.168.0.5")));
        assert!(!c.globally_allowed(ip("127.0.0.1")));
    }

    #[test]
    fn permissions_per_topic_and_group() {
        let c = AclConfig::parse(FILE).unwrap();
        let peer = ip("127.0.0.1");
        let acc = c.access(peer, Some("RocketMQ")).unwrap();
        let pubs = |t| acc.check(&Action::Publish { topic: t });
        let subs = |t, g| acc.check(&Action::Subscribe { topic: t, group: g });
        assert!(pubs("topicB").is_ok());
        assert_eq!(
            pubs("topicC").unwrap_err().to_string(),
            "NO_PERMISSION: RocketMQ may not PUB to topic topicC"
        );
        assert!(pubs("topicA").is_err());
        assert!(pubs("other").is_err(), "defaultTopicPerm DENY");
        assert!(pubs(TRACE_TOPIC).is_ok());
        assert!(subs("topicC", Some("groupC")).is_ok());
        assert!(
            subs("topicC", Some("anyGroup")).is_ok(),
            "defaultGroupPerm SUB"
        );
        let e = subs("topicC", Some("groupA")).unwrap_err();
        assert_eq!(e.0, "RocketMQ may not SUB as group groupA");
        assert!(subs("topicA", Some("groupC")).is_err());
        // A retry topic is its group's.
        assert!(pubs("%RETRY%groupC").is_ok());
        assert!(pubs("%RETRY%groupA").is_err());
        assert!(subs("%RETRY%groupB", None).is_ok());
        assert!(acc.check(&Action::Info).is_ok());
        let e = acc
            .check(&Action::Admin {
                what: "create topic T",
            })
            .unwrap_err();
        assert!(e.to_string().contains("not an admin"), "{e}");
        let admin = c.access(peer, Some("rocketmq2")).unwrap();
        assert!(admin.check(&Action::Admin { what: "x" }).is_ok());
        assert!(admin.check(&Action::Publish { topic: "topicA" }).is_ok());
    }

    #[test]
    fn who_is_asking() {
        let c = AclConfig::parse(FILE).unwrap();
        let peer = ip("127.0.0.1");
        assert!(c.access(peer, None).is_err());
        assert!(c.access(peer, Some("nobody00")).is_err());
        assert!(matches!(c.access(ip("10.10.103.1"), None), Ok(Access::All)));
        assert!(matches!(
            c.access(ip("192.168.1.7"), Some("rocketmq2")),
            Ok(Access::All)
        ));

        let mut fields = vec![("topic", "topicB"), ("AccessKey", "RocketMQ")];
        let sig = sign::sign_remoting(fields.iter().copied(), b"payload", "12345678");
        fields.push(("Signature", &sig));
        let acc = c
            .access_signed(peer, fields.iter().copied(), b"payload")
            .unwrap();
        assert!(acc.check(&Action::Publish { topic: "topicB" }).is_ok());
        let e = c
            .access_signed(peer, fields.iter().copied(), b"tampered")
            .unwrap_err();
        assert_eq!(e.0, "check signature failed for accessKey=RocketMQ");
        assert!(c.access_signed(peer, [("topic", "t")], b"").is_err());
        assert!(c
            .access_signed(ip("10.10.103.9"), [("topic", "t")], b"")
            .is_ok());

        let nonce = sign::new_nonce();
        let s = sign::login_signature("12345678", &nonce, "RocketMQ");
        assert!(c.login("RocketMQ", &nonce, &s).is_ok());
        assert!(c.login("RocketMQ", &sign::new_nonce(), &s).is_err());
        assert!(c.login("rocketmq2", &nonce, &s).is_err());
    }

    #[test]
    fn malformed_files_name_the_line() {
        let cases = [
            ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 123\n", 2),
            (
                "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    topicPerms:\n      - topicA=PUBB\n",
                5,
            ),
            (
                "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    topicPerms:\n      - topicA\n",
                5,
            ),
            ("globalWhiteRemoteAddresses:\n  - 10.10.300.*\n", 2),
            ("accounts:\n  - accessKey: RocketMQ\n\tsecretKey: 12345678\n", 3),
            (
                "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n  - accessKey: RocketMQ\n    secretKey: 12345678\n",
                4,
            ),
        ];
        for (text, line) in cases {
            match AclConfig::parse(text) {
                Err(AclError::Parse {
                    line: Some(l),
                    reason,
                }) => {
                    assert_eq!(l, line, "{text}: {reason}");
                    let shown = AclError::Parse {
                        line: Some(l),
                        reason,
                    }
                    .to_string();
                    assert!(shown.starts_with(&format!("line {line}: ")), "{shown}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        assert_eq!(AclConfig::parse("").unwrap(), AclConfig::default());
    }
}
