//! The failover controller's commands, by RocketMQ's names: `getControllerMetaData`,
//! `getSyncStateSet`, `electMaster`. They talk to the controllers (`-a`), not to the
//! NameServer, through `controller-proto`'s blocking client, which follows the leader.

use std::io::{self, Write};

use anyhow::{bail, Context};
use controller_proto::{Client, ClientConfig, ControllerNode, ReplicaInfo, Request, Response};
use serde::Serialize;

use crate::output::Render;

/// Splits a `-a` list: RocketMQ separates controller addresses with `;`, commas work too.
fn addrs(list: &str) -> Vec<String> {
    list.split([';', ','])
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect()
}

fn call(controllers: &str, req: &Request) -> anyhow::Result<Response> {
    // Signed with the account mqadmin acts as (--access-key / --secret-key), for
    // controllers with access control on.
    let config = ClientConfig {
        credentials: client::default_credentials(),
        ..ClientConfig::default()
    };
    let mut client =
        Client::with_config(&addrs(controllers), config).context("controller addresses")?;
    client
        .call(req)
        .with_context(|| format!("asking the controllers at {controllers}"))
}

/// `getControllerMetaData`: the controllers and their leader.
#[derive(Debug, Serialize)]
pub struct ControllerMetaData {
    controllers: Vec<ControllerNode>,
    leader_id: Option<u64>,
    leader_addr: Option<String>,
    term: u64,
    answered_by: u64,
}

impl Render for ControllerMetaData {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        match (&self.leader_id, &self.leader_addr) {
            (Some(id), Some(addr)) => writeln!(w, "#Leader {id} {addr} (term {})", self.term)?,
            _ => writeln!(w, "#Leader none (term {})", self.term)?,
        }
        for c in &self.controllers {
            writeln!(w, "#Controller {} {}", c.id, c.addr)?;
        }
        Ok(())
    }
}

pub fn controller_metadata(controllers: &str) -> anyhow::Result<ControllerMetaData> {
    match call(controllers, &Request::GetMetadata)? {
        Response::Metadata {
            controllers,
            leader_id,
            leader_addr,
            term,
            answered_by,
        } => Ok(ControllerMetaData {
            controllers,
            leader_id,
            leader_addr,
            term,
            answered_by,
        }),
        other => bail!("unexpected answer: {other:?}"),
    }
}

/// A group's replica record, as `getSyncStateSet` and `electMaster` print it.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct SyncStateSet(ReplicaInfo);

impl Render for SyncStateSet {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        let r = &self.0;
        let master = r.master_id.map_or("none".to_owned(), |m| m.to_string());
        writeln!(
            w,
            "#brokerName {} #MasterId {master} #MasterAddr {} #MasterEpoch {} \
             #SyncStateSetEpoch {} #SyncStateSetNums {}",
            r.group,
            r.master_addr.as_deref().unwrap_or("none"),
            r.master_epoch,
            r.sync_state_set_epoch,
            r.sync_state_set.len()
        )?;
        for rep in &r.replicas {
            let kind = if r.sync_state_set.contains(&rep.broker_id) {
                "#InSyncReplica"
            } else {
                "#NotInSyncReplica"
            };
            writeln!(
                w,
                "{kind} {} {} alive={} epoch={} max_offsets={:?}",
                rep.broker_id, rep.addr, rep.alive, rep.last_epoch, rep.max_offsets
            )?;
        }
        Ok(())
    }
}

fn replica(controllers: &str, req: Request) -> anyhow::Result<SyncStateSet> {
    match call(controllers, &req)? {
        Response::Replica(info) => Ok(SyncStateSet(info)),
        Response::Refused { reason } => bail!("refused: {reason}"),
        other => bail!("unexpected answer: {other:?}"),
    }
}

pub fn sync_state_set(controllers: &str, group: &str) -> anyhow::Result<SyncStateSet> {
    replica(
        controllers,
        Request::GetReplicaInfo {
            group: group.to_owned(),
        },
    )
}

pub fn elect_master(
    controllers: &str,
    group: &str,
    broker_id: Option<u64>,
) -> anyhow::Result<SyncStateSet> {
    replica(
        controllers,
        Request::ElectMaster {
            group: group.to_owned(),
            broker_id,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_lists_split_on_semicolons_and_commas() {
        assert_eq!(addrs("a:1; b:2,c:3;"), vec!["a:1", "b:2", "c:3"]);
    }
}
