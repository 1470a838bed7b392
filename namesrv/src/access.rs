//! Access control at the NameServer (`--acl-enable`, `--acl-file`): the same plain_acl.yml
//! rules as the brokers' (the `acl` crate), reloaded when the file changes.
//!
//! What needs whom:
//! * every write — a broker's registration, topic registration, heartbeat and
//!   unregistration (native), and any RocketMQ code other than the reads below (topic
//!   deletes, KV config, REGISTER_BROKER / UNREGISTER_BROKER, wiping write permission) —
//!   needs an admin account (or an allow-listed address);
//! * route, cluster and topic-list reads stay open to everyone, as with ACL off: clients
//!   find their brokers without credentials (RocketMQ's NameServer checks no reads either),
//!   and what a read shows is no secret a registration could not already move.
//!
//! Native connections log in once (`AuthChallenge`, then `Login` over the nonce: the acl
//! crate's challenge-response) and act for that account from then on; RocketMQ requests are
//! signed one by one (`AclClientRPCHook`). A refusal is NO_PERMISSION with the reason, and
//! touches nothing: the real broker's registration stays as it was. A signed request that
//! carries its time (mqadmin's) is taken only within `--acl-signature-window-ms` of the
//! NameServer's clock and only once (`acl::fresh`); real RocketMQ clients send no time and
//! are taken as before unless `--acl-signature-time-required`.

use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use acl::fresh::ReplayGuard;
use acl::{Access, AclConfig, AclFile, Action, Denied};
use protocol::{Command, Header, ResponseCode};
use remoting::codes::request;
use remoting::RemotingCommand;

/// The rules in force, and the file they come from.
pub(crate) struct Gate {
    state: Mutex<GateState>,
}

struct GateState {
    file: AclFile,
    /// The timed signatures taken within the window (`acl::fresh`).
    replay: ReplayGuard,
}

impl Gate {
    /// Reads the rules; a missing or malformed file is an error (the NameServer then does
    /// not start).
    pub(crate) fn open(path: &Path, replay: ReplayGuard) -> Result<Gate, acl::AclError> {
        let file = AclFile::open(path)?;
        tracing::info!(file = %path.display(), "access control on");
        Ok(Gate {
            state: Mutex::new(GateState { file, replay }),
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
    pub(crate) fn rules(&self) -> Arc<AclConfig> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(s.file.rules_polled())
    }
}

/// One native connection's login.
#[derive(Default)]
pub(crate) struct Session {
    /// The last nonce handed out; a login uses it up.
    nonce: Option<String>,
    /// The account the connection logged in as.
    access_key: Option<String>,
}

/// What a native request needs; `None` for the reads open to everyone.
fn native_action(command: &Command) -> Option<Action<'static>> {
    Some(match command {
        Command::GetRoute { .. } | Command::GetClusterInfo | Command::GetTopicList => return None,
        Command::RegisterBroker(_) => Action::Admin {
            what: "register a broker",
        },
        Command::RegisterTopics(_) => Action::Admin {
            what: "register a broker's topics",
        },
        Command::BrokerHeartbeat(_) => Action::Admin {
            what: "heartbeat for a broker",
        },
        Command::UnregisterBroker(_) => Action::Admin {
            what: "unregister a broker",
        },
        _ => Action::Admin {
            what: "send this request to the NameServer",
        },
    })
}

/// What a RocketMQ request needs: `None` for the reads open to everyone, admin for the rest.
fn remoting_action(code: i32) -> Option<Action<'static>> {
    Some(match code {
        request::GET_ROUTEINFO_BY_TOPIC
        | request::GET_BROKER_CLUSTER_INFO
        | request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER
        | request::GET_TOPICS_BY_CLUSTER
        | request::GET_KV_CONFIG
        | request::GET_KVLIST_BY_NAMESPACE
        | request::GET_SYSTEM_TOPIC_LIST_FROM_NS => return None,
        request::DELETE_TOPIC_IN_NAMESRV => Action::Admin {
            what: "delete a topic",
        },
        request::REGISTER_BROKER => Action::Admin {
            what: "register a broker",
        },
        request::UNREGISTER_BROKER => Action::Admin {
            what: "unregister a broker",
        },
        _ => Action::Admin {
            what: "send this request to the NameServer",
        },
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

/// The gate's answer to a native request that it serves itself (a login's two steps) or
/// refuses; `None` lets the request through. Without a gate (ACL off) a login is answered
/// as taken, so that clients with credentials work with either.
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
            return Some(match gate.rules().login(access_key, &nonce, signature) {
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
    let action = native_action(&header.command)?;
    let rules = gate.rules();
    let checked = rules
        .access(peer, session.access_key.as_deref())
        .and_then(|a| a.check(&action));
    match checked {
        Ok(()) => None,
        Err(mut d) => {
            if is_broker_write(&header.command) {
                tracing::warn!(
                    %peer, request = header.command.name(),
                    "refused a broker's registration request: {d}"
                );
                // The answer goes to the broker's log: say what it lacks.
                d.0.push_str(
                    " (a broker registers with an admin account's acl_access_key and \
                     acl_secret_key in its config)",
                );
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
    let Some(action) = remoting_action(cmd.code) else {
        return Ok(());
    };
    let rules = gate.rules();
    let fields = cmd.ext_fields.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let checked = rules.access_signed(peer, fields, body).and_then(|a| {
        // A request that passed by its signature (not by an allow-list) must be fresh.
        if let Access::Account(_) = a {
            gate.fresh(
                cmd.ext(acl::fresh::SIGNED_AT_MS),
                cmd.ext(acl::sign::SIGNATURE).unwrap_or(""),
            )?;
        }
        a.check(&action)
    });
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
            let fields = cmd.ext_fields.iter().map(|(k, v)| (k.as_str(), v.as_str()));
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
}
