//! openraft's type configuration for the controller.

use std::io::Cursor;

use crate::registry::{Command, Outcome};

openraft::declare_raft_types!(
    /// Controllers are `u64` ids with a `BasicNode { addr }`; entries carry [`Command`]s and
    /// answer [`Outcome`]s; a snapshot is the JSON of the registry, held in memory.
    pub TypeConfig:
        D = Command,
        R = Outcome,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;
