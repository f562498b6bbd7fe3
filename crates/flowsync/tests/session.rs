//! Sessions (M54): two nodes' [`Peers`] wired back to back. A handshake
//! makes sessions both ways; every datagram captured on the pair, replayed,
//! is refused with its reason: within the session, after the sender
//! restarted, after the receiver restarted; a sender ID other than the one
//! the handshake bound is refused; forged and altered datagrams fail the
//! tag.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

use std::time::Duration;

use flowsync::session::{Accepted, Peers, Refusal};
use flowsync::window::Replay;
use flowsync::{Cipher, DecodeError, Kind, SyncKey, Writer};

const A: u64 = 0xa;
const B: u64 = 0xb;

fn cipher() -> Cipher {
    Cipher::new(&SyncKey::new(&[3; 32]).unwrap())
}

/// Node `node` at `epoch` with one peer.
fn node(node: u64, epoch: u64) -> Peers {
    Peers::new(node, epoch, cipher(), 1)
}

fn no_key(_: &[u64; 5], _: u64) -> bool {
    false
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What became of each datagram a node received.
type Outcomes = Vec<Result<Accepted, Refusal>>;

/// A pair and what went between them.
struct Pair {
    a: Peers,
    b: Peers,
    now: Duration,
    /// Every datagram a sent to b, in order.
    a_to_b: Vec<Vec<u8>>,
    /// Queued, not yet delivered.
    to_b: Vec<Vec<u8>>,
    to_a: Vec<Vec<u8>>,
}

impl Pair {
    fn new(a: Peers, b: Peers) -> Pair {
        Pair {
            a,
            b,
            now: Duration::ZERO,
            a_to_b: Vec::new(),
            to_b: Vec::new(),
            to_a: Vec::new(),
        }
    }

    fn queue(&mut self, from_a: Vec<(usize, Vec<u8>)>, from_b: Vec<(usize, Vec<u8>)>) {
        for (_, d) in from_a {
            self.a_to_b.push(d.clone());
            self.to_b.push(d);
        }
        self.to_a.extend(from_b.into_iter().map(|(_, d)| d));
    }

    /// Both poll, then everything queued is delivered, until quiet; the
    /// outcomes at a and at b.
    fn run(&mut self) -> (Outcomes, Outcomes) {
        let (mut at_a, mut at_b) = (Vec::new(), Vec::new());
        let (mut oa, mut ob) = (Vec::new(), Vec::new());
        self.a.poll(self.now, &mut oa);
        self.b.poll(self.now, &mut ob);
        self.queue(oa, ob);
        for _ in 0..10 {
            let (to_a, to_b) = (
                std::mem::take(&mut self.to_a),
                std::mem::take(&mut self.to_b),
            );
            if to_a.is_empty() && to_b.is_empty() {
                break;
            }
            let (mut oa, mut ob) = (Vec::new(), Vec::new());
            for d in to_b {
                at_b.push(self.b.open(0, &d, self.now, no_key, &mut ob));
            }
            for d in to_a {
                at_a.push(self.a.open(0, &d, self.now, no_key, &mut oa));
            }
            self.queue(oa, ob);
            self.now += ms(300);
        }
        (at_a, at_b)
    }

    /// A datagram of `kind` from a to b (sealed in a's session with b).
    fn a_sends(&mut self, kind: Kind) -> Vec<u8> {
        let d = self.a.seal(0, &Writer::new(kind)).expect("in session");
        self.a_to_b.push(d.clone());
        d
    }
}

fn established(outcomes: &[Result<Accepted, Refusal>]) -> usize {
    outcomes
        .iter()
        .filter(|o| matches!(o, Ok(Accepted::Established { .. })))
        .count()
}

/// Two nodes that found each other.
fn pair() -> Pair {
    let mut p = Pair::new(node(A, 100), node(B, 200));
    let (at_a, at_b) = p.run();
    assert_eq!(
        (established(&at_a), established(&at_b)),
        (1, 1),
        "{at_a:?}\n{at_b:?}"
    );
    assert_eq!(
        (p.a.peer_epoch(0), p.b.peer_epoch(0)),
        (Some(200), Some(100))
    );
    p
}

#[test]
fn nothing_is_sealed_for_a_peer_before_its_handshake() {
    let mut a = node(A, 100);
    assert_eq!(a.seal(0, &Writer::new(Kind::Rates)), None);
    assert_eq!(a.established(), 0);
    let mut out = Vec::new();
    a.poll(Duration::ZERO, &mut out);
    assert_eq!(out.len(), 1, "a hello");
    assert_eq!(out[0].1[5], Kind::Hello.code());
    // Asked again every second, not more often.
    out.clear();
    a.poll(ms(500), &mut out);
    assert!(out.is_empty());
    a.poll(ms(1000), &mut out);
    assert_eq!(out.len(), 1);
}

#[test]
fn a_handshake_makes_sessions_both_ways_and_data_flows() {
    let mut p = pair();
    for kind in [Kind::Rates, Kind::Entries, Kind::RequestDump, Kind::Leaving] {
        let d = p.a_sends(kind);
        let mut out = Vec::new();
        match p.b.open(0, &d, p.now, no_key, &mut out) {
            Ok(Accepted::Data(got)) => assert_eq!(got.header.kind, kind),
            other => panic!("{other:?}"),
        }
        assert!(out.is_empty());
    }
}

/// Every datagram a sent to b, the handshake's too, replayed to b in a
/// live session: each refused, by the window (none is new).
#[test]
fn every_datagram_replayed_within_the_session_is_refused() {
    let mut p = pair();
    for kind in [Kind::Rates, Kind::RequestDump, Kind::Leaving, Kind::Entries] {
        let d = p.a_sends(kind);
        assert!(matches!(
            p.b.open(0, &d, p.now, no_key, &mut Vec::new()),
            Ok(Accepted::Data(_))
        ));
    }
    let captured = p.a_to_b.clone();
    assert!(captured.len() >= 6, "{}", captured.len());
    for (n, d) in captured.iter().enumerate() {
        for round in 0..3 {
            let mut out = Vec::new();
            let got =
                p.b.open(0, d, p.now + ms(1000 * (n as u64 + 1)), no_key, &mut out);
            // A hello reply answers no challenge any more; anything else
            // was seen.
            let want = if d[5] == Kind::HelloReply.code() {
                Refusal::Handshake
            } else {
                Refusal::Window(Replay::Repeated)
            };
            assert_eq!(
                got,
                Err(want),
                "datagram {n} (kind {}), round {round}",
                d[5]
            );
            assert!(out.is_empty(), "a replay is not answered");
        }
    }
    // Still in session: a's next datagram is taken.
    let d = p.a_sends(Kind::Rates);
    assert!(matches!(
        p.b.open(0, &d, p.now, no_key, &mut Vec::new()),
        Ok(Accepted::Data(_))
    ));
}

/// a restarts (a new epoch): once b confirmed it, everything of a's first
/// life is refused as of a retired epoch, and none of it makes b ask again.
#[test]
fn a_senders_earlier_life_is_refused_after_it_restarted() {
    let mut p = pair();
    for kind in [Kind::Leaving, Kind::Rates, Kind::RequestDump] {
        let d = p.a_sends(kind);
        assert!(p.b.open(0, &d, p.now, no_key, &mut Vec::new()).is_ok());
    }
    let old_life = std::mem::take(&mut p.a_to_b);
    p.a = node(A, 101);
    let (at_a, at_b) = p.run();
    assert_eq!((established(&at_a), established(&at_b)), (1, 1), "{at_b:?}");
    assert_eq!(p.b.peer_epoch(0), Some(101));
    for d in &old_life {
        let mut out = Vec::new();
        let got = p.b.open(0, d, p.now, no_key, &mut out);
        let want = if d[5] == Kind::HelloReply.code() {
            Refusal::Handshake
        } else {
            Refusal::Epoch
        };
        assert_eq!(got, Err(want), "kind {}", d[5]);
        assert!(out.is_empty(), "neither answered nor asked about");
    }
    let d = p.a_sends(Kind::Rates);
    assert!(matches!(
        p.b.open(0, &d, p.now, no_key, &mut Vec::new()),
        Ok(Accepted::Data(_))
    ));
}

/// b restarts: nothing a sent before is taken by the new b. Data names b's
/// old epoch (stale); once the new session stands, the hellos of a's life
/// so far are below its start (the window).
#[test]
fn nothing_from_before_a_receivers_restart_is_taken() {
    let mut p = pair();
    for kind in [Kind::Leaving, Kind::Rates, Kind::Entries, Kind::RequestDump] {
        let d = p.a_sends(kind);
        assert!(p.b.open(0, &d, p.now, no_key, &mut Vec::new()).is_ok());
    }
    let captured = std::mem::take(&mut p.a_to_b);
    p.b = node(B, 201);
    // Data of before, at once: made for b's earlier epoch.
    for d in captured
        .iter()
        .filter(|d| !Kind::from_code(d[5]).unwrap().is_handshake())
    {
        let got = p.b.open(0, d, p.now, no_key, &mut Vec::new());
        assert_eq!(got, Err(Refusal::Stale), "kind {}", d[5]);
    }
    let (at_a, at_b) = p.run();
    assert_eq!((established(&at_a), established(&at_b)), (1, 1), "{at_b:?}");
    for d in &captured {
        let mut out = Vec::new();
        let got = p.b.open(0, d, p.now, no_key, &mut out);
        // Hellos of a's life so far are below the new session's start;
        // everything else names b's earlier epoch.
        let want = if d[5] == Kind::Hello.code() {
            Err(Refusal::Window(Replay::Repeated))
        } else {
            Err(Refusal::Stale)
        };
        assert_eq!(got, want, "kind {}", d[5]);
        assert!(out.is_empty());
    }
}

/// A hello reply counts once: replayed, or to a challenge that is no
/// longer outstanding, it is refused.
#[test]
fn a_hello_reply_is_taken_once() {
    let mut a = node(A, 100);
    let mut b = node(B, 200);
    let mut out = Vec::new();
    a.poll(Duration::ZERO, &mut out);
    let hello = out.pop().unwrap().1;
    let mut replies = Vec::new();
    assert_eq!(
        b.open(0, &hello, Duration::ZERO, no_key, &mut replies),
        Ok(Accepted::Answered)
    );
    // The reply, and b's own hello.
    let kinds: Vec<u8> = replies.iter().map(|(_, d)| d[5]).collect();
    assert_eq!(kinds, [Kind::HelloReply.code(), Kind::Hello.code()]);
    let reply = replies[0].1.clone();
    assert_eq!(
        a.open(0, &reply, ms(10), no_key, &mut Vec::new()),
        Ok(Accepted::Established { new: true })
    );
    assert_eq!(
        a.open(0, &reply, ms(20), no_key, &mut Vec::new()),
        Err(Refusal::Handshake)
    );
    // The same hello again, within the reply limit: not answered.
    assert_eq!(
        b.open(0, &hello, ms(100), no_key, &mut Vec::new()),
        Err(Refusal::Limited)
    );
}

/// A peer whose sender ID is not the one its handshake bound is refused,
/// and so is one claiming this node's own ID.
#[test]
fn the_sender_id_is_bound_to_the_peers_address() {
    let mut p = pair();
    // Another node, with the key, at a's address (a's epoch and all).
    let mut impostor = Peers::new(0xbad, 100, cipher(), 1);
    let mut out = Vec::new();
    impostor.poll(Duration::ZERO, &mut out);
    // (It cannot have a session with b: it cannot seal data for it. Its
    // hello is of an epoch b confirmed for a, from another ID.)
    let hello = out.pop().unwrap().1;
    assert_eq!(
        p.b.open(0, &hello, p.now + ms(5000), no_key, &mut Vec::new()),
        Err(Refusal::Identity)
    );
    // b's own datagram back at b.
    let own = p.b.seal(0, &Writer::new(Kind::Rates)).unwrap();
    assert_eq!(
        p.b.open(0, &own, p.now, no_key, &mut Vec::new()),
        Err(Refusal::Own)
    );
}

/// Another key, or one altered bit, fails the tag; a datagram of the
/// previous format version is counted as such.
#[test]
fn forgeries_fail_the_tag() {
    let mut p = pair();
    let mut other = Peers::new(A, 100, Cipher::new(&SyncKey::new(&[4; 32]).unwrap()), 1);
    let mut out = Vec::new();
    other.poll(Duration::ZERO, &mut out);
    assert_eq!(
        p.b.open(0, &out[0].1, p.now, no_key, &mut Vec::new()),
        Err(Refusal::Decode(DecodeError::Auth))
    );
    let mut d = p.a_sends(Kind::Rates);
    d[20] ^= 1;
    assert_eq!(
        p.b.open(0, &d, p.now, no_key, &mut Vec::new()),
        Err(Refusal::Decode(DecodeError::Auth))
    );
    d[20] ^= 1;
    d[4] = 1;
    assert_eq!(
        p.b.open(0, &d, p.now, no_key, &mut Vec::new()),
        Err(Refusal::Decode(DecodeError::Version))
    );
    // Untouched, it is taken: the forgeries moved nothing.
    d[4] = flowsync::VERSION;
    assert!(matches!(
        p.b.open(0, &d, p.now, no_key, &mut Vec::new()),
        Ok(Accepted::Data(_))
    ));
}

/// Datagrams that arrive out of order within the window are taken, once.
#[test]
fn reordered_datagrams_are_taken_once() {
    let mut p = pair();
    let ds: Vec<Vec<u8>> = (0..20).map(|_| p.a_sends(Kind::Rates)).collect();
    for i in (0..20).rev() {
        assert!(matches!(
            p.b.open(0, &ds[i], p.now, no_key, &mut Vec::new()),
            Ok(Accepted::Data(_))
        ));
    }
    for d in &ds {
        assert_eq!(
            p.b.open(0, d, p.now, no_key, &mut Vec::new()),
            Err(Refusal::Window(Replay::Repeated))
        );
    }
}
