//! Flow-state sync datagrams between the nodes of a cluster (M36).
//!
//! A node tells its peers about the flow entries its workers create, so that
//! when it dies or ECMP rehashes, another node sends a flow's packets to the
//! same backend even where that node's own Maglev choice differs. This crate
//! is only the datagram: no sockets, no flow table, no clock.
//!
//! # Format (all integers big-endian)
//!
//! ```text
//! header  magic "SWFS" | version 1 | kind | count u16 | sender u64 | sequence u64   (24 bytes)
//! entry   key 5×u64 | hash u64 | cookie u32 | flags u8 | age_ms u32 | len u8 | identity
//! rate    milli_pps u64 | len u8 | service | len u8 | identity
//! trailer HMAC-SHA256 over everything before it                                      (32 bytes)
//! ```
//!
//! * `kind` 1 carries `count` entries; kind 2 asks the receiver for a dump of
//!   its current entries, kind 3 says that dump is complete; 2 and 3 carry
//!   none. Kind 4 carries `count` rates: what the sender's data plane
//!   measured per endpoint over its last planning interval (M25 across a
//!   cluster, M34), so every node decides spillover on the cluster's total.
//!   A node of an older version drops kind 4 as malformed (counted). Kind 5
//!   (no payload) says the sender is leaving the cluster (a graceful
//!   shutdown), so peers stop holding its share of capacity.
//! * `key` is the flow-table key as the data plane stores it: the packed
//!   5-tuple with the service's (or gateway endpoint's) flow tag in its low
//!   bits, and `hash` the hash the table placed it by. [`decode`] has the
//!   caller check both against each other (this crate knows no flow keys),
//!   so a forged hash cannot plant an entry where no lookup finds it.
//! * The backend travels by identity (its endpoint identity, e.g.
//!   `10.0.0.1:80`), never by slot: slots differ between nodes. The receiver
//!   resolves it within the service its flow tag names.
//!
//! The MAC is checked first, in constant time, before any other field is
//! believed; then every length is bounds-checked, and any byte left over or
//! missing rejects the whole datagram.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// First four bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"SWFS";
/// The format version this crate writes and reads.
pub const VERSION: u8 = 1;
/// Bytes of the header.
pub const HEADER_LEN: usize = 24;
/// Bytes of the HMAC-SHA256 trailer.
pub const MAC_LEN: usize = 32;
/// Bytes of an entry before its identity.
pub const ENTRY_FIXED_LEN: usize = 40 + 8 + 4 + 1 + 4 + 1;
/// Longest endpoint identity carried (a bracketed IPv6 address with a port
/// is 47 bytes; `remote:` plus a rule name fits too).
pub const MAX_IDENTITY: usize = 128;
/// Largest datagram written or accepted: fits a 1500-byte MTU under IPv6
/// and UDP headers, so sync never depends on fragmentation.
pub const MAX_DATAGRAM: usize = 1400;
/// Shortest shared key accepted (bytes): 128 bits.
pub const MIN_KEY_LEN: usize = 16;
/// Longest shared key accepted (bytes): one SHA-256 block.
pub const MAX_KEY_LEN: usize = 64;

/// What a datagram is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Flow entries the sender holds.
    Entries,
    /// "Send me your current entries" (a node that just started).
    RequestDump,
    /// "My dump to you is complete" (possibly empty): the requester stops
    /// asking.
    DumpDone,
    /// The sender's measured rates per endpoint.
    Rates,
    /// "I am leaving the cluster" (a graceful shutdown): the receiver stops
    /// holding the sender's share of capacity until it is heard again.
    Leaving,
}

impl Kind {
    const fn code(self) -> u8 {
        match self {
            Kind::Entries => 1,
            Kind::RequestDump => 2,
            Kind::DumpDone => 3,
            Kind::Rates => 4,
            Kind::Leaving => 5,
        }
    }

    const fn from_code(c: u8) -> Option<Kind> {
        match c {
            1 => Some(Kind::Entries),
            2 => Some(Kind::RequestDump),
            3 => Some(Kind::DumpDone),
            4 => Some(Kind::Rates),
            5 => Some(Kind::Leaving),
            _ => None,
        }
    }
}

/// A datagram's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the datagram is for.
    pub kind: Kind,
    /// The sender's node ID ([`node_id`] of its name).
    pub sender: u64,
    /// Increases by one with every datagram the sender sends.
    pub sequence: u64,
}

/// One flow entry as it travels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncEntry {
    /// The flow-table key: packed flow with the flow tag in its low bits.
    pub key: [u64; 5],
    /// The table hash of the key (that of the key without its tag).
    pub hash: u64,
    /// The backend's endpoint identity within the tag's service.
    pub identity: String,
    /// Flow cookie (gateway mode, M32; 0 otherwise).
    pub cookie: u32,
    /// The entry's flag bits (protocol class, TCP state).
    pub flags: u8,
    /// Milliseconds since the sender last saw a packet of the flow.
    pub age_ms: u32,
}

impl SyncEntry {
    /// Bytes this entry takes in a datagram.
    #[must_use]
    pub fn wire_len(&self) -> usize {
        ENTRY_FIXED_LEN + self.identity.len()
    }
}

/// One endpoint's measured rate as it travels ([`Kind::Rates`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rate {
    /// The backend service's name.
    pub service: String,
    /// The endpoint's identity within it (as in [`SyncEntry::identity`]).
    pub identity: String,
    /// Packets per second the sender forwarded to it, in thousandths.
    pub milli_pps: u64,
}

impl Rate {
    /// Bytes of the fixed part of a rate record.
    pub const FIXED_LEN: usize = 8 + 1 + 1;

    /// A record of `pps` packets per second (negative or not finite: 0;
    /// beyond [`MAX_RATE_PPS`]: that).
    #[must_use]
    pub fn new(service: &str, identity: &str, pps: f64) -> Rate {
        let pps = if pps.is_finite() {
            pps.clamp(0.0, MAX_RATE_PPS)
        } else {
            0.0
        };
        Rate {
            service: service.to_owned(),
            identity: identity.to_owned(),
            // In range by the clamp; `as` rounds toward zero.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            milli_pps: (pps * 1000.0).round() as u64,
        }
    }

    /// The rate in packets per second (capped at [`MAX_RATE_PPS`], so a
    /// peer's figure cannot swamp a sum).
    #[must_use]
    pub fn pps(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)] // a rate, not a count
        (self.milli_pps as f64 / 1000.0).min(MAX_RATE_PPS)
    }

    /// Bytes this record takes in a datagram.
    #[must_use]
    pub fn wire_len(&self) -> usize {
        Self::FIXED_LEN + self.service.len() + self.identity.len()
    }
}

/// Largest rate a record carries (packets per second): far above any
/// link's, small enough that sums of many stay exact in an `f64`.
pub const MAX_RATE_PPS: f64 = 1e12;

/// A stable 64-bit ID of a node name (FNV-1a), for [`Header::sender`]:
/// lets a receiver tell its own datagrams and restarts apart, without
/// sending names.
#[must_use]
pub fn node_id(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The shared secret of a cluster.
#[derive(Clone, PartialEq, Eq)]
pub struct SyncKey(Vec<u8>);

impl core::fmt::Debug for SyncKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never print the secret.
        write!(f, "SyncKey({} bytes)", self.0.len())
    }
}

/// Why a key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Neither `hex:` nor `base64:` in front.
    #[error("expected \"hex:\" or \"base64:\" followed by the key")]
    NoEncoding,
    /// Not valid hex.
    #[error("not hex: expected an even number of digits 0-9 a-f")]
    BadHex,
    /// Not valid base64.
    #[error("not base64 (standard alphabet, padded)")]
    BadBase64,
    /// Too short or too long.
    #[error("a key of {0} bytes: expected {MIN_KEY_LEN}-{MAX_KEY_LEN}")]
    Length(usize),
}

impl SyncKey {
    /// A key of raw bytes.
    ///
    /// # Errors
    /// [`KeyError::Length`] outside [`MIN_KEY_LEN`]..=[`MAX_KEY_LEN`].
    pub fn new(bytes: &[u8]) -> Result<SyncKey, KeyError> {
        if (MIN_KEY_LEN..=MAX_KEY_LEN).contains(&bytes.len()) {
            Ok(SyncKey(bytes.to_vec()))
        } else {
            Err(KeyError::Length(bytes.len()))
        }
    }

    /// A key as the configuration writes it: `hex:` or `base64:` and the
    /// encoded bytes (surrounding whitespace ignored, so a key file may end
    /// in a newline).
    ///
    /// # Errors
    /// A missing prefix, bad encoding or length.
    pub fn parse(text: &str) -> Result<SyncKey, KeyError> {
        let text = text.trim();
        let bytes = if let Some(h) = text.strip_prefix("hex:") {
            decode_hex(h).ok_or(KeyError::BadHex)?
        } else if let Some(b) = text.strip_prefix("base64:") {
            decode_base64(b).ok_or(KeyError::BadBase64)?
        } else {
            return Err(KeyError::NoEncoding);
        };
        SyncKey::new(&bytes)
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length; `new` bounded ours anyway.
        match HmacSha256::new_from_slice(&self.0) {
            Ok(m) => m,
            Err(_) => unreachable_mac(),
        }
    }
}

#[cold]
fn unreachable_mac() -> HmacSha256 {
    // `Hmac::new_from_slice` never fails (any key length is valid for HMAC);
    // fall back to an all-zero-key MAC no peer shares rather than panic.
    <HmacSha256 as hmac::digest::KeyInit>::new(&Default::default())
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.len() % 2 != 0 {
        return None;
    }
    let nib = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    b.chunks_exact(2)
        .map(|p| Some((nib(p[0])? << 4) | nib(p[1])?))
        .collect()
}

fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() % 4 != 0 {
        return None;
    }
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(b.len() / 4 * 3);
    let groups = b.len() / 4;
    for (i, g) in b.chunks_exact(4).enumerate() {
        let last = i + 1 == groups;
        let pad = g.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n: u32 = 0;
        for &c in &g[..4 - pad] {
            n = (n << 6) | u32::from(val(c)?);
        }
        n <<= 6 * pad;
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..4 - pad]);
    }
    Some(out)
}

/// Builds one datagram.
#[derive(Debug)]
pub struct Writer {
    buf: Vec<u8>,
    count: u16,
}

impl Writer {
    /// Starts a datagram.
    #[must_use]
    pub fn new(header: Header) -> Writer {
        let mut buf = Vec::with_capacity(MAX_DATAGRAM);
        buf.extend_from_slice(&MAGIC);
        buf.push(VERSION);
        buf.push(header.kind.code());
        buf.extend_from_slice(&0u16.to_be_bytes());
        buf.extend_from_slice(&header.sender.to_be_bytes());
        buf.extend_from_slice(&header.sequence.to_be_bytes());
        Writer { buf, count: 0 }
    }

    /// Entries written so far.
    #[must_use]
    pub fn count(&self) -> u16 {
        self.count
    }

    /// Whether `entry` still fits.
    #[must_use]
    pub fn fits(&self, entry: &SyncEntry) -> bool {
        self.buf.len() + entry.wire_len() + MAC_LEN <= MAX_DATAGRAM
    }

    fn kind_code(&self) -> Option<u8> {
        self.buf.get(5).copied()
    }

    /// Whether `rate` still fits.
    #[must_use]
    pub fn fits_rate(&self, rate: &Rate) -> bool {
        self.buf.len() + rate.wire_len() + MAC_LEN <= MAX_DATAGRAM
    }

    /// Appends a rate record to a [`Kind::Rates`] datagram.
    ///
    /// # Errors
    /// [`PushError::Full`] when it does not fit, [`PushError::Identity`] for
    /// an empty or over-long service name or identity,
    /// [`PushError::NotEntries`] on a datagram of another kind.
    pub fn push_rate(&mut self, rate: &Rate) -> Result<(), PushError> {
        if self.kind_code() != Some(Kind::Rates.code()) {
            return Err(PushError::NotEntries);
        }
        let ok = |s: &str| !s.is_empty() && s.len() <= MAX_IDENTITY;
        if !ok(&rate.service) || !ok(&rate.identity) {
            return Err(PushError::Identity);
        }
        if !self.fits_rate(rate) {
            return Err(PushError::Full);
        }
        self.buf.extend_from_slice(&rate.milli_pps.to_be_bytes());
        for s in [&rate.service, &rate.identity] {
            // At most MAX_IDENTITY (< 256) bytes, checked above.
            self.buf.push(u8::try_from(s.len()).unwrap_or(u8::MAX));
            self.buf.extend_from_slice(s.as_bytes());
        }
        self.count = self.count.saturating_add(1);
        Ok(())
    }

    /// Appends an entry.
    ///
    /// # Errors
    /// [`PushError::Full`] when it does not fit (start another datagram),
    /// [`PushError::Identity`] for an empty or over-long identity,
    /// [`PushError::NotEntries`] on a dump request.
    pub fn push(&mut self, entry: &SyncEntry) -> Result<(), PushError> {
        if self.kind_code() != Some(Kind::Entries.code()) {
            return Err(PushError::NotEntries);
        }
        let id = entry.identity.as_bytes();
        let Ok(id_len) = u8::try_from(id.len()) else {
            return Err(PushError::Identity);
        };
        if id.is_empty() || id.len() > MAX_IDENTITY {
            return Err(PushError::Identity);
        }
        if !self.fits(entry) {
            return Err(PushError::Full);
        }
        for w in entry.key {
            self.buf.extend_from_slice(&w.to_be_bytes());
        }
        self.buf.extend_from_slice(&entry.hash.to_be_bytes());
        self.buf.extend_from_slice(&entry.cookie.to_be_bytes());
        self.buf.push(entry.flags);
        self.buf.extend_from_slice(&entry.age_ms.to_be_bytes());
        self.buf.push(id_len);
        self.buf.extend_from_slice(id);
        // At most MAX_DATAGRAM / ENTRY_FIXED_LEN (< 2^16) entries fit.
        self.count = self.count.saturating_add(1);
        Ok(())
    }

    /// Finishes the datagram: fills in the count and appends the MAC.
    #[must_use]
    pub fn finish(mut self, key: &SyncKey) -> Vec<u8> {
        if let Some(c) = self.buf.get_mut(6..8) {
            c.copy_from_slice(&self.count.to_be_bytes());
        }
        let mut mac = key.mac();
        mac.update(&self.buf);
        self.buf.extend_from_slice(&mac.finalize().into_bytes());
        self.buf
    }
}

/// Why an entry was not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// The datagram is full.
    #[error("the datagram is full")]
    Full,
    /// An identity (or a rate's service name) empty or longer than
    /// [`MAX_IDENTITY`].
    #[error("an endpoint identity or service name must be 1-{MAX_IDENTITY} bytes")]
    Identity,
    /// Entries go into [`Kind::Entries`] datagrams, rates into
    /// [`Kind::Rates`] ones; the other kinds carry nothing.
    #[error("a datagram of another kind")]
    NotEntries,
}

/// Why a received datagram was rejected (each a counted drop reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than a header and a MAC, or longer than [`MAX_DATAGRAM`].
    #[error("datagram of impossible length")]
    Length,
    /// The MAC does not match: another key, or altered on the way.
    #[error("bad HMAC")]
    Mac,
    /// Not our magic.
    #[error("not a flow-sync datagram")]
    Magic,
    /// Another format version.
    #[error("unknown version")]
    Version,
    /// Unknown kind, or a dump request with entries.
    #[error("unknown kind")]
    Kind,
    /// The entries (or rates) do not fill the datagram exactly as `count`
    /// says, or an identity or name is empty, too long or not UTF-8.
    #[error("malformed entries")]
    Malformed,
    /// An entry's key is no packed flow, or its hash is not the key's.
    #[error("an entry's key or hash is invalid")]
    Key,
}

/// A received datagram, authenticated and parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// Its header.
    pub header: Header,
    /// Its entries (none but for [`Kind::Entries`]).
    pub entries: Vec<SyncEntry>,
    /// Its rates (none but for [`Kind::Rates`]).
    pub rates: Vec<Rate>,
}

/// Authenticates and parses a datagram; `valid_key(key, hash)` says whether
/// an entry's key is a flow-table key and `hash` its hash.
///
/// # Errors
/// Any [`DecodeError`]; nothing of a rejected datagram is returned.
pub fn decode(
    bytes: &[u8],
    key: &SyncKey,
    valid_key: impl Fn(&[u64; 5], u64) -> bool,
) -> Result<Datagram, DecodeError> {
    if bytes.len() < HEADER_LEN + MAC_LEN || bytes.len() > MAX_DATAGRAM {
        return Err(DecodeError::Length);
    }
    let (body, tag) = bytes.split_at(bytes.len() - MAC_LEN);
    let mut mac = key.mac();
    mac.update(body);
    // Constant time: a forger learns nothing from how fast it fails.
    mac.verify_slice(tag).map_err(|_| DecodeError::Mac)?;

    let mut r = Reader(body);
    if r.take::<4>()? != MAGIC {
        return Err(DecodeError::Magic);
    }
    if r.u8()? != VERSION {
        return Err(DecodeError::Version);
    }
    let kind = Kind::from_code(r.u8()?).ok_or(DecodeError::Kind)?;
    let count = u16::from_be_bytes(r.take()?);
    let sender = r.u64()?;
    let sequence = r.u64()?;
    if !matches!(kind, Kind::Entries | Kind::Rates) && count != 0 {
        return Err(DecodeError::Kind);
    }
    let fixed = if kind == Kind::Rates {
        Rate::FIXED_LEN
    } else {
        ENTRY_FIXED_LEN
    };
    // `count` is bounded by what the length allows, so a hostile count
    // cannot make us reserve much.
    if usize::from(count) * fixed > r.0.len() {
        return Err(DecodeError::Malformed);
    }
    let header = Header {
        kind,
        sender,
        sequence,
    };
    if kind == Kind::Rates {
        let mut rates = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let milli_pps = r.u64()?;
            let service = r.text()?;
            let identity = r.text()?;
            rates.push(Rate {
                service,
                identity,
                milli_pps,
            });
        }
        if !r.0.is_empty() {
            return Err(DecodeError::Malformed);
        }
        return Ok(Datagram {
            header,
            entries: Vec::new(),
            rates,
        });
    }
    let mut entries = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let mut key = [0u64; 5];
        for w in &mut key {
            *w = r.u64()?;
        }
        let hash = r.u64()?;
        let cookie = u32::from_be_bytes(r.take()?);
        let flags = r.u8()?;
        let age_ms = u32::from_be_bytes(r.take()?);
        let identity = r.text()?;
        if !valid_key(&key, hash) {
            return Err(DecodeError::Key);
        }
        entries.push(SyncEntry {
            key,
            hash,
            identity,
            cookie,
            flags,
            age_ms,
        });
    }
    if !r.0.is_empty() {
        return Err(DecodeError::Malformed);
    }
    Ok(Datagram {
        header,
        entries,
        rates: Vec::new(),
    })
}

/// Bounds-checked cursor; every short read is [`DecodeError::Malformed`].
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn slice(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.0.len() {
            return Err(DecodeError::Malformed);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.slice(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.take()?))
    }

    /// A length byte and that much UTF-8: 1 to [`MAX_IDENTITY`] bytes.
    fn text(&mut self) -> Result<String, DecodeError> {
        let len = usize::from(self.u8()?);
        if len == 0 || len > MAX_IDENTITY {
            return Err(DecodeError::Malformed);
        }
        let s = self.slice(len)?;
        Ok(core::str::from_utf8(s)
            .map_err(|_| DecodeError::Malformed)?
            .to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_encodings() {
        let raw: Vec<u8> = (0..32).collect();
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(SyncKey::parse(&format!("hex:{hex}\n")).unwrap().0, raw);
        assert_eq!(
            SyncKey::parse("base64:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
                .unwrap()
                .0,
            raw
        );
        assert_eq!(
            SyncKey::parse("base64:AAECAwQFBgcICQoLDA0ODw==").unwrap().0,
            raw[..16]
        );
        assert_eq!(SyncKey::parse(&hex), Err(KeyError::NoEncoding));
        assert_eq!(SyncKey::parse("hex:abc"), Err(KeyError::BadHex));
        assert_eq!(SyncKey::parse("hex:zz"), Err(KeyError::BadHex));
        assert_eq!(SyncKey::parse("hex:00ff"), Err(KeyError::Length(2)));
        assert_eq!(SyncKey::parse("base64:AA=A"), Err(KeyError::BadBase64));
        assert_eq!(SyncKey::parse("base64:A==="), Err(KeyError::BadBase64));
        assert_eq!(SyncKey::parse("base64:"), Err(KeyError::BadBase64));
        assert!(!format!("{:?}", SyncKey::new(&raw).unwrap()).contains("01"));
    }

    #[test]
    fn node_ids_differ() {
        assert_ne!(node_id("lb-1"), node_id("lb-2"));
        assert_eq!(node_id("lb-1"), node_id("lb-1"));
    }
}
