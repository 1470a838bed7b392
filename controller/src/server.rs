//! The TCP listener: one task per connection, one frame in, one frame out, in order.
//!
//! Frames are [`Incoming`]: Raft RPCs from peers go to openraft, everything else to the
//! [`Service`]. A body that is not valid JSON of either is answered `Refused` (the length
//! prefix keeps the stream in step); an oversized length closes the connection. With access
//! control on, a frame the gate refuses is answered `Refused` with its reason.

use std::net::IpAddr;
use std::sync::Arc;

use controller_proto::{encode, Response};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::access::Gate;
use crate::network::{read_frame, Incoming, PeerRequest, PeerResponse};
use crate::raft_types::Raft;
use crate::service::Service;

/// Accepts connections until the listener fails.
/// With a `gate` (`--acl-file`), every frame passes it first (see [`crate::access`]).
pub async fn serve(
    listener: TcpListener,
    raft: Raft,
    service: Arc<Service>,
    gate: Option<Arc<Gate>>,
) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                let raft = raft.clone();
                let service = service.clone();
                let gate = gate.clone();
                tokio::spawn(async move {
                    if let Err(e) = connection(stream, peer.ip(), raft, service, gate).await {
                        tracing::debug!(%peer, error = %e, "connection closed");
                    }
                });
            }
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(
    mut stream: TcpStream,
    peer_ip: IpAddr,
    raft: Raft,
    service: Arc<Service>,
    gate: Option<Arc<Gate>>,
) -> std::io::Result<()> {
    while let Some(body) = read_frame(&mut stream).await? {
        let incoming = Incoming::parse(&body)
            .map_err(|e| format!("malformed request: {e}"))
            .and_then(|i| match &gate {
                None => crate::access::unchecked(i).map_err(|d| d.to_string()),
                Some(g) => g.admit(peer_ip, i).map_err(|d| d.to_string()),
            });
        let answer = match incoming {
            Ok(Incoming::Peer(req)) => encode(&peer(&raft, req).await),
            Ok(Incoming::Client(req)) => encode(&service.handle(req).await),
            Err(reason) => encode(&Response::Refused { reason }),
        };
        let frame = answer.map_err(std::io::Error::other)?;
        stream.write_all(&frame).await?;
    }
    Ok(())
}

async fn peer(raft: &Raft, req: PeerRequest) -> PeerResponse {
    match req {
        PeerRequest::AppendEntries(r) => PeerResponse::AppendEntries(raft.append_entries(r).await),
        PeerRequest::Vote(r) => PeerResponse::Vote(raft.vote(r).await),
        PeerRequest::InstallSnapshot(r) => {
            PeerResponse::InstallSnapshot(raft.install_snapshot(r).await)
        }
    }
}
