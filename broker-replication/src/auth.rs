//! Replication's mutual authentication. A master and a slave configured with credentials
//! (`acl_access_key`, `acl_secret_key`) prove to each other that they hold the same pair
//! before any of the log moves: the slave's HELLO names its access key and carries a fresh
//! nonce, the master answers CHALLENGE with its proof over that nonce and a nonce of its
//! own, and the slave answers PROOF over the master's nonce. A proof is the acl crate's
//! login signature (HMAC-SHA256 keyed by the secret key) over the other side's nonce and a
//! label naming the prover's role, so the secret never crosses the wire, a proof is good for
//! one connection only, and a master's proof never passes for a slave's (or back).
//!
//! A broker with credentials asks them of its peer: a master refuses a slave that sends
//! none or another access key or a wrong proof, and a slave refuses a master that answers
//! without a challenge or with a wrong proof. Brokers without credentials replicate
//! unauthenticated, unless access control is on (`acl_enable`): such a broker does not start
//! without credentials, and one told to (`acl_allow_no_broker_credentials`) refuses every
//! slave.

use crate::config::Credentials;
use crate::error::ReplicationError;

const MASTER_LABEL: &str = "corvus-replication-master";
const SLAVE_LABEL: &str = "corvus-replication-slave";

fn labelled(label: &str, nonce: &str) -> String {
    format!("{label}\n{nonce}")
}

/// A fresh nonce for one handshake.
pub fn nonce() -> String {
    acl::sign::new_nonce()
}

/// The master's proof over the slave's nonce.
pub fn master_proof(c: &Credentials, slave_nonce: &str) -> String {
    acl::sign::login_signature(
        &c.secret_key,
        &labelled(MASTER_LABEL, slave_nonce),
        &c.access_key,
    )
}

/// The slave's proof over the master's nonce.
pub fn slave_proof(c: &Credentials, master_nonce: &str) -> String {
    acl::sign::login_signature(
        &c.secret_key,
        &labelled(SLAVE_LABEL, master_nonce),
        &c.access_key,
    )
}

/// Whether the master's `proof` over `slave_nonce` shows it holds `c` (constant time).
pub fn master_proof_holds(c: &Credentials, slave_nonce: &str, proof: &str) -> bool {
    !slave_nonce.is_empty()
        && acl::sign::verify_login(
            &c.secret_key,
            &labelled(MASTER_LABEL, slave_nonce),
            &c.access_key,
            proof,
        )
}

/// Whether the slave's `proof` over `master_nonce` shows it holds `c` (constant time).
pub fn slave_proof_holds(c: &Credentials, master_nonce: &str, proof: &str) -> bool {
    !master_nonce.is_empty()
        && acl::sign::verify_login(
            &c.secret_key,
            &labelled(SLAVE_LABEL, master_nonce),
            &c.access_key,
            proof,
        )
}

/// A master's first look at a slave's HELLO: whether the access key it names is this
/// master's; the error is the reason the slave is refused with.
pub fn check_access_key(
    mine: &Credentials,
    slave_access_key: &str,
) -> Result<(), ReplicationError> {
    if slave_access_key.is_empty() {
        return Err(ReplicationError::Refused(
            "the slave sent no credentials: this master requires acl_access_key and \
             acl_secret_key of its slaves"
                .into(),
        ));
    }
    if slave_access_key != mine.access_key {
        return Err(ReplicationError::Refused(format!(
            "the slave's access key `{slave_access_key}` is not this master's"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(secret: &str) -> Credentials {
        Credentials {
            access_key: "replicator".into(),
            secret_key: secret.into(),
        }
    }

    #[test]
    fn proofs_hold_for_the_same_pair_only_and_only_in_their_direction() {
        let (a, b) = (creds("s3cret"), creds("other"));
        let n = nonce();
        assert!(master_proof_holds(&a, &n, &master_proof(&a, &n)));
        assert!(slave_proof_holds(&a, &n, &slave_proof(&a, &n)));
        // Another secret, another nonce, or the other role's proof: refused.
        assert!(!master_proof_holds(&a, &n, &master_proof(&b, &n)));
        assert!(!master_proof_holds(&a, &nonce(), &master_proof(&a, &n)));
        assert!(!slave_proof_holds(&a, &n, &master_proof(&a, &n)));
        assert!(!master_proof_holds(&a, &n, &slave_proof(&a, &n)));
        assert!(!master_proof_holds(&a, "", &master_proof(&a, "")));
        assert_ne!(nonce(), nonce());
    }

    #[test]
    fn a_slave_must_name_the_masters_access_key() {
        let a = creds("s3cret");
        assert!(check_access_key(&a, "replicator").is_ok());
        assert!(check_access_key(&a, "")
            .unwrap_err()
            .to_string()
            .contains("no credentials"));
        assert!(check_access_key(&a, "intruder")
            .unwrap_err()
            .to_string()
            .contains("`intruder`"));
    }
}
