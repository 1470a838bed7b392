//! Raft RPCs between controllers.
//!
//! They share the brokers' port and framing (`u32` length + JSON): a peer request is a frame
//! whose body is `{"Peer": ...}` ([`Incoming::Peer`]), anything else is parsed as a public
//! [`Request`]. So one address per controller serves both, and the peer variants stay out of
//! `controller-proto`, which brokers and mqadmin depend on.
//!
//! Each controller keeps one connection per peer, opened on demand and dropped at the first
//! error (a half-read frame leaves the stream out of step).

use std::time::Duration;

use acl::Credentials;
use controller_proto::{body_len, decode, encode, Request, SignedRequest, FRAME_HEADER_BYTES};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::raft_types::{NodeId, TypeConfig};

/// A Raft RPC from one controller to another.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
}

/// The answer to a [`PeerRequest`], with the remote Raft's error if it failed.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerResponse {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
}

/// Any frame a controller receives.
#[derive(Debug)]
pub enum Incoming {
    Peer(PeerRequest),
    Client(Request),
}

/// The body of a peer frame, `{"Peer": ...}`.
#[derive(Debug, Serialize, Deserialize)]
enum PeerFrame {
    Peer(PeerRequest),
}

/// How every peer frame body starts (serde_json writes no whitespace).
const PEER_PREFIX: &[u8] = b"{\"Peer\":";

impl Incoming {
    /// Parses a frame body. Peer frames are told apart by their first bytes rather than by
    /// an untagged serde variant: serde's untagged buffering loses the integer map keys of
    /// openraft's membership, so AppendEntries would not parse.
    pub fn parse(body: &[u8]) -> Result<Incoming, controller_proto::ProtoError> {
        if body.starts_with(PEER_PREFIX) {
            let PeerFrame::Peer(req) = decode(body)?;
            Ok(Incoming::Peer(req))
        } else {
            Ok(Incoming::Client(decode(body)?))
        }
    }
}

/// Reads one frame body; `Ok(None)` at a clean end of stream between frames.
pub async fn read_frame(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    match stream.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len =
        body_len(header).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await?;
    Ok(Some(body))
}

/// Makes one [`PeerClient`] per target. With `credentials` (access control on), every
/// RPC goes signed by them (see `crate::access`).
#[derive(Debug, Clone, Default)]
pub struct Network {
    pub credentials: Option<Credentials>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.addr.clone(),
            conn: None,
            credentials: self.credentials.clone(),
        }
    }
}

/// The connection to one peer.
#[derive(Debug)]
pub struct PeerClient {
    target: NodeId,
    addr: String,
    conn: Option<TcpStream>,
    credentials: Option<Credentials>,
}

/// Why a call failed before an answer: the peer could not be reached, or the exchange broke.
enum CallError {
    Unreachable(std::io::Error),
    Network(std::io::Error),
}

impl CallError {
    fn into_rpc<E: std::error::Error>(self) -> RPCError<NodeId, BasicNode, E> {
        match self {
            CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
            CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
        }
    }
}

fn timed_out() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "peer rpc timed out")
}

impl PeerClient {
    async fn call(&mut self, req: PeerRequest, ttl: Duration) -> Result<PeerResponse, CallError> {
        let frame = match &self.credentials {
            None => encode(&PeerFrame::Peer(req)),
            Some(c) => serde_json::to_string(&PeerFrame::Peer(req))
                .map_err(controller_proto::ProtoError::from)
                .and_then(|body| encode(&Request::Signed(SignedRequest::sign(c, body)))),
        }
        .map_err(|e| CallError::Network(std::io::Error::other(e)))?;
        if self.conn.is_none() {
            let stream = tokio::time::timeout(ttl, TcpStream::connect(&self.addr))
                .await
                .map_err(|_| CallError::Unreachable(timed_out()))?
                .map_err(CallError::Unreachable)?;
            let _ = stream.set_nodelay(true);
            self.conn = Some(stream);
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(CallError::Unreachable(std::io::Error::other(
                "no connection",
            )));
        };
        let exchange = async {
            conn.write_all(&frame).await?;
            match read_frame(conn).await? {
                Some(body) => decode::<PeerResponse>(&body)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
                None => Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "peer closed the connection",
                )),
            }
        };
        let result = match tokio::time::timeout(ttl, exchange).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => Err(CallError::Network(e)),
            Err(_) => Err(CallError::Network(timed_out())),
        };
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    fn unexpected<E: std::error::Error>(&self) -> RPCError<NodeId, BasicNode, E> {
        let e = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("peer {} answered with the wrong response kind", self.target),
        );
        RPCError::Network(NetworkError::new(&e))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self
            .call(PeerRequest::AppendEntries(rpc), option.hard_ttl())
            .await
        {
            Ok(PeerResponse::AppendEntries(r)) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(_) => Err(self.unexpected()),
            Err(e) => Err(e.into_rpc()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        match self
            .call(PeerRequest::InstallSnapshot(rpc), option.hard_ttl())
            .await
        {
            Ok(PeerResponse::InstallSnapshot(r)) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(_) => Err(self.unexpected()),
            Err(e) => Err(e.into_rpc()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.call(PeerRequest::Vote(rpc), option.hard_ttl()).await {
            Ok(PeerResponse::Vote(r)) => {
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            Ok(_) => Err(self.unexpected()),
            Err(e) => Err(e.into_rpc()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_requests_and_peer_requests_share_one_frame_type() {
        let body = serde_json::to_vec(&Request::GetReplicaInfo { group: "g".into() }).unwrap();
        assert!(matches!(
            Incoming::parse(&body).unwrap(),
            Incoming::Client(Request::GetReplicaInfo { .. })
        ));
        // A membership entry: its node map has integer keys.
        let members = std::collections::BTreeMap::from([(1u64, BasicNode::new("a"))]);
        let entry = openraft::Entry::<TypeConfig> {
            log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), 1),
            payload: openraft::EntryPayload::Membership(openraft::Membership::new(
                vec![std::collections::BTreeSet::from([1u64])],
                members,
            )),
        };
        let append = PeerFrame::Peer(PeerRequest::AppendEntries(AppendEntriesRequest {
            vote: openraft::Vote::new(1, 1),
            prev_log_id: None,
            entries: vec![entry],
            leader_commit: None,
        }));
        let body = encode(&append).unwrap();
        assert!(matches!(
            Incoming::parse(&body[FRAME_HEADER_BYTES..]).unwrap(),
            Incoming::Peer(PeerRequest::AppendEntries(_))
        ));
        assert!(Incoming::parse(b"{\"Bogus\":{}}").is_err());
    }
}
