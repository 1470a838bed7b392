//! The requests and answers exchanged with the controller.
//!
//! Plain serde types, serialized externally tagged (`{"BrokerHeartbeat": {...}}`), so a new
//! variant is a new key and old readers refuse it with an error instead of misreading it.
//! Field names follow RocketMQ 5's controller nouns (master epoch, SyncStateSet).

use serde::{Deserialize, Serialize};

/// What a caller asks of the controller. Every request is answered by exactly one
/// [`Response`] on the same connection, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// A broker's periodic heartbeat. It registers the broker as a replica of its group the
    /// first time, refreshes its liveness, and is answered with the group's [`ReplicaInfo`],
    /// whose `lease_ms` bounds how long the broker may act on it.
    BrokerHeartbeat(Heartbeat),
    /// The master proposes a new SyncStateSet (expand when a slave caught up, shrink when one
    /// fell behind). Accepted only from the current master with the current epochs; the new
    /// set must contain the master.
    AlterSyncStateSet {
        group: String,
        master_id: u64,
        master_epoch: u32,
        sync_state_set_epoch: u32,
        new_set: Vec<u64>,
    },
    /// The group's current replica record.
    GetReplicaInfo { group: String },
    /// Admin: force an election now, optionally of a given live in-sync broker.
    ElectMaster {
        group: String,
        broker_id: Option<u64>,
    },
    /// The controllers: ids, addresses and which one leads. Any controller answers it.
    GetMetadata,
    /// Another request (or a controller's Raft RPC), signed: what callers send to
    /// controllers with access control on. See [`SignedRequest`].
    Signed(SignedRequest),
}

/// A request signed by an account of the controllers' plain_acl.yml: `body` is the JSON of
/// the request as sent (the exact bytes signed, so no re-serialization can change them),
/// and `signature` is the acl crate's envelope signature over the access key, the time, the
/// nonce and the body ([`acl::sign::sign_envelope`]). A controller takes it only within its
/// window of `signed_at_ms`, and only once ([`acl::fresh`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedRequest {
    pub access_key: String,
    pub signed_at_ms: u64,
    pub nonce: String,
    pub signature: String,
    pub body: String,
}

impl SignedRequest {
    /// `body` (a frame body's JSON) signed by `c` now, with a fresh nonce.
    pub fn sign(c: &acl::Credentials, body: String) -> SignedRequest {
        let signed_at_ms = acl::fresh::now_ms();
        let nonce = acl::sign::new_nonce();
        let signature = acl::sign::sign_envelope(
            &c.secret_key,
            &c.access_key,
            signed_at_ms,
            &nonce,
            body.as_bytes(),
        );
        SignedRequest {
            access_key: c.access_key.clone(),
            signed_at_ms,
            nonce,
            signature,
            body,
        }
    }

    /// Whether the signature is right for `secret_key` (constant-time compare).
    pub fn verifies(&self, secret_key: &str) -> bool {
        acl::sign::verify_envelope(
            secret_key,
            &self.access_key,
            self.signed_at_ms,
            &self.nonce,
            self.body.as_bytes(),
            &self.signature,
        )
    }
}

/// A broker's heartbeat to the controller leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub cluster: String,
    /// The broker group, RocketMQ's `broker_name`.
    pub group: String,
    pub broker_id: u64,
    /// The address clients connect to.
    pub addr: String,
    /// The HA listen addresses, one per core (core *i* at index *i*).
    pub ha_addrs: Vec<String>,
    /// The master epoch this broker last knew (its newest epoch-file entry).
    pub epoch: u32,
    /// The broker's max CommitLog offset, one per shard.
    pub max_offsets: Vec<u64>,
    /// False when the broker cannot serve (e.g. a shard is poisoned by a failed fsync); a
    /// master that says so is replaced.
    pub healthy: bool,
    /// Configured with `broker_id = 0`: preferred as the first master of a new group.
    pub prefer_master: bool,
}

/// One replica of a group as the controller knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaState {
    pub broker_id: u64,
    pub addr: String,
    pub ha_addrs: Vec<String>,
    /// Heard within the heartbeat timeout by the current controller leader.
    pub alive: bool,
    /// The master epoch it reported in its last heartbeat (0 if not heard by this leader).
    pub last_epoch: u32,
    /// The per-shard max offsets of its last heartbeat (empty if not heard by this leader).
    pub max_offsets: Vec<u64>,
}

/// A broker group's replication record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaInfo {
    pub group: String,
    /// `None` while the group has no master (never had one, or no in-sync replica is alive).
    pub master_id: Option<u64>,
    /// Raised by one at every election; 0 before the first master.
    pub master_epoch: u32,
    pub master_addr: Option<String>,
    pub master_ha_addrs: Vec<String>,
    /// The master plus the slaves that are caught up, sorted by broker id.
    pub sync_state_set: Vec<u64>,
    /// Raised by one at every change of the SyncStateSet, elections included.
    pub sync_state_set_epoch: u32,
    pub replicas: Vec<ReplicaState>,
    /// How long after *sending* the heartbeat this answers the broker may keep acting on it
    /// (less its own safety margin). The controller elects only after this long without
    /// *receiving* a heartbeat, so the old master's lease ends first.
    pub lease_ms: u64,
}

/// One controller of the Raft group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerNode {
    pub id: u64,
    pub addr: String,
}

/// The controller's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Replica(ReplicaInfo),
    /// This controller does not lead; re-send to `leader` (when known).
    NotLeader {
        leader: Option<String>,
    },
    /// The request was understood and refused; `reason` says why.
    Refused {
        reason: String,
    },
    Metadata {
        controllers: Vec<ControllerNode>,
        leader_id: Option<u64>,
        leader_addr: Option<String>,
        /// The Raft term of the answering controller.
        term: u64,
        /// The id of the answering controller.
        answered_by: u64,
    },
}
