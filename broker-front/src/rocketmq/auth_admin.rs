//! RocketMQ 5.3's ACL 2.0 administration (AUTH_CREATE_USER 3001 … AUTH_LIST_ACL 3010), as
//! its mqadmin (`createUser`, `getUser`, `createAcl`, …) sends it: headers `username`,
//! `filter`, `subject`, `policyType`, `resource`, `subjectFilter`, `resourceFilter`, bodies
//! RocketMQ's `UserInfo` and `AclInfo` JSON. One set of users and ACLs serves every core
//! (`broker_base::auth`); a change is stored durably before it is answered and is in force
//! on every core at its next request.
//!
//! Answers: a blank name INVALID_PARAMETER (29); AUTH_GET_USER of a user that is not there,
//! and AUTH_GET_ACL of a user without an ACL, SUCCESS without a body (RocketMQ's broker
//! answers so, and its tools' `copyUser` and `copyAcl` ask the target broker that way
//! whether to create or update); a change or an ACL naming a user that is not there
//! USER_NOT_EXIST (3001); a super user created or updated by a caller who
//! signed as a user that is not super SYSTEM_ERROR (1, RocketMQ's answer); a user created
//! again with other fields NO_PERMISSION (16, RocketMQ's AuthenticationException); a change
//! sent to a slave SLAVE_NOT_AVAILABLE (11: it takes the set from its master).
//! RocketMQ's tools send a create or a delete to every broker of a cluster, and each core
//! is one to them: creating a user exactly as it is, and deleting what is not there,
//! succeed. Every change is logged on target `audit` with the caller and the peer.

use std::rc::Rc;

use acl::v2::{
    self, Acl, AclInfo, AuthMetadata, ChangeError, PolicyType, Resource, User, UserInfo,
};
use broker_base::auth::AuthStoreError;
use bytes::Bytes;
use remoting::codes::{request, response};
use remoting::RemotingCommand;

use super::{json_answer, ok};
use crate::client_conn::ClientConn;
use crate::conn::{Body, Outgoing};
use crate::error::BrokerError;
use crate::front::Front;

/// Whether `code` is one of the ACL 2.0 admin requests.
pub(crate) fn is_auth_admin(code: i32) -> bool {
    (request::AUTH_CREATE_USER..=request::AUTH_LIST_ACL).contains(&code)
}

/// Serves the ACL 2.0 admin request `req` (see [`is_auth_admin`]).
pub(crate) async fn serve(
    core: &Rc<Front>,
    client: &ClientConn,
    req: &RemotingCommand,
    body: &Bytes,
) -> Result<Outgoing, BrokerError> {
    let meta = core.shared.auth.snapshot();
    match req.code {
        request::AUTH_CREATE_USER | request::AUTH_UPDATE_USER => {
            upsert_user(core, client, req, body, &meta).await
        }
        request::AUTH_DELETE_USER => {
            let name = required(req, "username", "The username is blank")?;
            change(core, client, req, format!("delete user {name}"), move |m| {
                m.delete_user(&name);
                Ok(())
            })
            .await
        }
        request::AUTH_GET_USER => {
            let name = required(req, "username", "The username is blank")?;
            match meta.user(&name) {
                Some(u) => json_answer(req, &u.info()),
                None => Ok(empty_answer(req)),
            }
        }
        request::AUTH_LIST_USER => {
            let list: Vec<UserInfo> = meta
                .users(req.ext("filter").unwrap_or(""))
                .into_iter()
                .map(User::info)
                .collect();
            json_answer(req, &list)
        }
        request::AUTH_CREATE_ACL | request::AUTH_UPDATE_ACL => {
            let subject = required(req, "subject", "The subject is blank")?;
            let mut info: AclInfo = remoting::body::from_json(body)
                .map_err(|e| BrokerError::BadRequest(format!("AclInfo: {e}")))?;
            info.subject = Some(subject.clone());
            let acl = Acl::from_info(&info).map_err(BrokerError::BadRequest)?;
            let what = format!("set the acl of {subject}: {}", describe(&acl));
            change(core, client, req, what, move |m| m.upsert_acl(acl)).await
        }
        request::AUTH_DELETE_ACL => {
            let subject = required(req, "subject", "The subject is blank")?;
            let policy_type = PolicyType::parse(req.ext("policyType").unwrap_or(""))
                .map_err(BrokerError::BadRequest)?;
            let resources = req
                .ext("resource")
                .unwrap_or("")
                .split(',')
                .filter(|r| !r.trim().is_empty())
                .map(Resource::parse)
                .collect::<Result<Vec<_>, _>>()
                .map_err(BrokerError::BadRequest)?;
            let what = match resources.is_empty() {
                true => format!("delete the acl of {subject}"),
                false => {
                    let names: Vec<String> = resources.iter().map(|r| r.to_string()).collect();
                    format!(
                        "delete {} of the {} policy of {subject}",
                        names.join(","),
                        policy_type.name()
                    )
                }
            };
            change(core, client, req, what, move |m| {
                m.delete_acl(&subject, policy_type, &resources)
            })
            .await
        }
        request::AUTH_GET_ACL => {
            let subject = required(req, "subject", "The subject is blank")?;
            let user = v2::user_of_subject(&subject).map_err(BrokerError::BadRequest)?;
            match (meta.user(user), meta.acl(&subject)) {
                (None, _) => Ok(code_answer(
                    req,
                    response::USER_NOT_EXIST,
                    format!("user {user} does not exist"),
                )),
                (Some(_), Some(a)) => json_answer(req, &a.info()),
                (Some(_), None) => Ok(empty_answer(req)),
            }
        }
        request::AUTH_LIST_ACL => {
            let list: Vec<AclInfo> = meta
                .acls(
                    req.ext("subjectFilter").unwrap_or(""),
                    req.ext("resourceFilter").unwrap_or(""),
                )
                .iter()
                .map(Acl::info)
                .collect();
            json_answer(req, &list)
        }
        code => Err(BrokerError::Unsupported(format!(
            "request code {code} is not an ACL 2.0 admin request"
        ))),
    }
}

/// AUTH_CREATE_USER and AUTH_UPDATE_USER: the header's `username`, the body's other fields.
async fn upsert_user(
    core: &Rc<Front>,
    client: &ClientConn,
    req: &RemotingCommand,
    body: &Bytes,
    meta: &AuthMetadata,
) -> Result<Outgoing, BrokerError> {
    let name = required(req, "username", "The username is blank")?;
    let mut info: UserInfo = remoting::body::from_json(body)
        .map_err(|e| BrokerError::BadRequest(format!("UserInfo: {e}")))?;
    info.username = Some(name.clone());
    let create = req.code == request::AUTH_CREATE_USER;
    let super_asked = info
        .user_type
        .as_deref()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("super"));
    // RocketMQ's rule: a request signed by a user that is not super may not make one
    // (an unsigned request is one to a broker without authentication).
    let caller = req.ext(acl::sign::ACCESS_KEY).filter(|k| !k.is_empty());
    if super_asked {
        if let Some(caller) = caller {
            let is_super = meta
                .user(caller)
                .is_some_and(|u| u.user_type == acl::v2::UserType::Super);
            if !is_super {
                audit_refusal(
                    client,
                    req,
                    &format!("{caller} may not make super user {name}"),
                );
                return Ok(code_answer(
                    req,
                    response::SYSTEM_ERROR,
                    "The super user can only be create by super user".into(),
                ));
            }
        }
    }
    if create {
        let user = User::from_info(&info).map_err(BrokerError::BadRequest)?;
        let what = format!("create user {name} ({:?})", user.user_type);
        change(core, client, req, what, move |m| m.create_user(user)).await
    } else {
        let what = format!("update user {name}");
        change(core, client, req, what, move |m| {
            m.update_user(&name, &info).map(|_| ())
        })
        .await
    }
}

/// Applies `f` to the users and ACLs (stored before the answer, off the core), logs it on
/// target `audit` and answers.
async fn change(
    core: &Rc<Front>,
    client: &ClientConn,
    req: &RemotingCommand,
    what: String,
    f: impl FnOnce(&mut AuthMetadata) -> Result<(), ChangeError> + Send + 'static,
) -> Result<Outgoing, BrokerError> {
    // A slave takes its users and ACLs from its master, which would overwrite a change
    // made here.
    if let Err(e) = core.check_takes_changes() {
        return Ok(code_answer(
            req,
            response::SLAVE_NOT_AVAILABLE,
            format!("users and ACLs are changed at the master: {e}"),
        ));
    }
    let store = core.shared.auth.clone();
    let done = glommio::executor()
        .spawn_blocking(move || store.change(f))
        .await;
    let caller = req.ext(acl::sign::ACCESS_KEY).unwrap_or("-");
    match done {
        Ok(()) => {
            tracing::info!(target: "audit", peer = %client.peer, caller, "ACL 2.0: {what}");
            Ok(Outgoing::remoting(ok(req), Body::None))
        }
        Err(AuthStoreError::Change(e)) => {
            tracing::info!(
                target: "audit",
                peer = %client.peer,
                caller,
                "ACL 2.0: refused to {what}: {e}"
            );
            Ok(match e {
                ChangeError::Invalid(m) => code_answer(req, response::INVALID_PARAMETER, m),
                e @ ChangeError::UserNotExist(_) => {
                    code_answer(req, response::USER_NOT_EXIST, e.to_string())
                }
                e @ ChangeError::UserExists(_) => {
                    code_answer(req, response::NO_PERMISSION, e.to_string())
                }
            })
        }
        Err(e) => Err(BrokerError::Storage(e.to_string())),
    }
}

fn audit_refusal(client: &ClientConn, req: &RemotingCommand, why: &str) {
    tracing::warn!(
        target: "audit",
        peer = %client.peer,
        caller = req.ext(acl::sign::ACCESS_KEY).unwrap_or("-"),
        code = req.code,
        "ACL 2.0 refused a request: {why}"
    );
}

/// A short account of an ACL's entries for the audit line.
fn describe(acl: &Acl) -> String {
    let mut parts = Vec::new();
    for p in &acl.policies {
        for e in &p.entries {
            let actions: Vec<&str> = e.actions.iter().map(|a| a.name()).collect();
            parts.push(format!(
                "{} {} {} {:?}",
                p.policy_type.name(),
                e.resource,
                actions.join("|"),
                e.decision
            ));
        }
    }
    parts.join("; ")
}

fn required(req: &RemotingCommand, field: &str, blank: &str) -> Result<String, BrokerError> {
    req.ext(field)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| BrokerError::BadRequest(blank.to_owned()))
}

/// SUCCESS without a body: what RocketMQ answers a get of something that is not there.
fn empty_answer(req: &RemotingCommand) -> Outgoing {
    Outgoing::remoting(
        RemotingCommand::response_to(req, response::SUCCESS, None),
        Body::None,
    )
}

fn code_answer(req: &RemotingCommand, code: i32, remark: String) -> Outgoing {
    Outgoing::remoting(
        RemotingCommand::response_to(req, code, Some(remark)),
        Body::None,
    )
}
