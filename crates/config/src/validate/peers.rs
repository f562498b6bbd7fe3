//! `[bgp]` and `[flow_sync]`: the BGP speaker and the flow-sync peers this node
//! talks to — usable AS numbers, each peer listed once, never this node itself.

use std::collections::HashSet;

use super::Checker;

impl Checker<'_> {
    pub(super) fn bgp(&mut self) {
        let Some(b) = &self.cfg.bgp else { return };
        let asn_ok = |a: u32| a != 0 && a != u32::MAX && a != 23_456;
        if !asn_ok(b.local_asn) {
            self.err("bgp.local_asn", format!("AS {} is reserved", b.local_asn));
        }
        if b.control.trim().is_empty() {
            self.err(
                "bgp.control",
                "how to reach the speaker is needed: a socket path or host:port",
            );
        }
        if b.speaker == crate::schema::BgpSpeaker::Bird
            && !b.control.trim().is_empty()
            && !std::path::Path::new(&b.control).is_absolute()
        {
            self.err(
                "bgp.control",
                format!(
                    "BIRD's control socket is an absolute path (birdc -s), not {:?}",
                    b.control
                ),
            );
        }
        if !b.routes_file.is_absolute() || b.routes_file.file_name().is_none() {
            self.err(
                "bgp.routes_file",
                format!(
                    "an absolute file path is needed, not {:?}",
                    b.routes_file.display().to_string()
                ),
            );
        }
        // Both end up in the bird.conf `spillway bird-config` writes: the
        // routes file as an `include "…"` pattern, the socket in a comment.
        // BIRD strings have no escapes, so a quote or a line break there
        // would end the string or the comment and let the rest of the
        // value be read as configuration (a protocol, a filter).
        if let Some(why) = bird_text_problem(&b.control, false) {
            self.err("bgp.control", why);
        }
        if let Some(why) = bird_text_problem(&b.routes_file.to_string_lossy(), true) {
            self.err("bgp.routes_file", why);
        }
        self.bfd(&b.bfd);
        let mut seen = HashSet::new();
        for (i, peer) in b.peers.iter().enumerate() {
            if !asn_ok(peer.asn) {
                self.err(
                    &format!("bgp.peers[{i}].asn"),
                    format!("AS {} is reserved", peer.asn),
                );
            }
            if !seen.insert(peer.address) {
                self.err(
                    &format!("bgp.peers[{i}].address"),
                    format!("peer {} is listed twice", peer.address),
                );
            }
        }
    }

    /// `[bgp] bfd`: an interval from 10 ms (shorter, a busy host misses
    /// packets and sessions go down for nothing) to 10 s (longer detects
    /// more slowly than BGP's own hold time of 9 s), and a multiplier that
    /// fits BFD's octet and is not 0.
    fn bfd(&mut self, bfd: &crate::schema::Bfd) {
        let ms = bfd.interval.get().as_millis();
        if !(BFD_INTERVAL_MS.0..=BFD_INTERVAL_MS.1).contains(&ms) {
            self.err(
                "bgp.bfd.interval",
                format!(
                    "BFD interval {}: expected {}ms to {}s",
                    bfd.interval,
                    BFD_INTERVAL_MS.0,
                    BFD_INTERVAL_MS.1 / 1000
                ),
            );
        }
        if !(1..=255).contains(&bfd.multiplier) {
            self.err(
                "bgp.bfd.multiplier",
                format!(
                    "BFD multiplier {}: expected 1 to 255 (missed intervals before the session is down)",
                    bfd.multiplier
                ),
            );
        }
    }

    pub(super) fn flow_sync(&mut self) {
        let Some(f) = &self.cfg.flow_sync else { return };
        if f.peers.is_empty() {
            self.err("flow_sync.peers", "flow sync needs at least one peer");
        }
        let mut seen = HashSet::new();
        for (i, peer) in f.peers.iter().enumerate() {
            if *peer == f.listen {
                self.err(
                    &format!("flow_sync.peers[{i}]"),
                    format!("{peer} is this node's own listen address"),
                );
            }
            if !seen.insert(*peer) {
                self.err(
                    &format!("flow_sync.peers[{i}]"),
                    format!("peer {peer} is listed twice"),
                );
            }
        }
        if !(1..=1024).contains(&f.batch_size) {
            self.err(
                "flow_sync.batch_size",
                format!("{} entries per batch: expected 1-1024", f.batch_size),
            );
        }
        if let Err((field, why)) = f.resolve_key() {
            self.err(field, why);
        }
        if f.batch_interval.is_zero() {
            self.err(
                "flow_sync.batch_interval",
                "the batch interval must be longer than 0s",
            );
        }
    }
}

/// The BFD intervals `[bgp] bfd.interval` may ask for, in milliseconds.
const BFD_INTERVAL_MS: (u128, u128) = (10, 10_000);

/// Why `value` cannot be written into a bird.conf (`None`: it can): a
/// double quote, or a control character (a line break, a tab, NUL, DEL …);
/// for an `include` pattern (`pattern`) also a glob character (`*`, `?`,
/// `[`, `]`, `\`), which would make BIRD read other files than the one
/// Spillway writes.
fn bird_text_problem(value: &str, pattern: bool) -> Option<String> {
    const ENDS: &str = "where it would end the string or comment and inject configuration";
    let bad = value.chars().find(|&c| {
        c == '"' || c.is_control() || (pattern && matches!(c, '*' | '?' | '[' | ']' | '\\'))
    })?;
    let (what, harm) = match bad {
        '"' => ("a double quote".to_owned(), ENDS),
        '\n' | '\r' => ("a line break".to_owned(), ENDS),
        c if c.is_control() => (
            format!("the control character U+{:04X}", u32::from(c)),
            ENDS,
        ),
        c => (
            format!("the glob character {c:?}"),
            "where BIRD's include would read other files than the one Spillway writes",
        ),
    };
    Some(format!(
        "{value:?} contains {what}: it is written into bird.conf, {harm}; use a plain path"
    ))
}
