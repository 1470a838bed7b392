//! Access control at the controllers (`--acl-file`): the same plain_acl.yml rules as the
//! brokers' and NameServers' (the `acl` crate), reloaded when the file changes.
//!
//! With it, every frame must come as a [`Request::Signed`] envelope (or from an address in
//! `globalWhiteRemoteAddresses`): signed by an account of the file over the request's exact
//! JSON, its time and a nonce ([`SignedRequest`]), within `--acl-signature-window-ms` of
//! this controller's clock and never twice (`acl::fresh`). What the account may then do:
//! * read (`GetMetadata`, `GetReplicaInfo`): any account;
//! * everything that changes the record (`BrokerHeartbeat`, `AlterSyncStateSet`,
//!   `ElectMaster`) and the Raft RPCs between controllers: admin accounts only (an
//!   account's `whiteRemoteAddress` counts as admin, as in RocketMQ).
//!
//! Brokers sign with their `acl_access_key`/`acl_secret_key`, mqadmin with its
//! `--access-key`/`--secret-key`, and a controller its Raft RPCs with the account named by
//! `--acl-access-key` (whose secret it reads from the same file). A refusal is answered
//! `Refused` with the reason and logged (at most [`REFUSAL_LOG_LINES`] a second).

use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use acl::fresh::ReplayGuard;
use acl::{AclConfig, AclFile, Action, Credentials, Denied};
use controller_proto::{Request, SignedRequest};

use crate::network::Incoming;

/// Refusals logged per second at most (a retrying caller must not flood the log).
pub const REFUSAL_LOG_LINES: u32 = 10;

/// The rules in force, the signatures taken, and this controller's own account.
pub struct Gate {
    state: Mutex<GateState>,
}

struct GateState {
    file: AclFile,
    replay: ReplayGuard,
    log_window: (Instant, u32),
}

impl Gate {
    /// Reads the rules; a missing or malformed file, or an `access_key` that is not an
    /// admin account of it, is an error (the controller then does not start). Returns the
    /// gate and the credentials this controller signs its Raft RPCs with.
    pub fn open(
        path: &Path,
        access_key: &str,
        window_ms: u64,
    ) -> Result<(Gate, Credentials), String> {
        let file = AclFile::open(path).map_err(|e| format!("--acl-file: {e}"))?;
        let own = match file.rules().account(access_key) {
            Some(a) if a.admin => Credentials::new(&a.access_key, &a.secret_key),
            Some(_) => {
                return Err(format!(
                    "--acl-access-key {access_key} is not an admin account of {}: the \
                     controllers' Raft RPCs need one",
                    path.display()
                ))
            }
            None => {
                return Err(format!(
                    "--acl-access-key {access_key} is no account of {}",
                    path.display()
                ))
            }
        };
        let gate = Gate {
            state: Mutex::new(GateState {
                file,
                replay: ReplayGuard::new(window_ms, true),
                log_window: (Instant::now(), 0),
            }),
        };
        Ok((gate, own))
    }

    /// The rules in force now: the file is read again at most once a second, and a changed
    /// file that does not parse keeps the old rules (logged).
    fn rules(&self) -> Arc<AclConfig> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(s.file.rules_polled())
    }

    /// What a frame from `peer` asks, once its envelope is checked; the refusal says why.
    pub fn admit(&self, peer: IpAddr, incoming: Incoming) -> Result<Incoming, Denied> {
        let rules = self.rules();
        let checked = self.admit_with(&rules, peer, incoming);
        if let Err(d) = &checked {
            self.log_refusal(peer, d);
        }
        checked
    }

    fn admit_with(
        &self,
        rules: &AclConfig,
        peer: IpAddr,
        incoming: Incoming,
    ) -> Result<Incoming, Denied> {
        let signed = match incoming {
            Incoming::Client(Request::Signed(s)) => s,
            other if rules.globally_allowed(peer) => return Ok(other),
            other => {
                return Err(Denied(format!(
                    "the controllers check access and {} is not signed: a broker signs with \
                     its acl_access_key / acl_secret_key, mqadmin with --access-key / \
                     --secret-key",
                    what(&other)
                )))
            }
        };
        let account = rules
            .account(&signed.access_key)
            .ok_or_else(|| Denied(format!("no acl config for {}", signed.access_key)))?;
        if !signed.verifies(&account.secret_key) {
            return Err(Denied(format!(
                "check signature failed for accessKey={}",
                signed.access_key
            )));
        }
        self.fresh(&signed)?;
        let inner = Incoming::parse(signed.body.as_bytes())
            .map_err(|e| Denied(format!("the signed body is no request: {e}")))?;
        let action = match &inner {
            Incoming::Client(Request::Signed(_)) => {
                return Err(Denied("a signed request inside a signed request".into()))
            }
            Incoming::Client(Request::GetMetadata | Request::GetReplicaInfo { .. }) => Action::Info,
            other => Action::Admin { what: what(other) },
        };
        rules
            .access(peer, Some(&signed.access_key))?
            .check(&action)?;
        Ok(inner)
    }

    fn fresh(&self, signed: &SignedRequest) -> Result<(), Denied> {
        let at = signed.signed_at_ms.to_string();
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.replay
            .check(Some(&at), &signed.signature, acl::fresh::now_ms())
    }

    fn log_refusal(&self, peer: IpAddr, d: &Denied) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (began, n) = s.log_window;
        let (began, n) = if began.elapsed() >= Duration::from_secs(1) {
            (Instant::now(), 0)
        } else {
            (began, n)
        };
        s.log_window = (began, n + 1);
        if n < REFUSAL_LOG_LINES {
            tracing::warn!(%peer, "refused a request: {d}");
        }
    }
}

/// What a frame asks when access control is off: a signed request is taken as what it
/// wraps, unchecked (so that a broker configured with credentials works against
/// controllers without access control).
pub fn unchecked(incoming: Incoming) -> Result<Incoming, Denied> {
    match incoming {
        Incoming::Client(Request::Signed(s)) => match Incoming::parse(s.body.as_bytes()) {
            Ok(Incoming::Client(Request::Signed(_))) => {
                Err(Denied("a signed request inside a signed request".into()))
            }
            Ok(inner) => Ok(inner),
            Err(e) => Err(Denied(format!("the signed body is no request: {e}"))),
        },
        other => Ok(other),
    }
}

/// A request's name in a refusal.
fn what(incoming: &Incoming) -> &'static str {
    match incoming {
        Incoming::Peer(_) => "a controller's Raft RPC",
        Incoming::Client(r) => match r {
            Request::BrokerHeartbeat(_) => "BrokerHeartbeat",
            Request::AlterSyncStateSet { .. } => "AlterSyncStateSet",
            Request::GetReplicaInfo { .. } => "GetReplicaInfo",
            Request::ElectMaster { .. } => "ElectMaster",
            Request::GetMetadata => "GetMetadata",
            Request::Signed(_) => "Signed",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: &str = "accounts:
  - accessKey: ctl-admin
    secretKey: admin-secret-1
    admin: true
  - accessKey: reader01
    secretKey: reader-secret-1
    admin: false
";

    fn gate() -> (Gate, Credentials, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plain_acl.yml");
        std::fs::write(&path, RULES).unwrap();
        let (g, own) = Gate::open(&path, "ctl-admin", 60_000).unwrap();
        (g, own, dir)
    }

    fn signed(c: &Credentials, req: &Request) -> Incoming {
        let body = serde_json::to_string(req).unwrap();
        Incoming::Client(Request::Signed(SignedRequest::sign(c, body)))
    }

    const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn elect() -> Request {
        Request::ElectMaster {
            group: "broker-a".into(),
            broker_id: Some(1),
        }
    }

    #[test]
    fn only_signed_admin_requests_change_anything() {
        let (g, admin, _dir) = gate();
        let reader = Credentials::new("reader01", "reader-secret-1");
        assert!(g.admit(PEER, Incoming::Client(elect())).is_err());
        let e = g.admit(PEER, signed(&reader, &elect())).unwrap_err();
        assert!(e.0.contains("not an admin"), "{e}");
        assert!(g
            .admit(PEER, signed(&reader, &Request::GetMetadata))
            .is_ok());
        let forged = Credentials::new("ctl-admin", "guessed-secret");
        let e = g.admit(PEER, signed(&forged, &elect())).unwrap_err();
        assert!(e.0.contains("check signature failed"), "{e}");
        match g.admit(PEER, signed(&admin, &elect())) {
            Ok(Incoming::Client(r)) => assert_eq!(r, elect()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_replayed_envelope_is_refused() {
        let (g, admin, _dir) = gate();
        let Incoming::Client(Request::Signed(s)) = signed(&admin, &elect()) else {
            unreachable!()
        };
        assert!(g
            .admit(PEER, Incoming::Client(Request::Signed(s.clone())))
            .is_ok());
        let e = g
            .admit(PEER, Incoming::Client(Request::Signed(s)))
            .unwrap_err();
        assert!(e.0.contains("replay"), "{e}");
    }

    #[test]
    fn the_own_account_must_be_an_admin_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plain_acl.yml");
        std::fs::write(&path, RULES).unwrap();
        assert!(Gate::open(&path, "reader01", 60_000)
            .err()
            .unwrap()
            .contains("not an admin"));
        assert!(Gate::open(&path, "nobody", 60_000).is_err());
    }
}
