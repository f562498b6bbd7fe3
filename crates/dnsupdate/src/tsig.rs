//! Transaction signatures (RFC 8945): a shared key signs each request, and
//! the server's signed answer is verified against the request's MAC, so
//! neither an update nor its answer can be forged or replayed unseen.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Sha256, Sha512};

use crate::message::{HEADER_LEN, Message, Rcode, class, rtype};
use crate::name::Name;

/// Seconds of clock difference allowed between signer and verifier (the
/// value RFC 8945 §10 recommends).
pub const FUDGE: u16 = 300;

/// A TSIG algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// HMAC-SHA256 (RFC 8945 §6: mandatory to implement).
    HmacSha256,
    /// HMAC-SHA512.
    HmacSha512,
}

impl Algorithm {
    /// Its name in configuration files (BIND's, Knot's, nsupdate's).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::HmacSha256 => "hmac-sha256",
            Algorithm::HmacSha512 => "hmac-sha512",
        }
    }

    fn wire_name(self) -> Name {
        // Both names are valid: parsing cannot fail.
        Name::parse(self.name()).unwrap_or_else(|_| Name::root())
    }

    fn mac(self, secret: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        match self {
            Algorithm::HmacSha256 => hmac_of::<Hmac<Sha256>>(secret, parts),
            Algorithm::HmacSha512 => hmac_of::<Hmac<Sha512>>(secret, parts),
        }
    }
}

fn hmac_of<M: Mac + hmac::digest::KeyInit>(secret: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC takes keys of any length.
    let Ok(mut m) = <M as hmac::digest::KeyInit>::new_from_slice(secret) else {
        return Vec::new();
    };
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().to_vec()
}

/// Why a key cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// the key name is not a domain name
    #[error("key name: {0}")]
    Name(#[from] crate::name::NameError),
    /// an algorithm other than hmac-sha256 and hmac-sha512
    #[error("algorithm {0:?}: use \"hmac-sha256\" or \"hmac-sha512\"")]
    Algorithm(String),
    /// the secret is not base64
    #[error("the secret is not base64: {0}")]
    Base64(String),
    /// a secret shorter than 16 bytes is guessable
    #[error("the secret is {0} bytes: at least 16 are needed (32 recommended)")]
    Short(usize),
}

/// A TSIG key: name, algorithm, secret.
#[derive(Clone)]
pub struct Key {
    name: Name,
    algorithm: Algorithm,
    secret: Vec<u8>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        write!(f, "Key({} {})", self.name, self.algorithm.name())
    }
}

/// Why a signed answer was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// the answer carries no TSIG record
    #[error("the answer is not signed")]
    Unsigned,
    /// signed with another key or algorithm
    #[error("the answer is signed with key {key} ({algorithm}), not ours")]
    OtherKey {
        /// its key name
        key: String,
        /// its algorithm name
        algorithm: String,
    },
    /// the MAC does not verify
    #[error("the answer's signature does not verify")]
    BadMac,
    /// signed too far from our clock
    #[error("the answer was signed {0} s away from this host's clock (fudge {FUDGE} s)")]
    BadTime(i64),
}

impl Key {
    /// A key from its name, algorithm name and base64 secret, as BIND and
    /// Knot write them.
    pub fn new(name: &str, algorithm: &str, secret_base64: &str) -> Result<Key, KeyError> {
        let algorithm = match algorithm.trim().to_ascii_lowercase().trim_end_matches('.') {
            "hmac-sha256" => Algorithm::HmacSha256,
            "hmac-sha512" => Algorithm::HmacSha512,
            other => return Err(KeyError::Algorithm(other.to_owned())),
        };
        let secret = base64::engine::general_purpose::STANDARD
            .decode(secret_base64.trim())
            .map_err(|e| KeyError::Base64(e.to_string()))?;
        if secret.len() < 16 {
            return Err(KeyError::Short(secret.len()));
        }
        Ok(Key {
            name: Name::parse(name)?,
            algorithm,
            secret,
        })
    }

    /// Its name.
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// Its algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The TSIG variables (RFC 8945 §4.3.3) after the message.
    fn variables(&self, time: u64, fudge: u16, error: u16, other: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(64);
        v.extend(self.name.wire());
        v.extend(class::ANY.to_be_bytes());
        v.extend(0u32.to_be_bytes());
        v.extend(self.algorithm.wire_name().wire());
        v.extend(&time.to_be_bytes()[2..]);
        v.extend(fudge.to_be_bytes());
        v.extend(error.to_be_bytes());
        v.extend(u16::try_from(other.len()).unwrap_or(u16::MAX).to_be_bytes());
        v.extend(other);
        v
    }

    /// Signs `msg` (an encoded request without TSIG) at `time` (seconds
    /// since the epoch): the message with its TSIG record appended, and
    /// the MAC (to verify the answer with).
    pub fn sign(&self, msg: &[u8], time: u64) -> (Vec<u8>, Vec<u8>) {
        let vars = self.variables(time, FUDGE, 0, &[]);
        let mac = self.algorithm.mac(&self.secret, &[msg, &vars]);
        let mut out = msg.to_vec();
        if let Some(ar) = out.get_mut(10..12) {
            let n = u16::from_be_bytes([ar[0], ar[1]]).saturating_add(1);
            ar.copy_from_slice(&n.to_be_bytes());
        }
        let id = msg.get(..2).unwrap_or(&[0, 0]).to_vec();
        let mut rdata = Vec::with_capacity(64 + mac.len());
        rdata.extend(self.algorithm.wire_name().wire());
        rdata.extend(&time.to_be_bytes()[2..]);
        rdata.extend(FUDGE.to_be_bytes());
        rdata.extend(u16::try_from(mac.len()).unwrap_or(0).to_be_bytes());
        rdata.extend(&mac);
        rdata.extend(id);
        rdata.extend([0, 0, 0, 0]);
        out.extend(self.name.wire());
        out.extend(rtype::TSIG.to_be_bytes());
        out.extend(class::ANY.to_be_bytes());
        out.extend(0u32.to_be_bytes());
        out.extend(u16::try_from(rdata.len()).unwrap_or(0).to_be_bytes());
        out.extend(rdata);
        (out, mac)
    }

    /// Verifies the answer `bytes` (parsed: `msg`) to a request whose MAC
    /// was `request_mac`, at `now` (seconds since the epoch).
    ///
    /// An answer the server could not sign — it did not accept our
    /// signature (BADSIG, BADKEY) — carries an empty MAC: that is no
    /// verification, and the caller learns it from [`Message::rcode`]; this
    /// returns `Unsigned` for it.
    pub fn verify(
        &self,
        bytes: &[u8],
        msg: &Message,
        request_mac: &[u8],
        now: u64,
    ) -> Result<(), VerifyError> {
        let t = msg.tsig.as_ref().ok_or(VerifyError::Unsigned)?;
        if t.key != self.name || t.algorithm != self.algorithm.wire_name() {
            return Err(VerifyError::OtherKey {
                key: t.key.to_string(),
                algorithm: t.algorithm.to_string(),
            });
        }
        if t.mac.is_empty() {
            return Err(VerifyError::Unsigned);
        }
        let mut stripped = bytes.get(..t.offset).unwrap_or_default().to_vec();
        if stripped.len() < HEADER_LEN {
            return Err(VerifyError::BadMac);
        }
        stripped[..2].copy_from_slice(&t.original_id.to_be_bytes());
        let ar = u16::from_be_bytes([stripped[10], stripped[11]]).saturating_sub(1);
        stripped[10..12].copy_from_slice(&ar.to_be_bytes());
        let len = u16::try_from(request_mac.len()).unwrap_or(0).to_be_bytes();
        let vars = self.variables(t.time_signed, t.fudge, t.error, &t.other);
        let want = self
            .algorithm
            .mac(&self.secret, &[&len, request_mac, &stripped, &vars]);
        // Full-length MACs only (no truncation, RFC 8945 §5.2.2.1 allows
        // refusing it); compared in constant time.
        if want.len() != t.mac.len() || !constant_time_eq(&want, &t.mac) {
            return Err(VerifyError::BadMac);
        }
        let skew =
            i64::try_from(now).unwrap_or(i64::MAX) - i64::try_from(t.time_signed).unwrap_or(0);
        if skew.unsigned_abs() > u64::from(t.fudge) {
            return Err(VerifyError::BadTime(skew));
        }
        Ok(())
    }

    /// The rcode of an answer whose TSIG error says the server refused our
    /// signature, if it does.
    pub fn refused(msg: &Message) -> Option<Rcode> {
        msg.tsig
            .as_ref()
            .filter(|t| t.error != 0)
            .map(|t| Rcode(t.error))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::message::{Message, rtype};

    const SECRET: &str = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0ISE=";

    #[test]
    fn keys_are_checked() {
        assert!(Key::new("k", "hmac-sha256", SECRET).is_ok());
        assert!(Key::new("k", "HMAC-SHA512.", SECRET).is_ok());
        assert!(matches!(
            Key::new("k", "hmac-md5", SECRET),
            Err(KeyError::Algorithm(_))
        ));
        assert!(matches!(
            Key::new("k", "hmac-sha256", "not base64!"),
            Err(KeyError::Base64(_))
        ));
        assert!(matches!(
            Key::new("k", "hmac-sha256", "c2hvcnQ="),
            Err(KeyError::Short(5))
        ));
        assert!(!format!("{:?}", Key::new("k", "hmac-sha256", SECRET).unwrap()).contains(SECRET));
    }

    /// The server's side, as RFC 8945 §5.3 has it: sign an answer to a
    /// request whose MAC is `req_mac`.
    fn sign_answer(key: &Key, answer: &Message, req_mac: &[u8], time: u64) -> Vec<u8> {
        let body = answer.encode();
        let len = u16::try_from(req_mac.len()).unwrap().to_be_bytes();
        let vars = key.variables(time, FUDGE, 0, &[]);
        let mac = key
            .algorithm
            .mac(&key.secret, &[&len, req_mac, &body, &vars]);
        // Reuse the request signer's layout, then put the answer's MAC in.
        let (mut out, first) = key.sign(&body, time);
        let at = out.len() - 6 - first.len();
        out[at..at + mac.len()].copy_from_slice(&mac);
        out
    }

    #[test]
    fn a_signed_request_verifies_and_its_signed_answer_too() {
        let key = Key::new("spillway-zones", "hmac-sha256", SECRET).unwrap();
        let req = Message::query(0x1234, &Name::parse("www.lab.test").unwrap(), rtype::A);
        let (signed, mac) = key.sign(&req.encode(), 1_700_000_000);
        let parsed = Message::parse(&signed).unwrap();
        let t = parsed.tsig.as_ref().unwrap();
        assert_eq!(
            (t.original_id, t.fudge, t.mac.clone()),
            (0x1234, FUDGE, mac.clone())
        );
        assert_eq!(parsed.additional.len(), 0, "TSIG is kept apart");

        let mut ans = req.clone();
        ans.flags |= 0x8000;
        let bytes = sign_answer(&key, &ans, &mac, 1_700_000_010);
        let m = Message::parse(&bytes).unwrap();
        assert_eq!(key.verify(&bytes, &m, &mac, 1_700_000_020), Ok(()));
        // Another request's MAC, another key, a flipped bit, a late clock.
        assert_eq!(
            key.verify(&bytes, &m, &[0; 32], 1_700_000_020),
            Err(VerifyError::BadMac)
        );
        let other = Key::new(
            "spillway-zones",
            "hmac-sha256",
            "b3RoZXItb3RoZXItb3RoZXItb3RoZXIhIQ==",
        )
        .unwrap();
        assert_eq!(
            other.verify(&bytes, &m, &mac, 1_700_000_020),
            Err(VerifyError::BadMac)
        );
        let mut flipped = bytes.clone();
        flipped[3] ^= 0x01;
        let fm = Message::parse(&flipped).unwrap();
        assert_eq!(
            key.verify(&flipped, &fm, &mac, 1_700_000_020),
            Err(VerifyError::BadMac)
        );
        assert_eq!(
            key.verify(&bytes, &m, &mac, 1_700_001_000),
            Err(VerifyError::BadTime(990))
        );
        let unsigned = ans.encode();
        let um = Message::parse(&unsigned).unwrap();
        assert_eq!(
            key.verify(&unsigned, &um, &mac, 0),
            Err(VerifyError::Unsigned)
        );
    }
}
