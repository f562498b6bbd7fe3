//! Probing a VIP from outside the balancers, as a client would reach it:
//! an ICMP echo (the balancer answers for its VIPs) and a TCP connection or
//! HTTP GET through its port (a backend behind it answers).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
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

/// Identifiers of our echo requests: distinct per probe, so that replies
/// to another probe (or another program) are never taken for ours.
static NEXT_IDENT: AtomicU16 = AtomicU16::new(1);

/// The echo request with `ident` and `seq`: 8 bytes of header and a
/// payload naming us (checksummed for IPv4; the kernel fills ICMPv6's).
fn echo_request(v6: bool, ident: u16, seq: u16) -> Vec<u8> {
    let mut m = vec![if v6 { ECHO_REQUEST_V6 } else { ECHO_REQUEST_V4 }, 0, 0, 0];
    m.extend(ident.to_be_bytes());
    m.extend(seq.to_be_bytes());
    m.extend(b"spillway zone-health");
    if !v6 {
        let sum = checksum(&m);
        m[2..4].copy_from_slice(&sum.to_be_bytes());
    }
    m
}

/// The Internet checksum (RFC 1071).
fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !u16::try_from(sum).unwrap_or(u16::MAX)
}

/// Whether `packet` (what a raw socket received: IPv4 with its header,
/// ICMPv6 without) is the reply to our `ident` / `seq`.
fn is_our_reply(packet: &[u8], v6: bool, ident: u16, seq: u16) -> bool {
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
        && icmp[4..6] == ident.to_be_bytes()
        && icmp[6..8] == seq.to_be_bytes()
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
    let sock = Socket::new(domain, Type::RAW, Some(proto))
        .map_err(|e| format!("ICMP socket (needs CAP_NET_RAW): {e}"))?;
    let peer = SockAddr::from(SocketAddr::new(addr, 0));
    // A connected raw socket receives only what comes from the peer.
    sock.connect(&peer)
        .map_err(|e| format!("ICMP to {addr}: {e}"))?;
    let ident = NEXT_IDENT.fetch_add(1, Ordering::Relaxed) ^ (std::process::id() & 0xffff) as u16;
    let seq = 1;
    let start = Instant::now();
    sock.send(&echo_request(v6, ident, seq))
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
                if is_our_reply(got, v6, ident, seq) {
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

    #[test]
    fn echo_requests_and_replies() {
        let r = echo_request(false, 0x1234, 1);
        assert_eq!(checksum(&r), 0, "a checksummed message sums to zero");
        // An IPv4 reply as a raw socket gets it: a 20-byte header first.
        let mut reply = vec![0x45; 1];
        reply.extend([0u8; 19]);
        let mut icmp = r.clone();
        icmp[0] = ECHO_REPLY_V4;
        reply.extend(&icmp);
        assert!(is_our_reply(&reply, false, 0x1234, 1));
        assert!(!is_our_reply(&reply, false, 0x1235, 1), "another probe's");
        assert!(!is_our_reply(&reply, false, 0x1234, 2));
        assert!(!is_our_reply(&reply[..25], false, 0x1234, 1), "cut short");
        let mut v6 = echo_request(true, 7, 1);
        assert!(!is_our_reply(&v6, true, 7, 1), "a request is no reply");
        v6[0] = ECHO_REPLY_V6;
        assert!(is_our_reply(&v6, true, 7, 1));
    }
}
