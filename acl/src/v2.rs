//! ACL 2.0 (RocketMQ 5.3's RIP-68): users and the policies attached to them.
//!
//! * A [`User`] has a name, a password (the secret key its requests are signed with, as an
//!   ACL 1.0 account's), a type ([`UserType::Super`] skips every policy check) and a status
//!   (a disabled user is refused).
//! * An [`Acl`] belongs to one subject (`User:<name>`) and holds up to two [`Policy`]s, a
//!   CUSTOM one and a DEFAULT one, each a list of [`PolicyEntry`]s: a [`Resource`] pattern
//!   (`*`, `Topic:orders`, `Topic:order*`, `Group:*`), the [`Action`]s it covers, the source
//!   IPs it applies to (an address or a CIDR block; none: everywhere) and a [`Decision`].
//! * [`AuthMetadata::authorize`] decides a request as RocketMQ's
//!   `AclAuthorizationHandler` does: a super user may do anything; otherwise the entries of
//!   the CUSTOM policy that match the resource, the action and the caller's IP are taken,
//!   and only when none does those of the DEFAULT policy; the most specific entry decides
//!   (a named type before `*`, a literal name before a prefix before any name, a longer
//!   prefix before a shorter), DENY before ALLOW where two are equally specific (the
//!   documented rule: RocketMQ 5.3.3's code puts ALLOW first there, apache/rocketmq#9784);
//!   nothing matching is a refusal.
//! * The wire forms are RocketMQ's `UserInfo` and `AclInfo` JSON ([`UserInfo`], [`AclInfo`]);
//!   [`AuthMetadata`] is stored and replicated as one JSON document of both lists.
//! * [`AuthMetadata::from_v1`] carries a `plain_acl.yml`'s accounts over as RocketMQ's
//!   `AuthMigrator` does.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::{sign, AclConfig, Denied, Perm};

/// The subject prefix of a user (`SubjectType.USER`).
pub const USER_SUBJECT_PREFIX: &str = "User:";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserType {
    Super,
    Normal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserStatus {
    Enable,
    Disable,
}

#[derive(Clone, PartialEq, Eq)]
pub struct User {
    pub username: String,
    pub password: String,
    pub user_type: UserType,
    pub user_status: UserStatus,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("User")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("user_type", &self.user_type)
            .field("user_status", &self.user_status)
            .finish()
    }
}

/// RocketMQ's `ResourceType` (Unknown is never stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceType {
    Any,
    Cluster,
    Namespace,
    Topic,
    Group,
}

impl ResourceType {
    fn name(self) -> &'static str {
        match self {
            ResourceType::Any => "Any",
            ResourceType::Cluster => "Cluster",
            ResourceType::Namespace => "Namespace",
            ResourceType::Topic => "Topic",
            ResourceType::Group => "Group",
        }
    }

    fn parse(text: &str) -> Option<ResourceType> {
        [
            ResourceType::Any,
            ResourceType::Cluster,
            ResourceType::Namespace,
            ResourceType::Topic,
            ResourceType::Group,
        ]
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(text))
    }
}

/// How a resource pattern names its resources (`ResourcePattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NamePattern {
    /// Exactly this name.
    Literal,
    /// Every name starting with this one.
    Prefixed,
    /// Every name.
    Any,
}

/// A resource pattern of a policy entry, or (literal) the resource a request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub resource_type: ResourceType,
    /// The name, or the prefix without its `*`; empty for [`NamePattern::Any`].
    pub name: String,
    pub pattern: NamePattern,
}

impl Resource {
    /// The literal resource `name` of `resource_type`, as a request names it.
    pub fn named(resource_type: ResourceType, name: impl Into<String>) -> Resource {
        Resource {
            resource_type,
            name: name.into(),
            pattern: NamePattern::Literal,
        }
    }

    pub fn topic(name: impl Into<String>) -> Resource {
        Resource::named(ResourceType::Topic, name)
    }

    pub fn group(name: impl Into<String>) -> Resource {
        Resource::named(ResourceType::Group, name)
    }

    /// The cluster, which the auth admin requests are checked against.
    pub fn cluster() -> Resource {
        Resource::named(ResourceType::Cluster, "")
    }

    /// `*`, `<Type>:*`, `<Type>:<prefix>*` or `<Type>:<name>` (the type case-insensitive).
    pub fn parse(text: &str) -> Result<Resource, String> {
        let t = text.trim();
        if t == "*" {
            return Ok(Resource {
                resource_type: ResourceType::Any,
                name: String::new(),
                pattern: NamePattern::Any,
            });
        }
        let (ty, name) = t
            .split_once(':')
            .ok_or_else(|| format!("resource `{t}` is not `*` or `<Type>:<name>`"))?;
        let resource_type = ResourceType::parse(ty.trim())
            .ok_or_else(|| format!("resource `{t}`: unknown type `{ty}`"))?;
        let name = name.trim();
        let (name, pattern) = if name == "*" {
            ("", NamePattern::Any)
        } else if let Some(prefix) = name.strip_suffix('*') {
            (prefix, NamePattern::Prefixed)
        } else {
            (name, NamePattern::Literal)
        };
        if name.is_empty() && pattern != NamePattern::Any && resource_type != ResourceType::Cluster
        {
            return Err(format!("resource `{t}` names nothing"));
        }
        Ok(Resource {
            resource_type,
            name: name.to_owned(),
            pattern,
        })
    }

    /// Whether this pattern covers the literal resource `asked`.
    pub fn covers(&self, asked: &Resource) -> bool {
        if self.resource_type == ResourceType::Any {
            return true;
        }
        if self.resource_type != asked.resource_type {
            return false;
        }
        match self.pattern {
            NamePattern::Any => true,
            NamePattern::Literal => self.name == asked.name,
            NamePattern::Prefixed => asked.name.starts_with(&self.name),
        }
    }
}

impl fmt::Display for Resource {
    /// RocketMQ's resource key: `*`, `Topic:*`, `Topic:order*`, `Topic:orders`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.resource_type == ResourceType::Any {
            return f.write_str("*");
        }
        let ty = self.resource_type.name();
        match self.pattern {
            NamePattern::Any => write!(f, "{ty}:*"),
            NamePattern::Prefixed => write!(f, "{ty}:{}*", self.name),
            NamePattern::Literal => write!(f, "{ty}:{}", self.name),
        }
    }
}

/// RocketMQ's `Action`. In an entry, `All` covers every action; in a request, `Any` is
/// covered by every entry that names an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    All,
    Any,
    Pub,
    Sub,
    Create,
    Update,
    Delete,
    Get,
    List,
}

const ACTIONS: [Action; 9] = [
    Action::All,
    Action::Any,
    Action::Pub,
    Action::Sub,
    Action::Create,
    Action::Update,
    Action::Delete,
    Action::Get,
    Action::List,
];

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::All => "All",
            Action::Any => "Any",
            Action::Pub => "Pub",
            Action::Sub => "Sub",
            Action::Create => "Create",
            Action::Update => "Update",
            Action::Delete => "Delete",
            Action::Get => "Get",
            Action::List => "List",
        }
    }

    pub fn parse(text: &str) -> Result<Action, String> {
        ACTIONS
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(text.trim()))
            .ok_or_else(|| format!("`{text}` is not an action (Pub, Sub, Create, Update, Delete, Get, List, All, Any)"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Decision {
    // DENY sorts first: at equal specificity it wins.
    Deny,
    Allow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyType {
    Custom,
    Default,
}

impl PolicyType {
    pub fn name(self) -> &'static str {
        match self {
            PolicyType::Custom => "Custom",
            PolicyType::Default => "Default",
        }
    }

    /// `Custom` or `Default` (any case); blank is CUSTOM, as in RocketMQ.
    pub fn parse(text: &str) -> Result<PolicyType, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "custom" => Ok(PolicyType::Custom),
            "default" => Ok(PolicyType::Default),
            other => Err(format!(
                "`{other}` is not a policy type (Custom or Default)"
            )),
        }
    }
}

/// A source IP of an entry: one address or a CIDR block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpRange {
    text: String,
    net: IpAddr,
    prefix_bits: u8,
}

impl IpRange {
    pub fn parse(text: &str) -> Result<IpRange, String> {
        let t = text.trim();
        let bad = || format!("`{t}` is not an IP address or a CIDR block");
        let (addr, bits) = match t.split_once('/') {
            Some((a, b)) => (a, Some(b.parse::<u8>().map_err(|_| bad())?)),
            None => (t, None),
        };
        let net = addr.parse::<IpAddr>().map_err(|_| bad())?.to_canonical();
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix_bits = bits.unwrap_or(max);
        if prefix_bits > max {
            return Err(bad());
        }
        Ok(IpRange {
            text: t.to_owned(),
            net,
            prefix_bits,
        })
    }

    pub fn contains(&self, peer: IpAddr) -> bool {
        let (a, b, bits) = match (self.net, peer.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(p)) => (
                u128::from(u32::from(n)) << 96,
                u128::from(u32::from(p)) << 96,
                self.prefix_bits,
            ),
            (IpAddr::V6(n), IpAddr::V6(p)) => (u128::from(n), u128::from(p), self.prefix_bits),
            _ => return false,
        };
        let mask = if bits == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(bits))
        };
        a & mask == b & mask
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyEntry {
    pub resource: Resource,
    pub actions: Vec<Action>,
    /// Empty: every source.
    pub source_ips: Vec<IpRange>,
    pub decision: Decision,
}

impl PolicyEntry {
    fn covers(&self, resource: &Resource, actions: &[Action], peer: IpAddr) -> bool {
        let action = self.actions.contains(&Action::All)
            || actions.iter().any(|a| match a {
                Action::Any => !self.actions.is_empty(),
                a => self.actions.contains(a),
            });
        action
            && self.resource.covers(resource)
            && (self.source_ips.is_empty() || self.source_ips.iter().any(|r| r.contains(peer)))
    }

    /// The sort key of RocketMQ's comparator, most specific first, DENY first last.
    fn specificity(&self) -> (bool, NamePattern, std::cmp::Reverse<usize>, Decision) {
        (
            self.resource.resource_type == ResourceType::Any,
            self.resource.pattern,
            std::cmp::Reverse(self.resource.name.len()),
            self.decision,
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub policy_type: PolicyType,
    pub entries: Vec<PolicyEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    /// `User:<name>`.
    pub subject: String,
    pub policies: Vec<Policy>,
}

impl Acl {
    fn policy(&self, t: PolicyType) -> Option<&Policy> {
        self.policies.iter().find(|p| p.policy_type == t)
    }

    /// RocketMQ's `Acl.updatePolicy`: each entry of `policies` replaces the entry of the same
    /// resource in the policy of its type, or is added.
    fn merge(&mut self, policies: Vec<Policy>) {
        for p in policies {
            match self
                .policies
                .iter_mut()
                .find(|mine| mine.policy_type == p.policy_type)
            {
                None => self.policies.push(p),
                Some(mine) => {
                    for e in p.entries {
                        match mine.entries.iter_mut().find(|m| m.resource == e.resource) {
                            Some(m) => *m = e,
                            None => mine.entries.push(e),
                        }
                    }
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.policies.iter().all(|p| p.entries.is_empty())
    }
}

// ---------------------------------------------------------------------------------------
// Wire forms (RocketMQ's `UserInfo`, `AclInfo`).

/// RocketMQ's `UserInfo`: every field a string, any of them absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_status: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AclInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    #[serde(default)]
    pub policies: Vec<PolicyInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_type: Option<String>,
    #[serde(default)]
    pub entries: Vec<PolicyEntryInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyEntryInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    #[serde(default)]
    pub actions: Vec<String>,
    #[serde(default)]
    pub source_ips: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
}

fn parse_user_type(text: &str) -> Result<UserType, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "super" => Ok(UserType::Super),
        "normal" | "" => Ok(UserType::Normal),
        other => Err(format!("`{other}` is not a user type (Super or Normal)")),
    }
}

fn parse_user_status(text: &str) -> Result<UserStatus, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "enable" | "" => Ok(UserStatus::Enable),
        "disable" => Ok(UserStatus::Disable),
        other => Err(format!(
            "`{other}` is not a user status (enable or disable)"
        )),
    }
}

impl User {
    pub fn info(&self) -> UserInfo {
        UserInfo {
            username: Some(self.username.clone()),
            password: Some(self.password.clone()),
            user_type: Some(
                match self.user_type {
                    UserType::Super => "Super",
                    UserType::Normal => "Normal",
                }
                .into(),
            ),
            user_status: Some(
                match self.user_status {
                    UserStatus::Enable => "enable",
                    UserStatus::Disable => "disable",
                }
                .into(),
            ),
        }
    }

    /// A whole user from its wire form: a name and a password are required.
    pub fn from_info(info: &UserInfo) -> Result<User, String> {
        let username = info.username.as_deref().unwrap_or("").trim();
        if username.is_empty() {
            return Err("username is blank".into());
        }
        let password = info.password.as_deref().unwrap_or("");
        if password.is_empty() {
            return Err(format!("the password of {username} is blank"));
        }
        Ok(User {
            username: username.to_owned(),
            password: password.to_owned(),
            user_type: parse_user_type(info.user_type.as_deref().unwrap_or(""))?,
            user_status: parse_user_status(info.user_status.as_deref().unwrap_or(""))?,
        })
    }

    /// RocketMQ's update: the fields `info` carries replace this user's.
    pub fn updated(&self, info: &UserInfo) -> Result<User, String> {
        let mut u = self.clone();
        if let Some(p) = info.password.as_deref().filter(|p| !p.is_empty()) {
            u.password = p.to_owned();
        }
        if let Some(t) = info.user_type.as_deref().filter(|t| !t.trim().is_empty()) {
            u.user_type = parse_user_type(t)?;
        }
        if let Some(s) = info.user_status.as_deref().filter(|s| !s.trim().is_empty()) {
            u.user_status = parse_user_status(s)?;
        }
        Ok(u)
    }
}

impl PolicyEntry {
    pub fn info(&self) -> PolicyEntryInfo {
        PolicyEntryInfo {
            resource: Some(self.resource.to_string()),
            actions: self.actions.iter().map(|a| a.name().to_owned()).collect(),
            source_ips: self.source_ips.iter().map(|r| r.to_string()).collect(),
            decision: Some(
                match self.decision {
                    Decision::Allow => "Allow",
                    Decision::Deny => "Deny",
                }
                .into(),
            ),
        }
    }

    pub fn from_info(info: &PolicyEntryInfo) -> Result<PolicyEntry, String> {
        let resource = Resource::parse(info.resource.as_deref().unwrap_or(""))?;
        let actions = info
            .actions
            .iter()
            .filter(|a| !a.trim().is_empty())
            .map(|a| Action::parse(a))
            .collect::<Result<Vec<_>, _>>()?;
        if actions.is_empty() {
            return Err(format!("the entry for {resource} names no action"));
        }
        let source_ips = info
            .source_ips
            .iter()
            .filter(|s| !s.trim().is_empty())
            .map(|s| IpRange::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        let decision = match info
            .decision
            .as_deref()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
            .as_str()
        {
            "allow" => Decision::Allow,
            "deny" => Decision::Deny,
            other => return Err(format!("`{other}` is not a decision (Allow or Deny)")),
        };
        Ok(PolicyEntry {
            resource,
            actions,
            source_ips,
            decision,
        })
    }
}

impl Acl {
    pub fn info(&self) -> AclInfo {
        AclInfo {
            subject: Some(self.subject.clone()),
            policies: self
                .policies
                .iter()
                .map(|p| PolicyInfo {
                    policy_type: Some(p.policy_type.name().into()),
                    entries: p.entries.iter().map(PolicyEntry::info).collect(),
                })
                .collect(),
        }
    }

    /// An ACL from its wire form: a subject `User:<name>` and at least one entry.
    pub fn from_info(info: &AclInfo) -> Result<Acl, String> {
        let subject = info.subject.as_deref().unwrap_or("").trim();
        user_of_subject(subject)?;
        let mut policies: Vec<Policy> = Vec::new();
        for p in &info.policies {
            let policy_type = PolicyType::parse(p.policy_type.as_deref().unwrap_or(""))?;
            let entries = p
                .entries
                .iter()
                .map(PolicyEntry::from_info)
                .collect::<Result<Vec<_>, _>>()?;
            let policy = Policy {
                policy_type,
                entries,
            };
            let mut acl = Acl {
                subject: String::new(),
                policies: std::mem::take(&mut policies),
            };
            acl.merge(vec![policy]);
            policies = acl.policies;
        }
        let acl = Acl {
            subject: subject.to_owned(),
            policies,
        };
        if acl.is_empty() {
            return Err(format!("the acl of {subject} has no entry"));
        }
        Ok(acl)
    }
}

/// The user name of a subject `User:<name>`.
pub fn user_of_subject(subject: &str) -> Result<&str, String> {
    subject
        .strip_prefix(USER_SUBJECT_PREFIX)
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| format!("subject `{subject}` is not `User:<name>`"))
}

// ---------------------------------------------------------------------------------------
// The rule set.

/// Why a change to the users or ACLs is refused; the admin requests answer each with its
/// RocketMQ code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    #[error("{0}")]
    Invalid(String),
    #[error("user {0} does not exist")]
    UserNotExist(String),
    #[error("user {0} already exists")]
    UserExists(String),
}

/// Every user and ACL of a broker; stored and replicated whole as its JSON form
/// ([`AuthMetadata::to_json`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthMetadata {
    users: BTreeMap<String, User>,
    /// By subject.
    acls: BTreeMap<String, Acl>,
}

/// The stored form.
#[derive(Serialize, Deserialize)]
struct Stored {
    users: Vec<UserInfo>,
    acls: Vec<AclInfo>,
}

/// Who a request was authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub username: String,
    pub is_super: bool,
}

impl AuthMetadata {
    pub fn to_json(&self) -> Vec<u8> {
        let stored = Stored {
            users: self.users.values().map(User::info).collect(),
            acls: self.acls.values().map(Acl::info).collect(),
        };
        // Strings and lists only: serialization cannot fail.
        serde_json::to_vec_pretty(&stored).unwrap_or_default()
    }

    pub fn from_json(bytes: &[u8]) -> Result<AuthMetadata, String> {
        let stored: Stored = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let mut m = AuthMetadata::default();
        for u in &stored.users {
            let u = User::from_info(u)?;
            m.users.insert(u.username.clone(), u);
        }
        for a in &stored.acls {
            let a = Acl::from_info(a)?;
            m.acls.insert(a.subject.clone(), a);
        }
        Ok(m)
    }

    pub fn user(&self, username: &str) -> Option<&User> {
        self.users.get(username)
    }

    /// Users whose name contains `filter` (all with a blank one).
    pub fn users(&self, filter: &str) -> Vec<&User> {
        self.users
            .values()
            .filter(|u| u.username.contains(filter.trim()))
            .collect()
    }

    pub fn acl(&self, subject: &str) -> Option<&Acl> {
        self.acls.get(subject)
    }

    /// ACLs whose subject contains `subject_filter`, with only their entries whose resource
    /// contains `resource_filter`, except that an ACL whose subject contains
    /// `resource_filter` is taken whole (RocketMQ's rule: rocketmq-dashboard's search asks
    /// once by subject and once by resource with the same text, and keeps one row per
    /// distinct answer). Blank filters take all.
    pub fn acls(&self, subject_filter: &str, resource_filter: &str) -> Vec<Acl> {
        let rf = resource_filter.trim();
        self.acls
            .values()
            .filter(|a| a.subject.contains(subject_filter.trim()))
            .filter_map(|a| {
                let mut a = a.clone();
                if !a.subject.contains(rf) {
                    for p in &mut a.policies {
                        p.entries.retain(|e| e.resource.to_string().contains(rf));
                    }
                }
                a.policies.retain(|p| !p.entries.is_empty());
                (!a.policies.is_empty()).then_some(a)
            })
            .collect()
    }

    /// Creates a user; creating one exactly as it is succeeds (a broker of several cores is
    /// several brokers to RocketMQ's tools, which send the same create to each).
    pub fn create_user(&mut self, user: User) -> Result<(), ChangeError> {
        if let Some(old) = self.users.get(&user.username) {
            if *old == user {
                return Ok(());
            }
            return Err(ChangeError::UserExists(user.username));
        }
        self.users.insert(user.username.clone(), user);
        Ok(())
    }

    pub fn update_user(&mut self, username: &str, info: &UserInfo) -> Result<User, ChangeError> {
        let old = self
            .users
            .get(username)
            .ok_or_else(|| ChangeError::UserNotExist(username.to_owned()))?;
        let new = old.updated(info).map_err(ChangeError::Invalid)?;
        self.users.insert(username.to_owned(), new.clone());
        Ok(new)
    }

    /// Deletes the user and its ACL (a user not there: nothing, as in RocketMQ).
    pub fn delete_user(&mut self, username: &str) {
        self.users.remove(username);
        self.acls
            .remove(&format!("{USER_SUBJECT_PREFIX}{username}"));
    }

    /// RocketMQ's createAcl and updateAcl alike: the subject's user must exist; its
    /// entries replace those of the same resource and policy type, or are added.
    pub fn upsert_acl(&mut self, acl: Acl) -> Result<(), ChangeError> {
        let user = user_of_subject(&acl.subject).map_err(ChangeError::Invalid)?;
        if !self.users.contains_key(user) {
            return Err(ChangeError::UserNotExist(user.to_owned()));
        }
        match self.acls.get_mut(&acl.subject) {
            Some(mine) => mine.merge(acl.policies),
            None => {
                self.acls.insert(acl.subject.clone(), acl);
            }
        }
        Ok(())
    }

    /// RocketMQ's deleteAcl: with no `resources`, the subject's whole ACL; otherwise the
    /// entries of those resources in the policy of `policy_type` (an ACL left empty goes).
    /// Deleting what is not there succeeds, as a second delete of the same does (the tools
    /// send it to every core).
    pub fn delete_acl(
        &mut self,
        subject: &str,
        policy_type: PolicyType,
        resources: &[Resource],
    ) -> Result<(), ChangeError> {
        let user = user_of_subject(subject).map_err(ChangeError::Invalid)?;
        if !self.users.contains_key(user) {
            return Err(ChangeError::UserNotExist(user.to_owned()));
        }
        let Some(acl) = self.acls.get_mut(subject) else {
            return Ok(());
        };
        if resources.is_empty() {
            self.acls.remove(subject);
            return Ok(());
        }
        if let Some(p) = acl
            .policies
            .iter_mut()
            .find(|p| p.policy_type == policy_type)
        {
            p.entries.retain(|e| !resources.contains(&e.resource));
        }
        acl.policies.retain(|p| !p.entries.is_empty());
        if acl.is_empty() {
            self.acls.remove(subject);
        }
        Ok(())
    }

    /// Who signed a RocketMQ request (its ext fields, `AccessKey` and `Signature` among
    /// them, and body): the user named by `AccessKey`, enabled, whose password verifies
    /// the signature.
    pub fn authenticate_remoting<'f>(
        &self,
        fields: impl IntoIterator<Item = (&'f str, &'f str)> + Clone,
        body: &[u8],
    ) -> Result<Subject, Denied> {
        let find = |key: &str| {
            fields
                .clone()
                .into_iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v)
        };
        let name = find(sign::ACCESS_KEY)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| Denied("no AccessKey: the request must be signed by a user".into()))?;
        let user = self.enabled_user(name)?;
        let signature = find(sign::SIGNATURE).unwrap_or("");
        if sign::verify_remoting(fields, body, &user.password, signature) {
            Ok(subject(user))
        } else {
            Err(Denied(format!("check signature failed for user {name}")))
        }
    }

    /// Who signed a gRPC call (RocketMQ 5's `authorization` and `x-mq-date-time`).
    pub fn authenticate_grpc(
        &self,
        authorization: Option<&str>,
        date_time: Option<&str>,
    ) -> Result<Subject, Denied> {
        let auth = authorization
            .and_then(sign::parse_grpc_authorization)
            .ok_or_else(|| Denied("the call is not signed (authorization metadata)".into()))?;
        let user = self.enabled_user(auth.access_key)?;
        let date_time =
            date_time.ok_or_else(|| Denied("a signed call without x-mq-date-time".into()))?;
        if sign::verify_grpc(&user.password, date_time, auth.signature) {
            Ok(subject(user))
        } else {
            Err(Denied(format!(
                "check signature failed for user {}",
                auth.access_key
            )))
        }
    }

    /// A native login (see [`sign::login_signature`]) of `username` over the connection's
    /// `nonce`, keyed by the user's password.
    pub fn login(&self, username: &str, nonce: &str, signature: &str) -> Result<Subject, Denied> {
        let user = self.enabled_user(username)?;
        if nonce.is_empty() || !sign::verify_login(&user.password, nonce, username, signature) {
            return Err(Denied(format!("login failed for user {username}")));
        }
        Ok(subject(user))
    }

    /// The user a logged-in connection acts for, if it still exists and is enabled.
    pub fn logged_in(&self, username: &str) -> Result<Subject, Denied> {
        self.enabled_user(username).map(subject)
    }

    fn enabled_user(&self, name: &str) -> Result<&User, Denied> {
        let user = self
            .users
            .get(name)
            .ok_or_else(|| Denied(format!("user {name} does not exist")))?;
        if user.user_status == UserStatus::Disable {
            return Err(Denied(format!("user {name} is disabled")));
        }
        Ok(user)
    }

    /// Whether `username`, calling from `peer`, may do any of `actions` on `resource`.
    pub fn authorize(
        &self,
        username: &str,
        resource: &Resource,
        actions: &[Action],
        peer: IpAddr,
    ) -> Result<(), Denied> {
        let user = self
            .users
            .get(username)
            .ok_or_else(|| Denied(format!("user {username} does not exist")))?;
        if user.user_type == UserType::Super {
            return Ok(());
        }
        let what = || {
            let names: Vec<&str> = actions.iter().map(|a| a.name()).collect();
            format!("{username} may not {} {resource}", names.join("|"))
        };
        let subject = format!("{USER_SUBJECT_PREFIX}{username}");
        let acl = self
            .acls
            .get(&subject)
            .ok_or_else(|| Denied(format!("{}: no policy for {subject}", what())))?;
        let matching = |t| -> Vec<&PolicyEntry> {
            acl.policy(t)
                .map(|p| {
                    p.entries
                        .iter()
                        .filter(|e| e.covers(resource, actions, peer))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut found = matching(PolicyType::Custom);
        if found.is_empty() {
            found = matching(PolicyType::Default);
        }
        match found.into_iter().min_by_key(|e| e.specificity()) {
            None => Err(Denied(format!("{}: no matched policy", what()))),
            Some(e) if e.decision == Decision::Deny => Err(Denied(format!(
                "{}: denied by the entry for {}",
                what(),
                e.resource
            ))),
            Some(_) => Ok(()),
        }
    }

    /// RocketMQ's `AuthMigrator`: each `plain_acl.yml` account not already a user becomes
    /// one (an admin account a super user) with CUSTOM entries for its topic and group
    /// permissions and DEFAULT entries for its defaults. IP allow-lists are not carried
    /// over (as in RocketMQ). Returns the names of the users added.
    pub fn migrate_v1(&mut self, v1: &AclConfig) -> Vec<String> {
        let mut added = Vec::new();
        let mut accounts: Vec<_> = v1.accounts().collect();
        accounts.sort_by(|a, b| a.access_key.cmp(&b.access_key));
        for a in accounts {
            if self.users.contains_key(&a.access_key) {
                continue;
            }
            let user = User {
                username: a.access_key.clone(),
                password: a.secret_key.clone(),
                user_type: if a.admin {
                    UserType::Super
                } else {
                    UserType::Normal
                },
                user_status: UserStatus::Enable,
            };
            self.users.insert(user.username.clone(), user);
            added.push(a.access_key.clone());
            if a.admin {
                continue;
            }
            let entry = |resource: Resource, perm: Perm| {
                let (actions, decision) = match perm {
                    Perm::PUB => (vec![Action::Pub], Decision::Allow),
                    Perm::SUB => (vec![Action::Sub], Decision::Allow),
                    Perm::PUB_SUB => (vec![Action::Pub, Action::Sub], Decision::Allow),
                    _ => (vec![Action::All], Decision::Deny),
                };
                PolicyEntry {
                    resource,
                    actions,
                    source_ips: Vec::new(),
                    decision,
                }
            };
            let mut custom: Vec<PolicyEntry> = a
                .topic_perms
                .iter()
                .map(|(t, p)| entry(Resource::topic(t.clone()), *p))
                .chain(
                    a.group_perms
                        .iter()
                        .map(|(g, p)| entry(Resource::group(g.clone()), *p)),
                )
                .collect();
            custom.sort_by_key(|e| e.resource.to_string());
            let any = |ty| Resource {
                resource_type: ty,
                name: String::new(),
                pattern: NamePattern::Any,
            };
            let default = vec![
                entry(any(ResourceType::Topic), a.default_topic_perm),
                entry(any(ResourceType::Group), a.default_group_perm),
            ];
            let subject = format!("{USER_SUBJECT_PREFIX}{}", a.access_key);
            let mut policies = vec![Policy {
                policy_type: PolicyType::Default,
                entries: default,
            }];
            if !custom.is_empty() {
                policies.insert(
                    0,
                    Policy {
                        policy_type: PolicyType::Custom,
                        entries: custom,
                    },
                );
            }
            self.acls.insert(subject.clone(), Acl { subject, policies });
        }
        added
    }
}

fn subject(user: &User) -> Subject {
    Subject {
        username: user.username.clone(),
        is_super: user.user_type == UserType::Super,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn entry(resource: &str, actions: &[&str], ips: &[&str], decision: &str) -> PolicyEntryInfo {
        PolicyEntryInfo {
            resource: Some(resource.into()),
            actions: actions.iter().map(|a| a.to_string()).collect(),
            source_ips: ips.iter().map(|a| a.to_string()).collect(),
            decision: Some(decision.into()),
        }
    }

    fn user(name: &str, ty: &str) -> User {
        User::from_info(&UserInfo {
            username: Some(name.into()),
            password: Some(format!("{name}-secret")),
            user_type: Some(ty.into()),
            user_status: None,
        })
        .unwrap()
    }

    fn acl(subject: &str, custom: Vec<PolicyEntryInfo>, default: Vec<PolicyEntryInfo>) -> Acl {
        let mut policies = vec![PolicyInfo {
            policy_type: Some("Custom".into()),
            entries: custom,
        }];
        if !default.is_empty() {
            policies.push(PolicyInfo {
                policy_type: Some("Default".into()),
                entries: default,
            });
        }
        Acl::from_info(&AclInfo {
            subject: Some(subject.into()),
            policies,
        })
        .unwrap()
    }

    /// Users `root` (super) and `app` with a policy exercising every rule.
    fn metadata() -> AuthMetadata {
        let mut m = AuthMetadata::default();
        m.create_user(user("root", "Super")).unwrap();
        m.create_user(user("app", "Normal")).unwrap();
        m.create_user(user("idle", "Normal")).unwrap();
        m.upsert_acl(acl(
            "User:app",
            vec![
                entry("Topic:orders", &["Pub"], &[], "Allow"),
                entry("Topic:order*", &["Pub", "Sub"], &[], "Deny"),
                entry("Topic:ord*", &["Pub", "Sub"], &[], "Allow"),
                entry(
                    "Topic:lan",
                    &["Pub"],
                    &["10.0.0.0/8", "192.168.1.7"],
                    "Allow",
                ),
                entry("Group:g1", &["Sub"], &[], "Allow"),
                entry("Topic:secret", &["All"], &[], "Deny"),
                entry("*", &["Get"], &[], "Allow"),
            ],
            vec![entry("Topic:*", &["Sub"], &[], "Allow")],
        ))
        .unwrap();
        m
    }

    #[test]
    fn the_decision_table() {
        let m = metadata();
        let here = ip("127.0.0.1");
        let t = Resource::topic;
        let g = Resource::group;
        let cases: &[(&str, Resource, &[Action], IpAddr, bool)] = &[
            // A literal entry beats the prefixes around it.
            ("app", t("orders"), &[Action::Pub], here, true),
            // The longer prefix (Deny) beats the shorter (Allow).
            ("app", t("order-eu"), &[Action::Pub], here, false),
            ("app", t("ordinal"), &[Action::Pub], here, true),
            // Not covered by the literal entry's actions: the prefixes decide.
            ("app", t("orders"), &[Action::Sub], here, false),
            // Source IPs: a CIDR block or one address.
            ("app", t("lan"), &[Action::Pub], ip("10.1.2.3"), true),
            ("app", t("lan"), &[Action::Pub], ip("192.168.1.7"), true),
            ("app", t("lan"), &[Action::Pub], ip("::ffff:10.9.9.9"), true),
            ("app", t("lan"), &[Action::Pub], ip("192.168.1.8"), false),
            // A custom entry on the resource, but not for this action: the DEFAULT
            // policy is looked at only when no CUSTOM entry matches.
            ("app", t("lan"), &[Action::Sub], here, true),
            ("app", t("secret"), &[Action::Sub], here, false),
            ("app", t("secret"), &[Action::Pub], here, false),
            // Default policy: Topic:* Sub.
            ("app", t("other"), &[Action::Sub], here, true),
            ("app", t("other"), &[Action::Pub], here, false),
            // `*` Get covers every type; nothing covers Create (default deny).
            ("app", g("g9"), &[Action::Get], here, true),
            ("app", t("other"), &[Action::Create], here, false),
            ("app", Resource::cluster(), &[Action::Update], here, false),
            ("app", g("g1"), &[Action::Sub], here, true),
            ("app", g("g2"), &[Action::Sub], here, false),
            // Either of two actions suffices (a route query asks Pub or Sub).
            ("app", t("other"), &[Action::Pub, Action::Sub], here, true),
            // A request asking Any is covered by an entry of any action.
            ("app", t("orders"), &[Action::Any], here, true),
            // A super user may do anything; a user without an ACL nothing.
            ("root", t("secret"), &[Action::Pub], here, true),
            ("root", Resource::cluster(), &[Action::Update], here, true),
            ("idle", t("orders"), &[Action::Pub], here, false),
            ("nobody", t("orders"), &[Action::Pub], here, false),
        ];
        for (who, res, actions, peer, allowed) in cases {
            let got = m.authorize(who, res, actions, *peer);
            assert_eq!(
                got.is_ok(),
                *allowed,
                "{who} {actions:?} {res} from {peer}: {got:?}"
            );
        }
        let e = m
            .authorize("app", &t("order-eu"), &[Action::Pub], here)
            .unwrap_err();
        assert_eq!(
            e.0,
            "app may not Pub Topic:order-eu: denied by the entry for Topic:order*"
        );
    }

    #[test]
    fn deny_beats_allow_at_equal_specificity() {
        // One resource holds one entry, so entries of equal specificity have two
        // resources: the sort puts DENY first among them.
        let e = |resource: &str, decision| PolicyEntry {
            resource: Resource::parse(resource).unwrap(),
            actions: vec![Action::Pub],
            source_ips: vec![],
            decision,
        };
        let mut entries = [
            e("Topic:x*", Decision::Allow),
            e("Topic:y*", Decision::Deny),
        ];
        entries.sort_by_key(PolicyEntry::specificity);
        assert_eq!(entries[0].decision, Decision::Deny);
        // A type named beats `*`; a literal beats a prefix beats any name.
        let mut entries = [
            e("*", Decision::Deny),
            e("Topic:*", Decision::Deny),
            e("Topic:ab*", Decision::Deny),
            e("Topic:abc", Decision::Allow),
        ];
        entries.sort_by_key(PolicyEntry::specificity);
        let order: Vec<String> = entries.iter().map(|e| e.resource.to_string()).collect();
        assert_eq!(order, ["Topic:abc", "Topic:ab*", "Topic:*", "*"]);
    }

    #[test]
    fn resources_and_ips_parse_as_rocketmq_writes_them() {
        for text in [
            "*",
            "Topic:*",
            "Topic:order*",
            "Topic:orders",
            "Group:g",
            "Cluster:c",
        ] {
            assert_eq!(Resource::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(
            Resource::parse("topic:x").unwrap().resource_type,
            ResourceType::Topic
        );
        for bad in ["", "Topic", "Queue:x", "Topic:"] {
            assert!(Resource::parse(bad).is_err(), "{bad}");
        }
        assert!(IpRange::parse("10.0.0.0/33").is_err());
        assert!(IpRange::parse("10.0.0.*").is_err());
        assert!(IpRange::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(IpRange::parse("fd00::/8").unwrap().contains(ip("fd12::1")));
        assert!(!IpRange::parse("fd00::/8").unwrap().contains(ip("10.0.0.1")));
    }

    #[test]
    fn users_and_acls_change_as_rocketmq_changes_them() {
        let mut m = metadata();
        assert_eq!(
            m.create_user(user("app", "Normal")),
            Ok(()),
            "the same again"
        );
        assert_eq!(
            m.create_user(user("app", "Super")),
            Err(ChangeError::UserExists("app".into()))
        );
        let u = m
            .update_user(
                "app",
                &UserInfo {
                    password: Some("new".into()),
                    user_status: Some("disable".into()),
                    ..UserInfo::default()
                },
            )
            .unwrap();
        assert_eq!(
            (u.password.as_str(), u.user_type),
            ("new", UserType::Normal)
        );
        assert!(m
            .update_user("ghost", &UserInfo::default())
            .is_err_and(|e| e == ChangeError::UserNotExist("ghost".into())));
        // An ACL for a user that does not exist is refused.
        assert!(m
            .upsert_acl(acl(
                "User:ghost",
                vec![entry("*", &["All"], &[], "Allow")],
                vec![]
            ))
            .is_err());
        // Updating an entry of the same resource replaces it; others are added.
        m.upsert_acl(acl(
            "User:app",
            vec![
                entry("Topic:orders", &["Sub"], &[], "Allow"),
                entry("Topic:new", &["Pub"], &[], "Allow"),
            ],
            vec![],
        ))
        .unwrap();
        let a = m.acl("User:app").unwrap().info();
        let custom = &a.policies[0].entries;
        let orders = custom
            .iter()
            .find(|e| e.resource.as_deref() == Some("Topic:orders"))
            .unwrap();
        assert_eq!(orders.actions, ["Sub"]);
        assert_eq!(custom.len(), 8);
        // Filters.
        assert_eq!(m.acls("app", "Topic:new")[0].policies[0].entries.len(), 1);
        assert!(m.acls("root", "").is_empty());
        // A resource filter the subject holds takes the ACL whole (dashboard's search).
        assert_eq!(m.acls("", "app")[0].policies[0].entries.len(), 8);
        assert_eq!(m.acls("", "app").len(), 1);
        assert_eq!(m.users("").len(), 3);
        assert_eq!(m.users("ro").len(), 1);
        // Deleting entries, then the rest, then the user.
        let r = |s: &str| Resource::parse(s).unwrap();
        m.delete_acl("User:app", PolicyType::Custom, &[r("Topic:new")])
            .unwrap();
        assert_eq!(m.acl("User:app").unwrap().policies[0].entries.len(), 7);
        m.delete_acl("User:app", PolicyType::Custom, &[]).unwrap();
        assert!(m.acl("User:app").is_none());
        assert_eq!(m.delete_acl("User:app", PolicyType::Custom, &[]), Ok(()));
        m.delete_user("app");
        assert!(m.user("app").is_none());
        // The stored form round-trips.
        let m = metadata();
        assert_eq!(AuthMetadata::from_json(&m.to_json()).unwrap(), m);
    }

    #[test]
    fn the_wire_forms_are_rocketmqs() {
        let text = r#"{"subject":"User:app","policies":[{"policyType":"CUSTOM","entries":[{"resource":"Topic:t","actions":["PUB","Sub"],"sourceIps":["127.0.0.1"],"decision":"ALLOW"}]}]}"#;
        let info: AclInfo = serde_json::from_str(text).unwrap();
        let a = Acl::from_info(&info).unwrap();
        assert_eq!(a.policies[0].entries[0].actions, [Action::Pub, Action::Sub]);
        let out = serde_json::to_value(a.info()).unwrap();
        assert_eq!(out["policies"][0]["policyType"], "Custom");
        assert_eq!(out["policies"][0]["entries"][0]["decision"], "Allow");
        assert_eq!(
            out["policies"][0]["entries"][0]["sourceIps"][0],
            "127.0.0.1"
        );
        let u = serde_json::to_value(user("root", "super").info()).unwrap();
        assert_eq!(
            u,
            serde_json::json!({"username":"root","password":"root-secret","userType":"Super","userStatus":"enable"})
        );
    }

    #[test]
    fn signatures_name_the_user() {
        let mut m = metadata();
        let mut fields = vec![("topic", "orders"), ("AccessKey", "app")];
        let sig = sign::sign_remoting(fields.iter().copied(), b"body", "app-secret");
        fields.push(("Signature", &sig));
        let s = m
            .authenticate_remoting(fields.iter().copied(), b"body")
            .unwrap();
        assert_eq!(
            s,
            Subject {
                username: "app".into(),
                is_super: false
            }
        );
        assert!(m
            .authenticate_remoting(fields.iter().copied(), b"other")
            .is_err());
        assert!(m.authenticate_remoting([("topic", "t")], b"").is_err());
        let nonce = sign::new_nonce();
        let proof = sign::login_signature("app-secret", &nonce, "app");
        assert_eq!(m.login("app", &nonce, &proof).unwrap().username, "app");
        assert!(m.login("app", &sign::new_nonce(), &proof).is_err());
        assert!(m.login("root", &nonce, &proof).is_err());
        m.update_user(
            "app",
            &UserInfo {
                user_status: Some("disable".into()),
                ..UserInfo::default()
            },
        )
        .unwrap();
        let e = m
            .authenticate_remoting(fields.iter().copied(), b"body")
            .unwrap_err();
        assert_eq!(e.0, "user app is disabled");
    }

    #[test]
    fn plain_acl_accounts_migrate() {
        let v1 = AclConfig::parse(
            "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    defaultTopicPerm: DENY\n    defaultGroupPerm: SUB\n    topicPerms:\n      - topicA=DENY\n      - topicB=PUB|SUB\n    groupPerms:\n      - groupA=SUB\n  - accessKey: admin01\n    secretKey: 12345678\n    admin: true\n",
        )
        .unwrap();
        let mut m = AuthMetadata::default();
        assert_eq!(m.migrate_v1(&v1), ["RocketMQ", "admin01"]);
        assert!(m.migrate_v1(&v1).is_empty(), "a second run adds nothing");
        let here = ip("127.0.0.1");
        let t = Resource::topic;
        assert!(m
            .authorize("RocketMQ", &t("topicB"), &[Action::Pub], here)
            .is_ok());
        assert!(m
            .authorize("RocketMQ", &t("topicA"), &[Action::Sub], here)
            .is_err());
        assert!(m
            .authorize("RocketMQ", &t("other"), &[Action::Sub], here)
            .is_err());
        assert!(m
            .authorize("RocketMQ", &Resource::group("any"), &[Action::Sub], here)
            .is_ok());
        assert!(m
            .authorize("admin01", &t("topicA"), &[Action::Pub], here)
            .is_ok());
    }
}
