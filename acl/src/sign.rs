//! Signatures: RocketMQ ACL 1.0's per-request signature (what the real clients'
//! `AclClientRPCHook` computes) and the native protocol's login.
//!
//! **RocketMQ.** The signed content is the values of the request's ext fields (its custom
//! header, `AccessKey` and `SecurityToken` included), in the order of their keys, without
//! `Signature`, followed by the body; the signature is base64 of HmacSHA1 over it keyed by
//! the secret key. RocketMQ's validator also leaves `_UNIQUE_KEY_QUERY` (the query-by-key
//! flag of 4.9.3+) out of the content, while the clients sign it, so a query by key from one
//! side or the other verifies only one way: [`verify_remoting`] accepts either.
//!
//! **gRPC.** RocketMQ 5's SDKs sign each call's `x-mq-date-time` metadata (the client's clock,
//! `yyyyMMdd'T'HHmmss'Z'`) with HMAC-SHA1 keyed by the secret key, in hex, and send it as the
//! `authorization` metadata: `MQv2-HMAC-SHA1 Credential=<AK>, SignedHeaders=x-mq-date-time,
//! Signature=<hex>` (the Go SDK writes the credential as `<AK>/...`, the Java SDK upper-case
//! hex, the others lower-case): [`parse_grpc_authorization`], [`verify_grpc`].
//!
//! **Native.** Requests are not signed one by one. A connection asks for a nonce
//! (`Command::AuthChallenge`, answered `AuthNonce`) and logs in once (`Command::Login`) with
//! base64 of HMAC-SHA256, keyed by the secret key, over `corvus-login\n<nonce>\n<access key>`
//! ([`login_signature`]); the secret never crosses the wire and a recorded login does not
//! work on another connection (another nonce).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;

/// The ext field carrying the signature.
pub const SIGNATURE: &str = "Signature";
/// The ext field carrying the access key.
pub const ACCESS_KEY: &str = "AccessKey";
/// The ext field carrying an (optional) security token.
pub const SECURITY_TOKEN: &str = "SecurityToken";
/// RocketMQ's `MixAll.UNIQUE_MSG_QUERY_FLAG`.
pub const UNIQUE_MSG_QUERY_FLAG: &str = "_UNIQUE_KEY_QUERY";

type HmacSha1 = Hmac<sha1::Sha1>;
type HmacSha256 = Hmac<sha2::Sha256>;

/// The content RocketMQ signs: values by sorted key, without `Signature` (and without
/// `_UNIQUE_KEY_QUERY` when `skip_unique_flag`), then the body.
fn remoting_mac<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    body: &[u8],
    secret_key: &str,
    skip_unique_flag: bool,
) -> HmacSha1 {
    let mut sorted: Vec<(&str, &str)> = fields
        .into_iter()
        .filter(|(k, _)| *k != SIGNATURE && !(skip_unique_flag && *k == UNIQUE_MSG_QUERY_FLAG))
        .collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let mut mac = match HmacSha1::new_from_slice(secret_key.as_bytes()) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    for (_, v) in sorted {
        mac.update(v.as_bytes());
    }
    mac.update(body);
    mac
}

/// The `Signature` value a RocketMQ client puts on a request with these ext fields (which
/// must already hold `AccessKey`, and `SecurityToken` when there is one) and body.
pub fn sign_remoting<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    body: &[u8],
    secret_key: &str,
) -> String {
    STANDARD.encode(
        remoting_mac(fields, body, secret_key, false)
            .finalize()
            .into_bytes(),
    )
}

/// Whether `signature` is right for these ext fields and body (constant-time compare).
pub fn verify_remoting<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
    body: &[u8],
    secret_key: &str,
    signature: &str,
) -> bool {
    let Ok(given) = STANDARD.decode(signature.trim()) else {
        return false;
    };
    if remoting_mac(fields.clone(), body, secret_key, false)
        .verify_slice(&given)
        .is_ok()
    {
        return true;
    }
    let has_flag = fields
        .clone()
        .into_iter()
        .any(|(k, _)| k == UNIQUE_MSG_QUERY_FLAG);
    has_flag
        && remoting_mac(fields, body, secret_key, true)
            .verify_slice(&given)
            .is_ok()
}

fn login_mac(secret_key: &str, nonce: &str, access_key: &str) -> HmacSha256 {
    let mut mac = match HmacSha256::new_from_slice(secret_key.as_bytes()) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    mac.update(b"corvus-login\n");
    mac.update(nonce.as_bytes());
    mac.update(b"\n");
    mac.update(access_key.as_bytes());
    mac
}

/// The native login's signature: what the client sends in `Command::Login`.
pub fn login_signature(secret_key: &str, nonce: &str, access_key: &str) -> String {
    STANDARD.encode(
        login_mac(secret_key, nonce, access_key)
            .finalize()
            .into_bytes(),
    )
}

/// Whether a native login's signature is right (constant-time compare).
pub fn verify_login(secret_key: &str, nonce: &str, access_key: &str, signature: &str) -> bool {
    match STANDARD.decode(signature.trim()) {
        Ok(given) => login_mac(secret_key, nonce, access_key)
            .verify_slice(&given)
            .is_ok(),
        Err(_) => false,
    }
}

/// What a gRPC call's `authorization` metadata names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcAuthorization<'a> {
    pub access_key: &'a str,
    /// Hex, either case.
    pub signature: &'a str,
}

/// The access key and signature of an `authorization` value; `None` when it is not RocketMQ
/// 5's form (`MQv2-HMAC-SHA1` and comma-separated `key=value` items with `Credential` and
/// `Signature`).
pub fn parse_grpc_authorization(value: &str) -> Option<GrpcAuthorization<'_>> {
    let (scheme, items) = value.trim().split_once(' ')?;
    if scheme != "MQv2-HMAC-SHA1" {
        return None;
    }
    let mut access_key = None;
    let mut signature = None;
    for item in items.split(',') {
        let (k, v) = item.trim().split_once('=')?;
        match k.trim() {
            "Credential" => access_key = v.trim().split('/').next(),
            "Signature" => signature = Some(v.trim()),
            _ => {}
        }
    }
    Some(GrpcAuthorization {
        access_key: access_key.filter(|k| !k.is_empty())?,
        signature: signature?,
    })
}

fn grpc_mac(secret_key: &str, date_time: &str) -> HmacSha1 {
    let mut mac = match HmacSha1::new_from_slice(secret_key.as_bytes()) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    mac.update(date_time.as_bytes());
    mac
}

/// The signature a v5 SDK sends for `date_time` (upper-case hex, as the Java SDK writes it).
pub fn grpc_signature(secret_key: &str, date_time: &str) -> String {
    grpc_mac(secret_key, date_time)
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// Whether `signature` (hex, either case) signs `date_time` with `secret_key` (constant-time
/// compare).
pub fn verify_grpc(secret_key: &str, date_time: &str, signature: &str) -> bool {
    let hex = signature.as_bytes();
    if !hex.len().is_multiple_of(2) {
        return false;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let given: Option<Vec<u8>> = hex
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect();
    match given {
        Some(given) => grpc_mac(secret_key, date_time).verify_slice(&given).is_ok(),
        None => false,
    }
}

fn envelope_mac(
    secret_key: &str,
    access_key: &str,
    signed_at_ms: u64,
    nonce: &str,
    body: &[u8],
) -> HmacSha256 {
    let mut mac = match HmacSha256::new_from_slice(secret_key.as_bytes()) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    mac.update(b"corvus-envelope\n");
    mac.update(access_key.as_bytes());
    mac.update(b"\n");
    mac.update(signed_at_ms.to_string().as_bytes());
    mac.update(b"\n");
    mac.update(nonce.as_bytes());
    mac.update(b"\n");
    mac.update(body);
    mac
}

/// The signature of an envelope (the controllers' signed requests): base64 of
/// HMAC-SHA256, keyed by the secret key, over `corvus-envelope\n<access key>\n<signed at
/// ms>\n<nonce>\n<body>`. The time and nonce are signed so that a [`crate::fresh::ReplayGuard`]
/// can trust them.
pub fn sign_envelope(
    secret_key: &str,
    access_key: &str,
    signed_at_ms: u64,
    nonce: &str,
    body: &[u8],
) -> String {
    STANDARD.encode(
        envelope_mac(secret_key, access_key, signed_at_ms, nonce, body)
            .finalize()
            .into_bytes(),
    )
}

/// Whether an envelope's signature is right (constant-time compare).
pub fn verify_envelope(
    secret_key: &str,
    access_key: &str,
    signed_at_ms: u64,
    nonce: &str,
    body: &[u8],
    signature: &str,
) -> bool {
    match STANDARD.decode(signature.trim()) {
        Ok(given) => envelope_mac(secret_key, access_key, signed_at_ms, nonce, body)
            .verify_slice(&given)
            .is_ok(),
        Err(_) => false,
    }
}

/// A fresh login nonce: 24 random bytes from the OS, base64.
pub fn new_nonce() -> String {
    let mut bytes = [0u8; 24];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_authorization_is_read_and_verified_as_the_v5_sdks_write_it() {
        // HMAC-SHA1's published example: key "key", that sentence.
        let signed = "The quick brown fox jumps over the lazy dog";
        let hex = "de7c9b85b8b78aa6bc8a7a36f70a90701c9db4d9";
        assert_eq!(grpc_signature("key", signed), hex.to_uppercase());
        assert!(verify_grpc("key", signed, hex));
        assert!(verify_grpc("key", signed, &hex.to_uppercase()));
        assert!(!verify_grpc("other", signed, hex));
        assert!(!verify_grpc("key", "20261205T101010Z", hex));
        for bad in ["", "de7", "zz7c9b85b8b78aa6bc8a7a36f70a90701c9db4d9"] {
            assert!(!verify_grpc("key", signed, bad), "{bad}");
        }
        let java = "MQv2-HMAC-SHA1 Credential=ak1, SignedHeaders=x-mq-date-time, Signature=AB12";
        let go =
            "MQv2-HMAC-SHA1 Credential=ak1//Rocketmq, SignedHeaders=x-mq-date-time, Signature=ab12";
        for (value, signature) in [(java, "AB12"), (go, "ab12")] {
            assert_eq!(
                parse_grpc_authorization(value),
                Some(GrpcAuthorization {
                    access_key: "ak1",
                    signature
                })
            );
        }
        for bad in [
            "Bearer abc",
            "MQv2-HMAC-SHA1 Signature=AB12",
            "MQv2-HMAC-SHA1 Credential=, Signature=AB12",
            "MQv2-HMAC-SHA1 Credential=ak1",
            "MQv2-HMAC-SHA1",
        ] {
            assert_eq!(parse_grpc_authorization(bad), None, "{bad}");
        }
    }

    #[test]
    fn remoting_signature_matches_rocketmq() {
        // HmacSHA1("12345678", "value-avalue-b" + body), the way AclClientRPCHook builds it:
        // values sorted by key ("AccessKey" < "a" < "b"), then the body.
        let fields = [
            ("b", "value-b"),
            ("AccessKey", "RocketMQ"),
            ("a", "value-a"),
        ];
        let sig = sign_remoting(fields, b"body", "12345678");
        let mut mac = HmacSha1::new_from_slice(b"12345678").unwrap();
        mac.update(b"RocketMQvalue-avalue-bbody");
        assert_eq!(sig, STANDARD.encode(mac.finalize().into_bytes()));
        assert!(verify_remoting(fields, b"body", "12345678", &sig));
        // The signature field itself is not signed.
        let with_sig = [
            ("b", "value-b"),
            ("AccessKey", "RocketMQ"),
            ("a", "value-a"),
            ("Signature", sig.as_str()),
        ];
        assert!(verify_remoting(with_sig, b"body", "12345678", &sig));
        assert!(!verify_remoting(fields, b"bodY", "12345678", &sig));
        assert!(!verify_remoting(fields, b"body", "12345679", &sig));
        assert!(!verify_remoting(fields, b"body", "12345678", "not base64!"));
    }

    #[test]
    fn unique_key_flag_verifies_either_way() {
        let with = [("AccessKey", "RocketMQ"), (UNIQUE_MSG_QUERY_FLAG, "true")];
        let without = [("AccessKey", "RocketMQ")];
        let signed_with = sign_remoting(with, b"", "12345678");
        let signed_without = sign_remoting(without, b"", "12345678");
        assert!(verify_remoting(with, b"", "12345678", &signed_with));
        assert!(verify_remoting(with, b"", "12345678", &signed_without));
        assert!(!verify_remoting(without, b"", "12345678", &signed_with));
    }

    #[test]
    fn envelope_signature_binds_time_nonce_key_and_body() {
        let s = sign_envelope("secret-1", "ak", 1_000, "n1", b"{}");
        assert!(verify_envelope("secret-1", "ak", 1_000, "n1", b"{}", &s));
        assert!(!verify_envelope("secret-2", "ak", 1_000, "n1", b"{}", &s));
        assert!(!verify_envelope("secret-1", "ak2", 1_000, "n1", b"{}", &s));
        assert!(!verify_envelope("secret-1", "ak", 1_001, "n1", b"{}", &s));
        assert!(!verify_envelope("secret-1", "ak", 1_000, "n2", b"{}", &s));
        assert!(!verify_envelope("secret-1", "ak", 1_000, "n1", b"{ }", &s));
    }

    #[test]
    fn login_signature_binds_nonce_and_key() {
        let n = new_nonce();
        assert_ne!(n, new_nonce());
        let s = login_signature("secret-1", &n, "ak-0001");
        assert!(verify_login("secret-1", &n, "ak-0001", &s));
        assert!(!verify_login("secret-2", &n, "ak-0001", &s));
        assert!(!verify_login("secret-1", &new_nonce(), "ak-0001", &s));
        assert!(!verify_login("secret-1", &n, "ak-0002", &s));
    }
}
