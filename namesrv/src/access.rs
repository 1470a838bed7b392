//! Access control at the NameServer. Two rule sets, one at a time:
//!
//! * **ACL 1.0** (`--acl-enable --acl-file plain_acl.yml`): the same rules as the brokers'
//!   (the `acl` crate); a write needs an admin account (or an allow-listed address).
//! * **ACL 2.0** (`--auth-file auth.json` with `--authentication-enable` and/or
//!   `--authorization-enable`, RocketMQ's authenticationEnabled / authorizationEnabled): the
//!   users and ACLs in the JSON form a broker keeps in `config/auth.json` (`acl::v2`). A
//!   write must come from an enabled user (a RocketMQ request signed with its password, a
//!   native connection logged in as it); with authorization that user must be a super user
//!   or be allowed Update on the cluster the request names (`Cluster:<name>` for a broker's
//!   registration, heartbeat or unregistration and a topic delete that names its cluster;
//!   a write naming no cluster, such as a KV config change, needs an entry covering every
//!   cluster, `Cluster:*` or `*`). Every refusal is logged on tracing target `audit`.
//!
//! Either file is read again when it changes (at the first request a second after the last
//! read); a changed file that does not parse keeps the rules in force (logged).
//!
//! What needs whom:
//! * every write — a broker's registration, topic registration, heartbeat and
//!   unregistration (native), and any RocketMQ code other than the reads below (topic
//!   deletes, KV config, REGISTER_BROKER / UNREGISTER_BROKER, wiping write permission) —
//!   needs the account or user above;
//! * route, cluster and topic-list reads stay open to everyone, as with access control
//!   off: clients find their brokers without credentials (RocketMQ's NameServer checks no
//!   reads either), and what a read shows is no secret a registration could not already
//!   move.
//!
//! Native connections log in once (`AuthChallenge`, then `Login` over the nonce: the acl
//! crate's challenge-response, keyed by the secret key or the user's password) and act for
//! that account or user from then on; RocketMQ requests are signed one by one
//! (`AclClientRPCHook`, the user's name as access key and its password as secret key). A
//! refusal is NO_PERMISSION with the reason, and touches nothing: the real broker's
//! registration stays as it was. A signed request that carries its time (mqadmin's) is
//! taken only within `--acl-signature-window-ms` of the NameServer's clock and only once
//! (`acl::fresh`); real RocketMQ clients send no time and are taken as before unless
//! `--acl-signature-time-required`.

use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use acl::fresh::ReplayGuard;
use acl::v2::{self, AuthMetadata, Resource, ResourceType};
use acl::{Access, AclConfig, AclFile, Action, AuthFile, Denied};
use protocol::{Command, Header, ResponseCode};
use remoting::codes::request;
use remoting::RemotingCommand;

/// The rules in force, and the file they come from.
pub(crate) struct Gate {
    state: Mutex<GateState>,
}

struct GateState {
    file: RulesFile,
    /// The timed signatures taken within the window (`acl::fresh`).
    replay: ReplayGuard,
}

enum RulesFile {
    V1(AclFile),
    V2 {
        file: AuthFile,
        /// `--authorization-enable`: the users' policies decide, not only who they are.
        authorization: bool,
    },
}

/// The rules of one request.
enum Rules {
    V1(Arc<AclConfig>),
    V2 {
        meta: Arc<AuthMetadata>,
        authorization: bool,
    },
}

impl Gate {
    /// ACL 1.0: reads the plain_acl.yml; a missing or malformed file is an error (the
    /// NameServer then does not start).
    pub(crate) fn open(path: &Path, replay: ReplayGuard) -> Result<Gate, acl::AclError> {
        let file = AclFile::open(path)?;
        tracing::info!(file = %path.display(), "access control on (ACL 1.0)");
        Ok(Gate {
            state: Mutex::new(GateState {
                file: RulesFile::V1(file),
                replay,
            }),
        })
    }

    /// ACL 2.0: reads the users and ACLs; a missing or malformed file is an error.
    pub(crate) fn open_v2(
        path: &Path,
        authorization: bool,
        replay: ReplayGuard,
    ) -> Result<Gate, acl::AclError> {
        let file = AuthFile::open(path)?;
        let meta = file.rules();
        tracing::info!(
            file = %path.display(),
            users = meta.users("").len(),
            authorization,
            "access control on (ACL 2.0)"
        );
        Ok(Gate {
            state: Mutex::new(GateState {
                file: RulesFile::V2 {
                    file,
                    authorization,
                },
                replay,
            }),
        })
    }

    /// Whether a request that passed by its signature is fresh: signed within the window
    /// and not taken before (`acl::fresh`).
    fn fresh(&self, signed_at_ms: Option<&str>, signature: &str) -> Result<(), Denied> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.replay
            .check(signed_at_ms, signature, acl::fresh::now_ms())
    }

    /// The rules in force now: the file is read again at most once a second, and a changed
    /// file that does not parse keeps the old rules (logged).
    fn rules(&self) -> Rules {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match &mut s.file {
            RulesFile::V1(f) => Rules::V1(Arc::clone(f.rules_polled())),
            RulesFile::V2 {
                file,
                authorization,
            } => Rules::V2 {
                authorization: *authorization,
                meta: Arc::clone(file.rules_polled()),
            },
        }
    }
}

/// One native connection's login.
#[derive(Default)]
pub(crate) struct Session {
    /// The last nonce handed out; a login uses it up.
    nonce: Option<String>,
    /// The account (ACL 1.0) or user (ACL 2.0) the connection logged in as.
    access_key: Option<String>,
}

/// A request that changes the NameServer's state: what it is, for the answer, and the
/// cluster it names (ACL 2.0 checks Update on that cluster).
struct Write<'a> {
    what: &'static str,
    cluster: Option<&'a str>,
}

impl Write<'_> {
    /// ACL 1.0's view of it: an admin request.
    fn v1(&self) -> Action<'static> {
        Action::Admin { what: self.what }
    }

    /// ACL 2.0's view of it: Update on the cluster it names (a write naming none is asked
    /// on every cluster, `Cluster:*`, which only `Cluster:*` and `*` entries cover).
    fn v2_resource(&self) -> Resource {
        match self.cluster {
            Some(name) => Resource::named(ResourceType::Cluster, name),
            None => Resource {
                resource_type: ResourceType::Cluster,
                name: String::new(),
                pattern: v2::NamePattern::Any,
            },
        }
    }
}

/// What a native request changes; `None` for the reads open to everyone.
fn native_write(command: &Command) -> Option<Write<'_>> {
    let (what, cluster) = match command {
        Command::GetRoute { .. } | Command::GetClusterInfo | Command::GetTopicList => return None,
        Command::RegisterBroker(reg) => ("register a broker", Some(&reg.key.cluster)),
        Command::RegisterTopics(key) => ("register a broker's topics", Some(&key.cluster)),
        Command::BrokerHeartbeat(key) => ("heartbeat for a broker", Some(&key.cluster)),
        Command::UnregisterBroker(key) => ("unregister a broker", Some(&key.cluster)),
        _ => ("send this request to the NameServer", None),
    };
    Some(Write {
        what,
        cluster: cluster.map(String::as_str),
    })
}

/// What a RocketMQ request changes: `None` for the reads open to everyone.
fn remoting_write(cmd: &RemotingCommand) -> Option<Write<'_>> {
    let what = match cmd.code {
        request::GET_ROUTEINFO_BY_TOPIC
        | request::GET_BROKER_CLUSTER_INFO
        | request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER
        | request::GET_TOPICS_BY_CLUSTER
        | request::GET_KV_CONFIG
        | request::GET_KVLIST_BY_NAMESPACE
        | request::GET_SYSTEM_TOPIC_LIST_FROM_NS => return None,
        request::DELETE_TOPIC_IN_NAMESRV => "delete a topic",
        request::REGISTER_BROKER => "register a broker",
        request::UNREGISTER_BROKER => "unregister a broker",
        _ => "send this request to the NameServer",
    };
    Some(Write {
        what,
        cluster: cmd.ext("clusterName").filter(|c| !c.is_empty()),
    })
}

/// Whether a request names a broker (the refusal is logged at WARN: someone tried to move
/// the routes).
fn is_broker_write(command: &Command) -> bool {
    matches!(
        command,
        Command::RegisterBroker(_)
            | Command::RegisterTopics(_)
            | Command::BrokerHeartbeat(_)
            | Command::UnregisterBroker(_)
    )
}

/// ACL 2.0's decision on `write` by the authenticated `username`.
fn authorize_v2(
    meta: &AuthMetadata,
    authorization: bool,
    username: &str,
    write: &Write<'_>,
    peer: IpAddr,
) -> Result<(), Denied> {
    if !authorization {
        return Ok(());
    }
    meta.authorize(username, &write.v2_resource(), &[v2::Action::Update], peer)
        .map_err(|d| Denied(format!("{} (to {})", d.0, write.what)))
}

/// ACL 2.0's audit line for a refusal: every one, not rate limited.
fn audit(peer: IpAddr, user: Option<&str>, request: &str, d: &Denied) {
    tracing::warn!(
        target: "audit",
        %peer,
        user = user.unwrap_or("-"),
        request,
        "ACL 2.0 refused a request: {d}"
    );
}

/// The gate's answer to a native request that it serves itself (a login's two steps) or
/// refuses; `None` lets the request through. Without a gate (access control off) a login is
/// answered as taken, so that clients with credentials work with either.
pub(crate) fn native(
    gate: Option<&Gate>,
    session: &mut Session,
    peer: IpAddr,
    header: &Header,
) -> Option<Header> {
    let id = header.request_id;
    let refuse = |d: Denied| Header::error(id, ResponseCode::NoPermission, d.to_string());
    match &header.command {
        Command::AuthChallenge => {
            let nonce = acl::sign::new_nonce();
            session.nonce = Some(nonce.clone());
            return Some(Header::response(
                id,
                ResponseCode::Success,
                Command::AuthNonce { nonce },
            ));
        }
        Command::Login {
            access_key,
            signature,
        } => {
            let Some(gate) = gate else {
                return Some(Header::response(id, ResponseCode::Success, Command::Empty));
            };
            let nonce = session.nonce.take().unwrap_or_default();
            let checked = match gate.rules() {
                Rules::V1(rules) => rules.login(access_key, &nonce, signature),
                Rules::V2 { meta, .. } => meta
                    .login(access_key, &nonce, signature)
                    .map(|_| ())
                    .inspect_err(|d| audit(peer, Some(access_key), "login", d)),
            };
            return Some(match checked {
                Ok(()) => {
                    session.access_key = Some(access_key.clone());
                    Header::response(id, ResponseCode::Success, Command::Empty)
                }
                Err(d) => {
                    tracing::warn!(%peer, access_key, "login refused: {d}");
                    refuse(d)
                }
            });
        }
        _ => {}
    }
    let gate = gate?;
    let write = native_write(&header.command)?;
    let key = session.access_key.as_deref();
    let (checked, v2) = match gate.rules() {
        Rules::V1(rules) => (
            rules.access(peer, key).and_then(|a| a.check(&write.v1())),
            false,
        ),
        Rules::V2 {
            meta,
            authorization,
        } => {
            let checked = key
                .ok_or_else(|| {
                    Denied(format!(
                        "no user: the connection must log in as a user of the NameServer's \
                         --auth-file to {}",
                        write.what
                    ))
                })
                .and_then(|name| meta.logged_in(name))
                .and_then(|who| authorize_v2(&meta, authorization, &who.username, &write, peer));
            (checked, true)
        }
    };
    match checked {
        Ok(()) => None,
        Err(mut d) => {
            if v2 {
                audit(peer, key, header.command.name(), &d);
            }
            if is_broker_write(&header.command) {
                tracing::warn!(
                    %peer, request = header.command.name(),
                    "refused a broker's registration request: {d}"
                );
                // The answer goes to the broker's log: say what it lacks.
                d.0.push_str(if v2 {
                    " (a broker registers with acl_access_key and acl_secret_key naming a user \
                     of the NameServer's --auth-file: a super user, or one allowed \
                     Cluster:Update on its cluster)"
                } else {
                    " (a broker registers with an admin account's acl_access_key and \
                     acl_secret_key in its config)"
                });
            }
            Some(refuse(d))
        }
    }
}

/// Checks a RocketMQ request's signature and what it asks for (the open reads pass
/// unchecked); the refusal to answer.
pub(crate) fn remoting(
    gate: &Gate,
    peer: IpAddr,
    cmd: &RemotingCommand,
    body: &[u8],
) -> Result<(), Denied> {
    let Some(write) = remoting_write(cmd) else {
        return Ok(());
    };
    let fields = cmd.ext_fields.iter();
    let signature = cmd.ext(acl::sign::SIGNATURE).unwrap_or("");
    let signed_at = cmd.ext(acl::fresh::SIGNED_AT_MS);
    let checked = match gate.rules() {
        Rules::V1(rules) => rules.access_signed(peer, fields, body).and_then(|a| {
            // A request that passed by its signature (not by an allow-list) must be fresh.
            if let Access::Account(_) = a {
                gate.fresh(signed_at, signature)?;
            }
            a.check(&write.v1())
        }),
        Rules::V2 {
            meta,
            authorization,
        } => {
            let checked = meta.authenticate_remoting(fields, body).and_then(|who| {
                gate.fresh(signed_at, signature)?;
                authorize_v2(&meta, authorization, &who.username, &write, peer)
            });
            if let Err(d) = &checked {
                let name = request::name(cmd.code).unwrap_or("UNKNOWN");
                audit(peer, cmd.ext(acl::sign::ACCESS_KEY), name, d);
            }
            checked
        }
    };
    if let Err(d) = &checked {
        if matches!(
            cmd.code,
            request::REGISTER_BROKER | request::UNREGISTER_BROKER
        ) {
            tracing::warn!(%peer, code = cmd.code, "refused a broker's registration request: {d}");
        }
    }
    checked
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use protocol::BrokerKey;

    const RULES: &str = "
accounts:
  - accessKey: corvus-broker
    secretKey: broker-secret
    admin: true
  - accessKey: reader-acct
    secretKey: reader-secret
    admin: false
";

    fn gate() -> (tempfile::TempDir, Gate) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plain_acl.yml");
        std::fs::write(&path, RULES).unwrap();
        let g = Gate::open(&path, ReplayGuard::new(60_000, false)).unwrap();
        (dir, g)
    }

    fn login(g: &Gate, s: &mut Session, ak: &str, sk: &str) -> ResponseCode {
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let ch = native(
            Some(g),
            s,
            peer,
            &Header::request(1, Command::AuthChallenge),
        )
        .unwrap();
        let Command::AuthNonce { nonce } = ch.command else {
            panic!("{ch:?}")
        };
        let signature = acl::sign::login_signature(sk, &nonce, ak);
        let h = Header::request(
            2,
            Command::Login {
                access_key: ak.into(),
                signature,
            },
        );
        native(Some(g), s, peer, &h).unwrap().response_code()
    }

    fn unregister() -> Header {
        Header::request(
            3,
            Command::UnregisterBroker(BrokerKey {
                cluster: "c".into(),
                broker_name: "broker-a".into(),
                broker_id: 0,
            }),
        )
    }

    #[test]
    fn writes_need_an_admin_and_reads_are_open() {
        let (_d, g) = gate();
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let route = Header::request(4, Command::GetRoute { topic: "T".into() });
        // Nobody: routes (open to all), no writes.
        let mut anon = Session::default();
        let r = native(Some(&g), &mut anon, peer, &unregister()).unwrap();
        assert_eq!(r.response_code(), ResponseCode::NoPermission);
        assert!(r.remark.contains("no access key"), "{}", r.remark);
        assert!(native(Some(&g), &mut anon, peer, &route).is_none());
        // A reader: routes, not writes.
        let mut reader = Session::default();
        assert_eq!(
            login(&g, &mut reader, "reader-acct", "reader-secret"),
            ResponseCode::Success
        );
        assert!(native(Some(&g), &mut reader, peer, &route).is_none());
        let r = native(Some(&g), &mut reader, peer, &unregister()).unwrap();
        assert!(r.remark.contains("not an admin"), "{}", r.remark);
        // The broker's account: both.
        let mut broker = Session::default();
        assert_eq!(
            login(&g, &mut broker, "corvus-broker", "broker-secret"),
            ResponseCode::Success
        );
        assert!(native(Some(&g), &mut broker, peer, &unregister()).is_none());
        // A wrong secret logs in as nobody.
        let mut wrong = Session::default();
        assert_eq!(
            login(&g, &mut wrong, "corvus-broker", "guess"),
            ResponseCode::NoPermission
        );
        assert!(native(Some(&g), &mut wrong, peer, &unregister()).is_some());
        // Without a gate everything passes and a login is taken.
        assert!(native(None, &mut Session::default(), peer, &unregister()).is_none());
    }

    #[test]
    fn rocketmq_requests_are_checked_by_their_signature() {
        let (_d, g) = gate();
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let signed = |code: i32, ak: &str, sk: &str| {
            let mut cmd = RemotingCommand::request(code, 1);
            cmd.ext_fields.insert("topic".into(), "T".into());
            cmd.ext_fields
                .insert(acl::sign::ACCESS_KEY.into(), ak.into());
            let fields = cmd.ext_fields.iter();
            let sig = acl::sign::sign_remoting(fields, &[], sk);
            cmd.ext_fields.insert(acl::sign::SIGNATURE.into(), sig);
            cmd
        };
        let route = request::GET_ROUTEINFO_BY_TOPIC;
        let delete = request::DELETE_TOPIC_IN_NAMESRV;
        let unregister = request::UNREGISTER_BROKER;
        assert!(remoting(&g, peer, &RemotingCommand::request(route, 1), &[]).is_ok());
        assert!(remoting(&g, peer, &RemotingCommand::request(unregister, 1), &[]).is_err());
        assert!(remoting(&g, peer, &RemotingCommand::request(delete, 1), &[]).is_err());
        assert!(remoting(&g, peer, &signed(delete, "corvus-broker", "wrong"), &[]).is_err());
        assert!(remoting(
            &g,
            peer,
            &signed(delete, "reader-acct", "reader-secret"),
            &[]
        )
        .is_err());
        assert!(remoting(
            &g,
            peer,
            &signed(delete, "corvus-broker", "broker-secret"),
            &[]
        )
        .is_ok());
    }

    /// ACL 2.0's users and ACLs: a super user, a normal user allowed Update on cluster
    /// `c`, one allowed only Get there, and a disabled super user.
    const USERS: &str = r#"{
      "users": [
        {"username": "root", "password": "root-pw", "userType": "Super", "userStatus": "enable"},
        {"username": "ops", "password": "ops-pw", "userType": "Normal", "userStatus": "enable"},
        {"username": "viewer", "password": "viewer-pw", "userType": "Normal", "userStatus": "enable"},
        {"username": "gone", "password": "gone-pw", "userType": "Super", "userStatus": "disable"}
      ],
      "acls": [
        {"subject": "User:ops", "policies": [{"policyType": "CUSTOM", "entries": [
          {"resource": "Cluster:c", "actions": ["Update"], "sourceIps": [], "decision": "Allow"}]}]},
        {"subject": "User:viewer", "policies": [{"policyType": "CUSTOM", "entries": [
          {"resource": "Cluster:*", "actions": ["Get"], "sourceIps": [], "decision": "Allow"}]}]}
      ]
    }"#;

    fn gate_v2(authorization: bool) -> (tempfile::TempDir, Gate) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.json");
        std::fs::write(&path, USERS).unwrap();
        let g = Gate::open_v2(&path, authorization, ReplayGuard::new(60_000, false)).unwrap();
        (dir, g)
    }

    fn signed(code: i32, fields: &[(&str, &str)], user: &str, password: &str) -> RemotingCommand {
        let mut cmd = RemotingCommand::request(code, 1);
        for (k, v) in fields {
            cmd.ext_fields.insert((*k).into(), (*v).into());
        }
        cmd.ext_fields
            .insert(acl::sign::ACCESS_KEY.into(), user.into());
        let fields = cmd.ext_fields.iter();
        let sig = acl::sign::sign_remoting(fields, &[], password);
        cmd.ext_fields.insert(acl::sign::SIGNATURE.into(), sig);
        cmd
    }

    #[test]
    fn acl2_native_writes_need_a_user_allowed_to_update_the_cluster() {
        let (_d, g) = gate_v2(true);
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let route = Header::request(4, Command::GetRoute { topic: "T".into() });
        // Nobody: routes, no writes, and the answer says what is missing.
        let mut anon = Session::default();
        assert!(native(Some(&g), &mut anon, peer, &route).is_none());
        let r = native(Some(&g), &mut anon, peer, &unregister()).unwrap();
        assert_eq!(r.response_code(), ResponseCode::NoPermission);
        assert!(r.remark.contains("must log in"), "{}", r.remark);
        assert!(r.remark.contains("--auth-file"), "{}", r.remark);
        // A super user and a user allowed Cluster:Update on `c` may unregister.
        for (user, pw) in [("root", "root-pw"), ("ops", "ops-pw")] {
            let mut s = Session::default();
            assert_eq!(login(&g, &mut s, user, pw), ResponseCode::Success, "{user}");
            assert!(
                native(Some(&g), &mut s, peer, &unregister()).is_none(),
                "{user}"
            );
        }
        // A user allowed only Get: routes, not writes; the answer names the policy.
        let mut viewer = Session::default();
        assert_eq!(
            login(&g, &mut viewer, "viewer", "viewer-pw"),
            ResponseCode::Success
        );
        assert!(native(Some(&g), &mut viewer, peer, &route).is_none());
        let r = native(Some(&g), &mut viewer, peer, &unregister()).unwrap();
        assert_eq!(r.response_code(), ResponseCode::NoPermission);
        assert!(
            r.remark.contains("viewer may not Update Cluster:c"),
            "{}",
            r.remark
        );
        // A wrong password, an unknown user and a disabled one do not log in.
        for (user, pw) in [("root", "guess"), ("nobody", "x"), ("gone", "gone-pw")] {
            let mut s = Session::default();
            assert_eq!(
                login(&g, &mut s, user, pw),
                ResponseCode::NoPermission,
                "{user}"
            );
            assert!(
                native(Some(&g), &mut s, peer, &unregister()).is_some(),
                "{user}"
            );
        }
    }

    #[test]
    fn acl2_authentication_alone_takes_any_enabled_user() {
        let (_d, g) = gate_v2(false);
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let mut viewer = Session::default();
        assert_eq!(
            login(&g, &mut viewer, "viewer", "viewer-pw"),
            ResponseCode::Success
        );
        assert!(native(Some(&g), &mut viewer, peer, &unregister()).is_none());
        let delete = request::DELETE_TOPIC_IN_NAMESRV;
        let cmd = signed(delete, &[("topic", "T")], "viewer", "viewer-pw");
        assert!(remoting(&g, peer, &cmd, &[]).is_ok());
        let cmd = signed(delete, &[("topic", "T")], "viewer", "wrong");
        assert!(remoting(&g, peer, &cmd, &[]).is_err());
        assert!(remoting(&g, peer, &RemotingCommand::request(delete, 1), &[]).is_err());
    }

    #[test]
    fn acl2_rocketmq_writes_are_checked_by_signature_and_policy() {
        let (_d, g) = gate_v2(true);
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let unregister = request::UNREGISTER_BROKER;
        let in_c = [("clusterName", "c"), ("brokerName", "broker-a")];
        let in_other = [("clusterName", "other"), ("brokerName", "broker-a")];
        // Reads are open.
        let route = RemotingCommand::request(request::GET_ROUTEINFO_BY_TOPIC, 1);
        assert!(remoting(&g, peer, &route, &[]).is_ok());
        // Unsigned, wrongly signed, unknown and disabled users are refused.
        let e = remoting(&g, peer, &RemotingCommand::request(unregister, 1), &[]).unwrap_err();
        assert!(e.0.contains("no AccessKey"), "{e}");
        let e = remoting(&g, peer, &signed(unregister, &in_c, "root", "guess"), &[]).unwrap_err();
        assert!(e.0.contains("check signature failed"), "{e}");
        assert!(remoting(&g, peer, &signed(unregister, &in_c, "gone", "gone-pw"), &[]).is_err());
        // The policy decides per cluster; a super user needs none.
        assert!(remoting(&g, peer, &signed(unregister, &in_c, "ops", "ops-pw"), &[]).is_ok());
        let e = remoting(
            &g,
            peer,
            &signed(unregister, &in_other, "ops", "ops-pw"),
            &[],
        )
        .unwrap_err();
        assert!(e.0.contains("Cluster:other"), "{e}");
        assert!(remoting(
            &g,
            peer,
            &signed(unregister, &in_other, "root", "root-pw"),
            &[]
        )
        .is_ok());
        // A write naming no cluster needs an entry covering every cluster.
        let kv = request::PUT_KV_CONFIG;
        let fields = [("namespace", "ns"), ("key", "k"), ("value", "v")];
        let e = remoting(&g, peer, &signed(kv, &fields, "ops", "ops-pw"), &[]).unwrap_err();
        assert!(e.0.contains("ops may not Update Cluster:*"), "{e}");
        assert!(remoting(&g, peer, &signed(kv, &fields, "root", "root-pw"), &[]).is_ok());
        let e = remoting(
            &g,
            peer,
            &signed(unregister, &in_c, "viewer", "viewer-pw"),
            &[],
        )
        .unwrap_err();
        assert!(e.0.contains("unregister a broker"), "{e}");
    }

    #[test]
    fn acl2_timed_signatures_are_taken_once() {
        let (_d, g) = gate_v2(true);
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let now = acl::fresh::now_ms().to_string();
        let fields = [
            ("topic", "T"),
            (acl::fresh::SIGNED_AT_MS, now.as_str()),
            (acl::fresh::NONCE, "n-1"),
        ];
        let cmd = signed(request::DELETE_TOPIC_IN_NAMESRV, &fields, "root", "root-pw");
        assert!(remoting(&g, peer, &cmd, &[]).is_ok());
        let e = remoting(&g, peer, &cmd, &[]).unwrap_err();
        assert!(e.0.contains("replay") || e.0.contains("already"), "{e}");
    }

    #[test]
    fn acl2_users_are_read_again_when_the_file_changes() {
        let (dir, g) = gate_v2(true);
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let cmd = signed(
            request::DELETE_TOPIC_IN_NAMESRV,
            &[("topic", "T")],
            "newbie",
            "newbie-pw",
        );
        assert!(remoting(&g, peer, &cmd, &[]).is_err());
        let added = USERS.replacen(
            r#""users": ["#,
            r#""users": [{"username": "newbie", "password": "newbie-pw", "userType": "Super", "userStatus": "enable"},"#,
            1,
        );
        std::fs::write(dir.path().join("auth.json"), added).unwrap();
        // Read again at the first request a second after the last read.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if remoting(&g, peer, &cmd, &[]).is_ok() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the new user was never taken"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}
