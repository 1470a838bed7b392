//! The TCP listener: one task per connection, one frame in, one frame out, in order.
//!
//! Frames are [`Incoming`]: Raft RPCs from peers go to openraft, everything else to the
//! [`Service`]. A body that is not valid JSON of either is answered `Refused` (the length
//! prefix keeps the stream in step); an oversized length closes the connection.

use std::sync::Arc;

use controller_proto::{encode, Response};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::network::{read_frame, Incoming, PeerRequest, PeerResponse};
use crate::raft_types::Raft;
use crate::service::Service;

/// Accepts connections until the listener fails.
pub async fn serve(listener: TcpListener, raft: Raft, service: Arc<Service>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                let raft = raft.clone();
                let service = service.clone();
                tokio::spawn(async move {
                    if let Err(e) = connection(stream, raft, service).await {
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
    raft: Raft,
    service: Arc<Service>,
) -> std::io::Result<()> {
    while let Some(body) = read_frame(&mut stream).await? {
        let answer = match Incoming::parse(&body) {
            Ok(Incoming::Peer(req)) => encode(&peer(&raft, req).await),
            Ok(Incoming::Client(req)) => encode(&service.handle(req).await),
            Err(e) => encode(&Response::Refused {
                reason: format!("malformed request: {e}"),
            }),
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
