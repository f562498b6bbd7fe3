//! Sessions with the peers (M54): what makes a captured datagram worthless
//! to replay. No I/O and no clock: time is an argument, datagrams to send
//! are pushed to a list the caller sends.
//!
//! Every node picks a random **epoch** when it starts. A datagram carries
//! its sender's epoch, the receiver's epoch as the sender knows it, and the
//! sender's sequence, all authenticated ([`crate::decode`]). A node takes a
//! datagram from a peer only when
//!
//! 1. it names this node's current epoch — so nothing made before this
//!    node (re)started is ever taken again: a random epoch cannot be known
//!    before it is chosen;
//! 2. its sender epoch is the one this node confirmed for that peer in a
//!    handshake — so nothing of a peer's earlier life is taken once it
//!    restarted;
//! 3. its sender ID is the one that handshake bound to the peer's address,
//!    and no other peer's;
//! 4. its sequence is new in that session's [`ReplayWindow`] — so nothing
//!    is taken twice within a session; a session starts at the sequence of
//!    the handshake's reply, so nothing sent before it is taken either.
//!
//! **The handshake.** A node that has no session with a peer, or sees a
//! sign that the peer restarted (a datagram of an unknown epoch), sends a
//! [`Kind::Hello`] with a challenge that never repeats (its own epoch and a
//! counter), again every [`HELLO_EVERY`] until answered. The peer answers
//! every authentic hello with a [`Kind::HelloReply`]: its own epoch, the
//! asker's epoch and the challenge. The asker takes a reply only for its
//! outstanding challenge, once: a reply is therefore made after the asker
//! asked, and the epoch in it is the peer's current one. Both sides ask
//! (a hello from an unknown epoch makes the receiver ask back), so a
//! restart on either side is followed by a session both ways in about one
//! round trip.
//!
//! A replayed hello is refused by the window when it belongs to the
//! current session, or as of a retired epoch; a hello of an epoch this node
//! never confirmed is answered (that is how a restarted peer comes in), at
//! most once per [`REPLY_EVERY`] per peer, and the answer is useless to
//! anyone but the asker: it names the challenge and epoch of that hello.

use std::time::Duration;

use crate::window::{Replay, ReplayWindow};
use crate::{Challenge, Cipher, Datagram, DecodeError, Kind, Stamp, Writer};

/// A hello is sent again this often until it is answered.
pub const HELLO_EVERY: Duration = Duration::from_secs(1);
/// At most one hello reply per peer this often: replayed hellos cannot make
/// a node send much.
pub const REPLY_EVERY: Duration = Duration::from_millis(200);
/// Epochs of a peer remembered after it restarted, so that their datagrams
/// are refused outright (not taken as signs of another restart).
pub const RETIRED: usize = 16;

/// Why a datagram was refused (each a counted reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Refusal {
    /// It does not decode: see [`DecodeError`].
    #[error("{0}")]
    Decode(DecodeError),
    /// This node's own datagram (a peer list naming this node).
    #[error("this node's own datagram")]
    Own,
    /// Its sender ID is not the one bound to the peer's address, or is
    /// bound to another peer.
    #[error("sender ID not that of the peer's address")]
    Identity,
    /// It names another epoch of this node: made before this node started.
    #[error("made for an earlier epoch of this node")]
    Stale,
    /// Its sender epoch is not the peer's confirmed one: an earlier life of
    /// the peer, or one not confirmed yet (a handshake follows).
    #[error("not of the peer's confirmed epoch")]
    Epoch,
    /// Its sequence was seen, or is below the window.
    #[error("{0}")]
    Window(Replay),
    /// A hello reply to no outstanding challenge (replayed, or late).
    #[error("a hello reply to no outstanding challenge")]
    Handshake,
    /// A hello not answered: one was answered for this peer just before.
    #[error("a hello within the reply limit")]
    Limited,
    /// This node's sequence is spent (2^64 datagrams): nothing is sent.
    #[error("sequence numbers exhausted")]
    Exhausted,
}

/// What a datagram that was not refused did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// A datagram of the session, for the caller.
    Data(Datagram),
    /// A hello, answered.
    Answered,
    /// A hello reply: the session with the peer is (re)established; `new`
    /// when at another epoch than before (the peer restarted, or none).
    Established {
        /// A session at a new epoch of the peer.
        new: bool,
    },
}

#[derive(Debug)]
struct Session {
    /// The peer's node ID, bound by the handshake.
    node: u64,
    /// The peer's confirmed epoch.
    epoch: u64,
    window: ReplayWindow,
}

#[derive(Debug)]
struct Asking {
    challenge: Challenge,
    /// When the hello is (sent) again.
    next: Duration,
}

#[derive(Debug, Default)]
struct Peer {
    session: Option<Session>,
    /// Earlier confirmed epochs, oldest first.
    retired: Vec<u64>,
    asking: Option<Asking>,
    replied: Option<Duration>,
}

/// This node's sessions with its peers (indexed as the caller lists them).
#[derive(Debug)]
pub struct Peers {
    node: u64,
    epoch: u64,
    sequence: u64,
    challenges: u64,
    cipher: Cipher,
    peers: Vec<Peer>,
}

impl Peers {
    /// Node `node` at `epoch` (random, chosen at start; 0 is taken as 1:
    /// it means "unknown" on the wire) with `peers` peers, none in session.
    #[must_use]
    pub fn new(node: u64, epoch: u64, cipher: Cipher, peers: usize) -> Peers {
        Peers {
            node,
            epoch: epoch.max(1),
            sequence: 0,
            challenges: 0,
            cipher,
            peers: (0..peers).map(|_| Peer::default()).collect(),
        }
    }

    /// This node's ID.
    #[must_use]
    pub fn node(&self) -> u64 {
        self.node
    }

    /// This node's epoch.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The confirmed epoch of peer `i`, once in session.
    #[must_use]
    pub fn peer_epoch(&self, i: usize) -> Option<u64> {
        Some(self.peers.get(i)?.session.as_ref()?.epoch)
    }

    /// Peers in session.
    #[must_use]
    pub fn established(&self) -> usize {
        self.peers.iter().filter(|p| p.session.is_some()).count()
    }

    fn stamp(&mut self, peer_epoch: u64) -> Option<Stamp> {
        // Never reused: the sequence is the nonce's.
        self.sequence = self.sequence.checked_add(1)?;
        Some(Stamp {
            sender: self.node,
            epoch: self.epoch,
            peer_epoch,
            sequence: self.sequence,
        })
    }

    /// `w` sealed for peer `i`, with a sequence of its own; `None` without
    /// a session with it (the peer would refuse it: it is not sent).
    pub fn seal(&mut self, i: usize, w: &Writer) -> Option<Vec<u8>> {
        let peer_epoch = self.peer_epoch(i)?;
        let stamp = self.stamp(peer_epoch)?;
        Some(w.seal(&stamp, &self.cipher))
    }

    /// Periodic work at `now`: hellos to the peers without a session (or
    /// whose restart was seen), every [`HELLO_EVERY`] until answered.
    pub fn poll(&mut self, now: Duration, out: &mut Vec<(usize, Vec<u8>)>) {
        for i in 0..self.peers.len() {
            let fresh = self.peers.get(i).is_some_and(|p| p.session.is_none());
            if fresh {
                self.ask(i, now, out);
            } else {
                self.hello_due(i, now, out);
            }
        }
    }

    /// Starts a handshake with peer `i` (unless one is under way) and sends
    /// its hello if due.
    fn ask(&mut self, i: usize, now: Duration, out: &mut Vec<(usize, Vec<u8>)>) {
        let Some(p) = self.peers.get(i) else { return };
        if p.asking.is_none() {
            self.challenges = self.challenges.wrapping_add(1);
            // Unique: this epoch is random per start, the counter grows.
            let mut challenge = [0u8; 16];
            challenge[..8].copy_from_slice(&self.epoch.to_be_bytes());
            challenge[8..].copy_from_slice(&self.challenges.to_be_bytes());
            if let Some(p) = self.peers.get_mut(i) {
                p.asking = Some(Asking {
                    challenge,
                    next: now,
                });
            }
        }
        self.hello_due(i, now, out);
    }

    fn hello_due(&mut self, i: usize, now: Duration, out: &mut Vec<(usize, Vec<u8>)>) {
        let Some(p) = self.peers.get(i) else { return };
        let Some(a) = &p.asking else { return };
        if now < a.next {
            return;
        }
        let challenge = a.challenge;
        let peer_epoch = p.session.as_ref().map_or(0, |s| s.epoch);
        let Some(stamp) = self.stamp(peer_epoch) else {
            return;
        };
        let Some(w) = Writer::hello(Kind::Hello, &challenge) else {
            return;
        };
        out.push((i, w.seal(&stamp, &self.cipher)));
        if let Some(a) = self.peers.get_mut(i).and_then(|p| p.asking.as_mut()) {
            a.next = now.saturating_add(HELLO_EVERY);
        }
    }

    /// Whether another peer than `i` is bound to node `node`.
    fn bound_elsewhere(&self, i: usize, node: u64) -> bool {
        self.peers
            .iter()
            .enumerate()
            .any(|(j, p)| j != i && p.session.as_ref().is_some_and(|s| s.node == node))
    }

    /// Input: `bytes` from peer `i`'s address at `now` (the caller matched
    /// the source to a configured peer). A hello is answered into `out`, a
    /// sign of the peer's restart starts a handshake there.
    ///
    /// # Errors
    /// Each [`Refusal`]; nothing of a refused datagram is taken.
    pub fn open(
        &mut self,
        i: usize,
        bytes: &[u8],
        now: Duration,
        valid_key: impl Fn(&[u64; 5], u64) -> bool,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) -> Result<Accepted, Refusal> {
        let d = crate::decode(bytes, &self.cipher, valid_key).map_err(Refusal::Decode)?;
        let h = d.header.stamp;
        if h.sender == self.node {
            return Err(Refusal::Own);
        }
        if self.peers.get(i).is_none() {
            return Err(Refusal::Identity);
        }
        match d.header.kind {
            Kind::HelloReply => self.replied(i, &d),
            Kind::Hello => self.hello(i, &d, now, out),
            _ => {
                if h.peer_epoch != self.epoch {
                    return Err(Refusal::Stale);
                }
                self.in_session(i, h, now, out)?;
                Ok(Accepted::Data(d))
            }
        }
    }

    /// Checks a datagram's stamp against peer `i`'s session and records its
    /// sequence; a datagram of an epoch never seen starts a handshake.
    fn in_session(
        &mut self,
        i: usize,
        h: Stamp,
        now: Duration,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) -> Result<(), Refusal> {
        let Some(p) = self.peers.get_mut(i) else {
            return Err(Refusal::Identity);
        };
        match &mut p.session {
            Some(s) if s.epoch == h.epoch => {
                if s.node != h.sender {
                    return Err(Refusal::Identity);
                }
                s.window.accept(h.sequence).map_err(Refusal::Window)
            }
            _ => {
                if !p.retired.contains(&h.epoch) {
                    // The peer may have restarted: learn its epoch.
                    self.ask(i, now, out);
                }
                Err(Refusal::Epoch)
            }
        }
    }

    fn hello(
        &mut self,
        i: usize,
        d: &Datagram,
        now: Duration,
        out: &mut Vec<(usize, Vec<u8>)>,
    ) -> Result<Accepted, Refusal> {
        let h = d.header.stamp;
        let Some(challenge) = d.challenge else {
            return Err(Refusal::Decode(DecodeError::Malformed));
        };
        if self.bound_elsewhere(i, h.sender) {
            return Err(Refusal::Identity);
        }
        let Some(p) = self.peers.get(i) else {
            return Err(Refusal::Identity);
        };
        let current = match &p.session {
            Some(s) if s.epoch == h.epoch => {
                if s.node != h.sender {
                    return Err(Refusal::Identity);
                }
                s.window.check(h.sequence).map_err(Refusal::Window)?;
                true
            }
            _ if p.retired.contains(&h.epoch) => return Err(Refusal::Epoch),
            _ => false,
        };
        if p.replied
            .is_some_and(|t| now >= t && now.saturating_sub(t) < REPLY_EVERY)
        {
            return Err(Refusal::Limited);
        }
        let stamp = self.stamp(h.epoch).ok_or(Refusal::Exhausted)?;
        let w = Writer::hello(Kind::HelloReply, &challenge)
            .ok_or(Refusal::Decode(DecodeError::Kind))?;
        out.push((i, w.seal(&stamp, &self.cipher)));
        if let Some(p) = self.peers.get_mut(i) {
            p.replied = Some(now);
            if let Some(s) = p.session.as_mut().filter(|_| current) {
                // Checked above.
                let _ = s.window.accept(h.sequence);
            }
        }
        if !current {
            // A restarted peer (or a hello of an epoch this node never
            // confirmed): answered; its epoch is learned in turn.
            self.ask(i, now, out);
        }
        Ok(Accepted::Answered)
    }

    fn replied(&mut self, i: usize, d: &Datagram) -> Result<Accepted, Refusal> {
        let h = d.header.stamp;
        if h.peer_epoch != self.epoch {
            return Err(Refusal::Stale);
        }
        let Some(p) = self.peers.get(i) else {
            return Err(Refusal::Identity);
        };
        let answers = p
            .asking
            .as_ref()
            .zip(d.challenge.as_ref())
            .is_some_and(|(a, c)| a.challenge == *c);
        if !answers {
            return Err(Refusal::Handshake);
        }
        if self.bound_elsewhere(i, h.sender) {
            return Err(Refusal::Identity);
        }
        let Some(p) = self.peers.get_mut(i) else {
            return Err(Refusal::Identity);
        };
        let new = match &mut p.session {
            Some(s) if s.epoch == h.epoch && s.node == h.sender => {
                s.window.accept(h.sequence).map_err(Refusal::Window)?;
                false
            }
            old => {
                if let Some(s) = old.take() {
                    if p.retired.len() >= RETIRED {
                        p.retired.remove(0);
                    }
                    p.retired.push(s.epoch);
                }
                // Nothing sent before the reply is taken: the window
                // starts at it.
                *old = Some(Session {
                    node: h.sender,
                    epoch: h.epoch,
                    window: ReplayWindow::starting_at(h.sequence),
                });
                true
            }
        };
        p.asking = None;
        Ok(Accepted::Established { new })
    }
}
