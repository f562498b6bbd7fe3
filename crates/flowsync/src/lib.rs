//! Flow-state sync datagrams between the nodes of a cluster (M36, M54).
//!
//! A node tells its peers about the flow entries its workers create, so that
//! when it dies or ECMP rehashes, another node sends a flow's packets to the
//! same backend even where that node's own Maglev choice differs. This crate
//! is the datagram ([`Writer`], [`decode`]), its sealing ([`Cipher`]), and
//! the per-peer sessions that refuse replays ([`session`], [`window`]): no
//! sockets, no flow table, no clock (time is an argument).
//!
//! # Format, version 2 (all integers big-endian)
//!
//! ```text
//! header  magic "SWFS" | version 2 | kind | count u16
//!         | sender u64 | epoch u64 | peer_epoch u64 | sequence u64              (40 bytes, in clear)
//! body    entries, rates or a challenge                                        (encrypted)
//! entry   key 5×u64 | hash u64 | cookie u32 | flags u8 | age_ms u32 | len u8 | identity
//! rate    milli_pps u64 | len u8 | service | len u8 | identity
//! hello   challenge 16 bytes
//! trailer Poly1305 tag                                                         (16 bytes)
//! ```
//!
//! * Sealing: XChaCha20-Poly1305 under a key derived from the cluster key
//!   with HKDF-SHA256 (its own salt and info: the key is used for nothing
//!   else). The header is the associated data (authenticated, in clear);
//!   the body is encrypted, so a captured datagram does not reveal flows or
//!   their cookies. The 24-byte nonce is `sender ‖ epoch ‖ sequence`: a
//!   sender's epoch is random for every start and its sequence grows by one
//!   with every datagram it seals (each copy to each peer sealed apart), so
//!   no nonce repeats under the key.
//! * `sender` is the sender's node ID ([`node_id`] of its name), `epoch`
//!   the sender's random start epoch, `peer_epoch` the receiver's epoch as
//!   the sender learned it in a handshake (0: none yet), `sequence` the
//!   sender's datagram counter. [`session::Peers`] accepts a datagram only
//!   when it names the receiver's current epoch and the sender's confirmed
//!   one, and its sequence is new in that session's window.
//! * `kind` 1 carries `count` entries; kind 2 asks the receiver for a dump
//!   of its current entries, kind 3 says that dump is complete; 2 and 3
//!   carry nothing. Kind 4 carries `count` rates: what the sender's data
//!   plane measured per endpoint over its last planning interval (M25
//!   across a cluster, M34), so every node decides spillover on the
//!   cluster's total. Kind 5 (nothing) says the sender is leaving the
//!   cluster (a graceful shutdown), so peers stop holding its share of
//!   capacity. Kind 6 (hello) carries a fresh challenge; kind 7 (hello
//!   reply) carries the challenge it answers: the handshake by which a node
//!   learns a peer's current epoch ([`session`]).
//! * `key` is the flow-table key as the data plane stores it: the packed
//!   5-tuple with the service's (or gateway endpoint's) flow tag in its low
//!   bits, and `hash` the hash the table placed it by. [`decode`] has the
//!   caller check both against each other (this crate knows no flow keys),
//!   so a forged hash cannot plant an entry where no lookup finds it.
//! * The backend travels by identity (its endpoint identity, e.g.
//!   `10.0.0.1:80`), never by slot: slots differ between nodes. The receiver
//!   resolves it within the service its flow tag names.
//!
//! Magic and version are read first (a datagram of another version is
//! counted as such: see the rolling upgrade in docs/operating.md); then the
//! tag is verified, in constant time, before any other field is believed;
//! then every length is bounds-checked, and any byte left over or missing
//! rejects the whole datagram. Version 1 (HMAC-SHA256, in clear, no epochs)
//! is no longer read.

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{Tag, XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use sha2::Sha256;

pub mod session;
pub mod window;

/// First four bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"SWFS";
/// The format version this crate writes and reads.
pub const VERSION: u8 = 2;
/// Bytes of the header.
pub const HEADER_LEN: usize = 40;
/// Bytes of the Poly1305 tag.
pub const TAG_LEN: usize = 16;
/// Bytes of a hello's challenge.
pub const CHALLENGE_LEN: usize = 16;
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
/// Longest shared key accepted (bytes).
pub const MAX_KEY_LEN: usize = 64;

/// HKDF salt and info of the sealing key: domain separation, so the
/// cluster key yields a key for this use and this format only.
const HKDF_SALT: &[u8] = b"spillway flow-sync";
const HKDF_INFO: &[u8] = b"SWFS v2 XChaCha20-Poly1305";

/// A hello's challenge (kinds [`Kind::Hello`], [`Kind::HelloReply`]).
pub type Challenge = [u8; CHALLENGE_LEN];

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
    /// "Tell me your epoch": carries a fresh challenge.
    Hello,
    /// The answer to a hello: the replier's epoch (in the header) and the
    /// challenge it answers.
    HelloReply,
}

impl Kind {
    /// The kind's code on the wire.
    #[must_use]
    pub const fn code(self) -> u8 {
        match self {
            Kind::Entries => 1,
            Kind::RequestDump => 2,
            Kind::DumpDone => 3,
            Kind::Rates => 4,
            Kind::Leaving => 5,
            Kind::Hello => 6,
            Kind::HelloReply => 7,
        }
    }

    /// The kind of a code, if any.
    #[must_use]
    pub const fn from_code(c: u8) -> Option<Kind> {
        match c {
            1 => Some(Kind::Entries),
            2 => Some(Kind::RequestDump),
            3 => Some(Kind::DumpDone),
            4 => Some(Kind::Rates),
            5 => Some(Kind::Leaving),
            6 => Some(Kind::Hello),
            7 => Some(Kind::HelloReply),
            _ => None,
        }
    }

    /// Whether datagrams of this kind carry a challenge.
    #[must_use]
    pub const fn is_handshake(self) -> bool {
        matches!(self, Kind::Hello | Kind::HelloReply)
    }
}

/// Who sent a datagram, to whom, and when: the header's identifying fields
/// (the nonce is `sender ‖ epoch ‖ sequence`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The sender's node ID ([`node_id`] of its name).
    pub sender: u64,
    /// The sender's epoch: random, chosen at every start.
    pub epoch: u64,
    /// The receiver's epoch as the sender knows it (0: not known).
    pub peer_epoch: u64,
    /// Grows by one with every datagram the sender seals.
    pub sequence: u64,
}

/// A datagram's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the datagram is for.
    pub kind: Kind,
    /// Sender, epochs, sequence.
    pub stamp: Stamp,
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
}

/// The sealing key of a cluster, derived from its [`SyncKey`].
#[derive(Clone)]
pub struct Cipher(XChaCha20Poly1305);

impl core::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never print the secret.
        f.write_str("Cipher(..)")
    }
}

impl Cipher {
    /// The cipher of `key`: HKDF-SHA256 (salt and info of this format)
    /// to a 256-bit XChaCha20-Poly1305 key.
    #[must_use]
    pub fn new(key: &SyncKey) -> Cipher {
        let hk = Hkdf::<Sha256>::new(Some(HKDF_SALT), &key.0);
        let mut okm = [0u8; 32];
        // HKDF-SHA256 gives up to 255 × 32 bytes; 32 always succeed.
        let _ = hk.expand(HKDF_INFO, &mut okm);
        let aead = XChaCha20Poly1305::new(&okm.into());
        okm.fill(0);
        Cipher(aead)
    }

    fn nonce(header: &[u8; HEADER_LEN]) -> XNonce {
        // sender ‖ epoch ‖ sequence: bytes 8..24 and 32..40 of the header.
        let mut n = [0u8; 24];
        n[..16].copy_from_slice(&header[8..24]);
        n[16..].copy_from_slice(&header[32..40]);
        n.into()
    }

    /// Seals `body` under `header` (no checks: any bytes). [`Writer::seal`]
    /// is how datagrams are made; this is for tests and fuzzing, which must
    /// reach the parser behind the tag with bodies no writer makes.
    #[must_use]
    pub fn seal_raw(&self, header: &[u8; HEADER_LEN], body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + body.len() + TAG_LEN);
        out.extend_from_slice(header);
        out.extend_from_slice(body);
        let Some(plain) = out.get_mut(HEADER_LEN..) else {
            return Vec::new();
        };
        match self
            .0
            .encrypt_in_place_detached(&Self::nonce(header), header, plain)
        {
            Ok(tag) => out.extend_from_slice(&tag),
            // Only a body beyond 2^38 bytes fails: none is that long.
            Err(_) => out.clear(),
        }
        out
    }

    /// Verifies and decrypts `bytes`: its header and body.
    fn open(&self, bytes: &[u8]) -> Result<([u8; HEADER_LEN], Vec<u8>), DecodeError> {
        let Some((head, rest)) = bytes.split_first_chunk::<HEADER_LEN>() else {
            return Err(DecodeError::Length);
        };
        let Some((body, tag)) = rest.split_last_chunk::<TAG_LEN>() else {
            return Err(DecodeError::Length);
        };
        let mut plain = body.to_vec();
        // Constant time: a forger learns nothing from how fast it fails.
        self.0
            .decrypt_in_place_detached(&Self::nonce(head), head, &mut plain, Tag::from_slice(tag))
            .map_err(|_| DecodeError::Auth)?;
        Ok((*head, plain))
    }
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

/// Builds one datagram's body; [`Writer::seal`] makes the datagram (for
/// each peer apart: each copy has its own stamp).
#[derive(Debug, Clone)]
pub struct Writer {
    kind: Kind,
    body: Vec<u8>,
    count: u16,
}

impl Writer {
    /// Starts a datagram of `kind` (a hello's challenge: [`Writer::hello`]).
    #[must_use]
    pub fn new(kind: Kind) -> Writer {
        Writer {
            kind,
            body: Vec::with_capacity(MAX_DATAGRAM - HEADER_LEN - TAG_LEN),
            count: 0,
        }
    }

    /// A [`Kind::Hello`] or [`Kind::HelloReply`] carrying `challenge`
    /// (another kind: `None`).
    #[must_use]
    pub fn hello(kind: Kind, challenge: &Challenge) -> Option<Writer> {
        if !kind.is_handshake() {
            return None;
        }
        let mut w = Writer::new(kind);
        w.body.extend_from_slice(challenge);
        Some(w)
    }

    /// The datagram's kind.
    #[must_use]
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Entries (or rates) written so far.
    #[must_use]
    pub fn count(&self) -> u16 {
        self.count
    }

    /// The body as written (what [`Writer::seal`] encrypts).
    #[must_use]
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    fn room_for(&self, n: usize) -> bool {
        HEADER_LEN + self.body.len() + n + TAG_LEN <= MAX_DATAGRAM
    }

    /// Whether `entry` still fits.
    #[must_use]
    pub fn fits(&self, entry: &SyncEntry) -> bool {
        self.room_for(entry.wire_len())
    }

    /// Whether `rate` still fits.
    #[must_use]
    pub fn fits_rate(&self, rate: &Rate) -> bool {
        self.room_for(rate.wire_len())
    }

    /// Appends a rate record to a [`Kind::Rates`] datagram.
    ///
    /// # Errors
    /// [`PushError::Full`] when it does not fit, [`PushError::Identity`] for
    /// an empty or over-long service name or identity,
    /// [`PushError::NotEntries`] on a datagram of another kind.
    pub fn push_rate(&mut self, rate: &Rate) -> Result<(), PushError> {
        if self.kind != Kind::Rates {
            return Err(PushError::NotEntries);
        }
        let ok = |s: &str| !s.is_empty() && s.len() <= MAX_IDENTITY;
        if !ok(&rate.service) || !ok(&rate.identity) {
            return Err(PushError::Identity);
        }
        if !self.fits_rate(rate) {
            return Err(PushError::Full);
        }
        self.body.extend_from_slice(&rate.milli_pps.to_be_bytes());
        for s in [&rate.service, &rate.identity] {
            // At most MAX_IDENTITY (< 256) bytes, checked above.
            self.body.push(u8::try_from(s.len()).unwrap_or(u8::MAX));
            self.body.extend_from_slice(s.as_bytes());
        }
        self.count = self.count.saturating_add(1);
        Ok(())
    }

    /// Appends an entry to a [`Kind::Entries`] datagram.
    ///
    /// # Errors
    /// [`PushError::Full`] when it does not fit (start another datagram),
    /// [`PushError::Identity`] for an empty or over-long identity,
    /// [`PushError::NotEntries`] on a datagram of another kind.
    pub fn push(&mut self, entry: &SyncEntry) -> Result<(), PushError> {
        if self.kind != Kind::Entries {
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
            self.body.extend_from_slice(&w.to_be_bytes());
        }
        self.body.extend_from_slice(&entry.hash.to_be_bytes());
        self.body.extend_from_slice(&entry.cookie.to_be_bytes());
        self.body.push(entry.flags);
        self.body.extend_from_slice(&entry.age_ms.to_be_bytes());
        self.body.push(id_len);
        self.body.extend_from_slice(id);
        // At most MAX_DATAGRAM / ENTRY_FIXED_LEN (< 2^16) entries fit.
        self.count = self.count.saturating_add(1);
        Ok(())
    }

    /// The header of this datagram under `stamp`.
    #[must_use]
    pub fn header_bytes(&self, stamp: &Stamp) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..4].copy_from_slice(&MAGIC);
        h[4] = VERSION;
        h[5] = self.kind.code();
        h[6..8].copy_from_slice(&self.count.to_be_bytes());
        h[8..16].copy_from_slice(&stamp.sender.to_be_bytes());
        h[16..24].copy_from_slice(&stamp.epoch.to_be_bytes());
        h[24..32].copy_from_slice(&stamp.peer_epoch.to_be_bytes());
        h[32..40].copy_from_slice(&stamp.sequence.to_be_bytes());
        h
    }

    /// The datagram under `stamp`, sealed with `cipher`. Each stamp must be
    /// used once (its sequence is the nonce's): a datagram to several peers
    /// is sealed for each with a sequence of its own.
    #[must_use]
    pub fn seal(&self, stamp: &Stamp, cipher: &Cipher) -> Vec<u8> {
        cipher.seal_raw(&self.header_bytes(stamp), &self.body)
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
    /// [`Kind::Rates`] ones; the other kinds carry none.
    #[error("a datagram of another kind")]
    NotEntries,
}

/// Why a received datagram was rejected (each a counted drop reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than a header and a tag, or longer than [`MAX_DATAGRAM`].
    #[error("datagram of impossible length")]
    Length,
    /// Not our magic.
    #[error("not a flow-sync datagram")]
    Magic,
    /// Another format version (a node of another release: see the rolling
    /// upgrade in docs/operating.md).
    #[error("unknown version")]
    Version,
    /// The tag does not verify: another key, or altered on the way.
    #[error("authentication failed")]
    Auth,
    /// Unknown kind, or a kind with a count it cannot have.
    #[error("unknown kind")]
    Kind,
    /// The body does not hold exactly what kind and `count` say, or an
    /// identity or name is empty, too long or not UTF-8.
    #[error("malformed entries")]
    Malformed,
    /// An entry's key is no packed flow, or its hash is not the key's.
    #[error("an entry's key or hash is invalid")]
    Key,
}

/// A received datagram, authenticated, decrypted and parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// Its header.
    pub header: Header,
    /// Its entries (none but for [`Kind::Entries`]).
    pub entries: Vec<SyncEntry>,
    /// Its rates (none but for [`Kind::Rates`]).
    pub rates: Vec<Rate>,
    /// Its challenge (hellos and their replies only).
    pub challenge: Option<Challenge>,
}

impl Datagram {
    /// The same datagram as a [`Writer`] wrote it (sealing it again under
    /// its stamp gives the bytes it was read from).
    ///
    /// # Errors
    /// What [`Writer::push`] or [`Writer::push_rate`] says of an item (none
    /// for a datagram [`decode`] returned).
    pub fn writer(&self) -> Result<Writer, PushError> {
        let kind = self.header.kind;
        let mut w = match &self.challenge {
            Some(c) => Writer::hello(kind, c).ok_or(PushError::NotEntries)?,
            None => Writer::new(kind),
        };
        for e in &self.entries {
            w.push(e)?;
        }
        for r in &self.rates {
            w.push_rate(r)?;
        }
        Ok(w)
    }
}

/// Authenticates, decrypts and parses a datagram; `valid_key(key, hash)`
/// says whether an entry's key is a flow-table key and `hash` its hash.
///
/// # Errors
/// Any [`DecodeError`]; nothing of a rejected datagram is returned.
pub fn decode(
    bytes: &[u8],
    cipher: &Cipher,
    valid_key: impl Fn(&[u64; 5], u64) -> bool,
) -> Result<Datagram, DecodeError> {
    if bytes.len() < HEADER_LEN + TAG_LEN || bytes.len() > MAX_DATAGRAM {
        return Err(DecodeError::Length);
    }
    // Magic and version before the tag: a node of another release is
    // counted as such, not as a forgery. Nothing else is read unverified.
    if bytes.get(..4) != Some(&MAGIC[..]) {
        return Err(DecodeError::Magic);
    }
    if bytes.get(4) != Some(&VERSION) {
        return Err(DecodeError::Version);
    }
    let (head, body) = cipher.open(bytes)?;
    let mut r = Reader(&head[5..]);
    let kind = Kind::from_code(r.u8()?).ok_or(DecodeError::Kind)?;
    let count = u16::from_be_bytes(r.take()?);
    let stamp = Stamp {
        sender: r.u64()?,
        epoch: r.u64()?,
        peer_epoch: r.u64()?,
        sequence: r.u64()?,
    };
    let header = Header { kind, stamp };
    parse_body(header, count, &body, valid_key)
}

/// The parser behind [`decode`]'s tag check: the body of a datagram of
/// `header` and `count`, in clear. Public for fuzzing (a fuzzer cannot
/// forge tags); a receiver uses [`decode`].
///
/// # Errors
/// [`DecodeError::Kind`], [`DecodeError::Malformed`], [`DecodeError::Key`].
pub fn parse_body(
    header: Header,
    count: u16,
    body: &[u8],
    valid_key: impl Fn(&[u64; 5], u64) -> bool,
) -> Result<Datagram, DecodeError> {
    let kind = header.kind;
    let mut r = Reader(body);
    let mut d = Datagram {
        header,
        entries: Vec::new(),
        rates: Vec::new(),
        challenge: None,
    };
    if !matches!(kind, Kind::Entries | Kind::Rates) && count != 0 {
        return Err(DecodeError::Kind);
    }
    match kind {
        Kind::Hello | Kind::HelloReply => d.challenge = Some(r.take()?),
        Kind::RequestDump | Kind::DumpDone | Kind::Leaving => {}
        Kind::Rates => {
            // `count` is bounded by what the length allows, so a hostile
            // count cannot make us reserve much.
            if usize::from(count) * Rate::FIXED_LEN > r.0.len() {
                return Err(DecodeError::Malformed);
            }
            d.rates.reserve(usize::from(count));
            for _ in 0..count {
                let milli_pps = r.u64()?;
                let service = r.text()?;
                let identity = r.text()?;
                d.rates.push(Rate {
                    service,
                    identity,
                    milli_pps,
                });
            }
        }
        Kind::Entries => {
            if usize::from(count) * ENTRY_FIXED_LEN > r.0.len() {
                return Err(DecodeError::Malformed);
            }
            d.entries.reserve(usize::from(count));
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
                d.entries.push(SyncEntry {
                    key,
                    hash,
                    identity,
                    cookie,
                    flags,
                    age_ms,
                });
            }
        }
    }
    if !r.0.is_empty() {
        return Err(DecodeError::Malformed);
    }
    Ok(d)
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
