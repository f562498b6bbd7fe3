//! Probing a VIP from outside the balancers, as a client would reach it:
//! an ICMP echo (the balancer answers for its VIPs) and a TCP connection or
//! HTTP GET through its port (a backend behind it answers).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use health::probe::Prober;
use health::target::Check;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::config::{PortProbe, ProbeSettings};

/// ICMP types.
const ECHO_REQUEST_V4: u8 = 8;
const ECHO_REPLY_V4: u8 = 0;
const ECHO_REQUEST_V6: u8 = 128;
const ECHO_REPLY_V6: u8 = 129;

/// What names us in an echo request's data, before the token.
const TAG: &[u8] = b"spillway zone-health ";

/// What makes an echo request ours, each part drawn from the OS's random
/// source for each probe: its identifier and sequence number (32 bits that
/// anyone who could forge a reply from the VIP's address would otherwise
/// guess: a predictable identifier and `seq = 1` let a forged reply keep a
/// dead zone published), and a 128-bit token in its data, which the reply
/// must echo whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Echo {
    ident: u16,
    seq: u16,
    token: [u8; 16],
}

impl Echo {
    /// A fresh one, from the OS's random source (`getrandom`, as every
    /// random value of the project).
    fn random() -> Result<Echo, String> {
        let mut b = [0u8; 20];
        getrandom::fill(&mut b).map_err(|e| format!("the OS's random source: {e}"))?;
        let mut token = [0u8; 16];
        token.copy_from_slice(&b[4..]);
        Ok(Echo {
            ident: u16::from_be_bytes([b[0], b[1]]),
            seq: u16::from_be_bytes([b[2], b[3]]),
            token,
        })
    }

    /// The data of the request, which the reply carries back.
    fn data(&self) -> Vec<u8> {
        let mut d = TAG.to_vec();
        d.extend_from_slice(&self.token);
        d
    }
}

/// The echo request `e`: 8 bytes of header and its data (checksummed for
/// IPv4; the kernel fills ICMPv6's).
fn echo_request(v6: bool, e: &Echo) -> Vec<u8> {
    let mut m = vec![if v6 { ECHO_REQUEST_V6 } else { ECHO_REQUEST_V4 }, 0, 0, 0];
    m.extend(e.ident.to_be_bytes());
    m.extend(e.seq.to_be_bytes());
    m.extend(e.data());
    if !v6 {
        let sum = wire::checksum::checksum(&m);
        m[2..4].copy_from_slice(&sum.to_be_bytes());
    }
    m
}

/// Whether `packet` (what a raw socket received: IPv4 with its header,
/// ICMPv6 without) is the reply to `e`: its identifier, its sequence
/// number and its data, token included.
fn is_our_reply(packet: &[u8], v6: bool, e: &Echo) -> bool {
    let icmp = if v6 {
        packet
    } else {
        let ihl = usize::from(packet.first().map_or(0, |b| b & 0x0f)) * 4;
        packet.get(ihl..).unwrap_or_default()
    };
    let want = if v6 { ECHO_REPLY_V6 } else { ECHO_REPLY_V4 };
    icmp.len() >= 8
        && icmp[0] == want
        && icmp[1] == 0
        && icmp[4..6] == e.ident.to_be_bytes()
        && icmp[6..8] == e.seq.to_be_bytes()
        && icmp[8..] == e.data()[..]
}

/// Sends one echo request to `addr` and waits up to `timeout` for its
/// reply (blocking: run it off the async threads). Needs CAP_NET_RAW.
pub fn ping(addr: IpAddr, timeout: Duration) -> Result<Duration, String> {
    let v6 = addr.is_ipv6();
    let (domain, proto) = if v6 {
        (Domain::IPV6, Protocol::ICMPV6)
    } else {
        (Domain::IPV4, Protocol::ICMPV4)
    };
    let echo = Echo::random()?;
    let sock = Socket::new(domain, Type::RAW, Some(proto))
        .map_err(|e| format!("ICMP socket (needs CAP_NET_RAW): {e}"))?;
    let peer = SockAddr::from(SocketAddr::new(addr, 0));
    // A connected raw socket receives only what comes from the peer.
    sock.connect(&peer)
        .map_err(|e| format!("ICMP to {addr}: {e}"))?;
    let start = Instant::now();
    sock.send(&echo_request(v6, &echo))
        .map_err(|e| format!("ICMP echo to {addr}: {e}"))?;
    let mut buf = [0u8; 1500];
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(format!("no ICMP echo reply within {timeout:?}"));
        }
        sock.set_read_timeout(Some(left))
            .map_err(|e| format!("ICMP socket: {e}"))?;
        match std::io::Read::read(&mut &sock, &mut buf) {
            Ok(n) => {
                let got = &buf[..n];
                if is_our_reply(got, v6, &echo) {
                    return Ok(start.elapsed());
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!("no ICMP echo reply within {timeout:?}"));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("ICMP from {addr}: {e}")),
        }
    }
}

/// A probe's verdict: success, or why not.
pub type Outcome = Result<(), String>;

/// The port probe's check.
pub fn port_check(p: &ProbeSettings) -> Option<Check> {
    let mut c = match p.kind {
        PortProbe::None => return None,
        PortProbe::Tcp => Check::tcp(),
        PortProbe::Http => Check::http(&p.path),
    };
    c.host.clone_from(&p.host);
    c.interval = p.interval;
    c.timeout = p.timeout;
    Some(c)
}

/// Probes `addr`: the echo (if `icmp`) and `port` with `check`, both at
/// once; healthy only if both pass.
pub async fn probe_vip(
    prober: &Prober,
    addr: IpAddr,
    icmp: bool,
    port: Option<u16>,
    check: Option<&Check>,
    timeout: Duration,
) -> Outcome {
    let echo = async {
        if !icmp {
            return Ok(());
        }
        match tokio::task::spawn_blocking(move || ping(addr, timeout)).await {
            Ok(r) => r.map(|_| ()),
            Err(e) => Err(format!("ICMP probe failed: {e}")),
        }
    };
    let port_probe = async {
        match (port, check) {
            (Some(port), Some(c)) => prober
                .probe(SocketAddr::new(addr, port), c)
                .await
                .map(|_| ())
                .map_err(|e| format!("{} {port}: {e}", kind_name(c))),
            _ => Ok(()),
        }
    };
    let (e, p) = tokio::join!(echo, port_probe);
    match (e, p) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(a), Ok(())) | (Ok(()), Err(a)) => Err(a),
        (Err(a), Err(b)) => Err(format!("{a}; {b}")),
    }
}

fn kind_name(c: &Check) -> &'static str {
    match c.kind {
        health::target::ProbeKind::Tcp => "TCP",
        health::target::ProbeKind::Http => "HTTP",
        health::target::ProbeKind::Https => "HTTPS",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 packet as a raw socket gets it: a 20-byte header, then
    /// `icmp`.
    fn v4_packet(icmp: &[u8]) -> Vec<u8> {
        let mut p = vec![0x45];
        p.extend([0u8; 19]);
        p.extend(icmp);
        p
    }

    #[test]
    fn echo_requests_and_replies() {
        let e = Echo::random().unwrap();
        let r = echo_request(false, &e);
        assert_eq!(
            wire::checksum::checksum(&r),
            0,
            "a checksummed message sums to zero"
        );
        let mut icmp = r.clone();
        icmp[0] = ECHO_REPLY_V4;
        let reply = v4_packet(&icmp);
        assert!(is_our_reply(&reply, false, &e));
        assert!(!is_our_reply(&reply[..25], false, &e), "cut short");
        let mut v6 = echo_request(true, &e);
        assert!(!is_our_reply(&v6, true, &e), "a request is no reply");
        v6[0] = ECHO_REPLY_V6;
        assert!(is_our_reply(&v6, true, &e));
    }

    /// Issue 38 item 11: a reply must match the probe's random identifier,
    /// sequence number and token; a forger that knows the format but not
    /// the token (or guesses the identifier, or `seq = 1`) is ignored.
    #[test]
    fn a_reply_without_the_probes_own_token_is_not_ours() {
        let e = Echo::random().unwrap();
        let reply = |ident: u16, seq: u16, token: &[u8; 16]| {
            let mut m = vec![ECHO_REPLY_V4, 0, 0, 0];
            m.extend(ident.to_be_bytes());
            m.extend(seq.to_be_bytes());
            m.extend(TAG);
            m.extend(token);
            v4_packet(&m)
        };
        assert!(is_our_reply(&reply(e.ident, e.seq, &e.token), false, &e));
        let mut other = e.token;
        other[15] ^= 1;
        assert!(
            !is_our_reply(&reply(e.ident, e.seq, &other), false, &e),
            "another token"
        );
        assert!(!is_our_reply(
            &reply(e.ident ^ 1, e.seq, &e.token),
            false,
            &e
        ));
        assert!(!is_our_reply(
            &reply(e.ident, e.seq ^ 1, &e.token),
            false,
            &e
        ));
        // With the token's bytes missing or extra.
        let mut short = reply(e.ident, e.seq, &e.token);
        short.pop();
        assert!(!is_our_reply(&short, false, &e));
        let mut long = reply(e.ident, e.seq, &e.token);
        long.push(0);
        assert!(!is_our_reply(&long, false, &e));
        // Every probe draws its own: 64 probes, 64 identifiers and tokens
        // (a repeat has odds of about 2^-21 and 2^-116).
        let probes: Vec<Echo> = (0..64).map(|_| Echo::random().unwrap()).collect();
        let tokens: std::collections::HashSet<[u8; 16]> = probes.iter().map(|p| p.token).collect();
        assert_eq!(tokens.len(), 64);
        let seqs: std::collections::HashSet<u16> = probes.iter().map(|p| p.seq).collect();
        assert!(seqs.len() > 1, "the sequence number is not fixed");
    }
}
