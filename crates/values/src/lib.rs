//! Spillway's vocabulary, the floor every configuration file stands on: the
//! small value types TOML has no native form for — durations (`"30s"`), port
//! sets (`"80,443"`, `"8000-8100"`, `"all"`), prefixes (`"10.0.0.0/24"`) and
//! MAC addresses — and the limits of a management listener ([`listener`]).
//! The daemon's `config` re-exports them as `config::values`; the
//! backend-side decapsulator, the reference appliance and the zone health
//! service use them without the daemon's schema.
//!
//! Each parses in its `Deserialize` impl, so a malformed value is reported by
//! the TOML deserializer with the value's span (file:line:col) and never
//! reaches validation.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

/// A duration written as a number with a unit: `"500ms"`, `"30s"`, `"5m"`,
/// `"1h"`, or a sum of those (`"1m30s"`). A bare number is rejected because
/// its unit would be a guess.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub std::time::Duration);

impl Duration {
    /// A duration of `s` seconds.
    pub const fn secs(s: u64) -> Self {
        Self(std::time::Duration::from_secs(s))
    }

    /// A duration of `ms` milliseconds.
    pub const fn millis(ms: u64) -> Self {
        Self(std::time::Duration::from_millis(ms))
    }

    /// The standard-library duration.
    pub const fn get(self) -> std::time::Duration {
        self.0
    }

    /// Whether the duration is zero.
    pub const fn is_zero(self) -> bool {
        self.0.is_zero()
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms % 1000 != 0 || ms == 0 {
            write!(f, "{ms}ms")
        } else {
            write!(f, "{}s", ms / 1000)
        }
    }
}

impl FromStr for Duration {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "invalid duration {s:?}: write a number and a unit (ms, s, m, h), e.g. \"30s\" or \"500ms\""
            )
        };
        let t = s.trim();
        if t.is_empty() {
            return Err(bad());
        }
        let mut total: u128 = 0;
        let mut rest = t;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            if digits == 0 {
                return Err(bad());
            }
            let n: u128 = rest[..digits].parse().map_err(|_| bad())?;
            rest = &rest[digits..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(rest.len());
            let ms_per = match &rest[..unit_len] {
                "ms" => 1,
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                _ => return Err(bad()),
            };
            rest = &rest[unit_len..];
            total = n
                .checked_mul(ms_per)
                .and_then(|v| total.checked_add(v))
                .ok_or_else(bad)?;
        }
        let ms = u64::try_from(total).map_err(|_| bad())?;
        Ok(Self::millis(ms))
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"30s\" or \"500ms\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
                Err(E::custom(format!(
                    "a duration needs a unit: write \"{v}s\" or \"{v}ms\""
                )))
            }
        }
        d.deserialize_any(V)
    }
}

/// An inclusive range of destination ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortRange {
    /// First port.
    pub lo: u16,
    /// Last port (inclusive).
    pub hi: u16,
}

impl PortRange {
    /// Whether two ranges share a port.
    pub const fn overlaps(&self, o: &PortRange) -> bool {
        self.lo <= o.hi && o.lo <= self.hi
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

/// A rule's destination ports: `all`, or a set of ports and ranges.
///
/// Written as an integer (`80`), a string (`"80"`, `"80,443"`,
/// `"8000-8100"`, `"all"`) or a list of those (`[80, "8000-8100"]`). The
/// ranges are kept sorted and merged, so equal sets compare equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum PortSpec {
    /// Every port, and packets without ports (ICMP, ESP, GRE, fragments).
    #[default]
    All,
    /// These ports only (sorted, disjoint, not adjacent, never empty).
    Ranges(Vec<PortRange>),
}

impl PortSpec {
    /// Whether this is `all`.
    pub const fn is_all(&self) -> bool {
        matches!(self, PortSpec::All)
    }

    /// The ranges, `all` being 0–65535 (so that it also covers port 0).
    pub fn ranges(&self) -> Vec<PortRange> {
        match self {
            PortSpec::All => vec![PortRange {
                lo: 0,
                hi: u16::MAX,
            }],
            PortSpec::Ranges(r) => r.clone(),
        }
    }

    /// The ports both specs contain, as ranges (empty when disjoint).
    pub fn intersection(&self, other: &PortSpec) -> Vec<PortRange> {
        let mut out = Vec::new();
        for a in self.ranges() {
            for b in other.ranges() {
                if a.overlaps(&b) {
                    out.push(PortRange {
                        lo: a.lo.max(b.lo),
                        hi: a.hi.min(b.hi),
                    });
                }
            }
        }
        out
    }

    fn from_items(items: Vec<PortRange>) -> Result<Self, String> {
        if items.is_empty() {
            return Err("empty port list: write \"all\" or at least one port".into());
        }
        let mut items = items;
        items.sort();
        let mut merged: Vec<PortRange> = Vec::with_capacity(items.len());
        for r in items {
            match merged.last_mut() {
                Some(last) if u32::from(r.lo) <= u32::from(last.hi) + 1 => {
                    last.hi = last.hi.max(r.hi);
                }
                _ => merged.push(r),
            }
        }
        Ok(PortSpec::Ranges(merged))
    }

    fn parse_item(s: &str) -> Result<PortRange, String> {
        let port = |p: &str| -> Result<u16, String> {
            let p = p.trim();
            let n: u32 = p
                .parse()
                .map_err(|_| format!("invalid port {p:?}: expected a number 1-65535, a range like \"8000-8100\", or \"all\""))?;
            match u16::try_from(n) {
                Ok(port) if port != 0 => Ok(port),
                _ => Err(format!("port {n} is out of range 1-65535")),
            }
        };
        match s.split_once('-') {
            Some((a, b)) => {
                let (lo, hi) = (port(a)?, port(b)?);
                if lo > hi {
                    return Err(format!(
                        "port range {lo}-{hi} is backwards: the first port must not exceed the last"
                    ));
                }
                Ok(PortRange { lo, hi })
            }
            None => port(s).map(|p| PortRange { lo: p, hi: p }),
        }
    }
}

impl FromStr for PortSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("all") {
            return Ok(PortSpec::All);
        }
        let items = s
            .split(',')
            .map(Self::parse_item)
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_items(items)
    }
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortSpec::All => f.write_str("all"),
            PortSpec::Ranges(r) => {
                for (i, x) in r.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{x}")?;
                }
                Ok(())
            }
        }
    }
}

impl<'de> Deserialize<'de> for PortSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PortSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("ports: \"all\", a port, \"80,443\", \"8000-8100\" or a list of those")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PortSpec, E> {
                PortSpec::from_str(&v.to_string()).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PortSpec, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PortSpec, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<PortItem>()? {
                    match item.0 {
                        None => {
                            return Err(de::Error::custom(
                                "\"all\" cannot be part of a list: write ports = \"all\"",
                            ));
                        }
                        Some(r) => items.extend(r),
                    }
                }
                PortSpec::from_items(items).map_err(de::Error::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// One element of a port list; `None` is `"all"`.
struct PortItem(Option<Vec<PortRange>>);

impl<'de> Deserialize<'de> for PortItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match PortSpec::deserialize(d)? {
            PortSpec::All => Ok(PortItem(None)),
            PortSpec::Ranges(r) => Ok(PortItem(Some(r))),
        }
    }
}

/// An IP prefix such as `10.0.0.0/24` or `fd00::/64`; a bare address is a
/// host prefix (/32 or /128).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    /// The address as written (for an interface address, the host part
    /// matters: `10.0.0.2/24` is address 10.0.0.2 on a /24).
    pub addr: IpAddr,
    /// Prefix length in bits.
    pub len: u8,
}

impl Prefix {
    /// The host prefix of `addr` (/32 or /128).
    pub fn host(addr: IpAddr) -> Prefix {
        Prefix {
            addr,
            len: if addr.is_ipv4() { 32 } else { 128 },
        }
    }

    /// Whether `ip` lies inside the prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let m = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(n) & m == u32::from(a) & m
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let m = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(n) & m == u128::from(a) & m
            }
            _ => false,
        }
    }

    /// An address or a network prefix as an allow-list or match takes it
    /// (the `--allow-source` and `--vip` of `spillway decap` and `spillway
    /// nva`): an explicit length with host bits set is refused, since
    /// `10.0.0.1/24` is more likely a typo than a wish for 10.0.0.0/24.
    ///
    /// # Errors
    /// What [`Prefix::from_str`] refuses, or host bits beyond the length.
    pub fn parse_network(s: &str) -> Result<Prefix, String> {
        let p: Prefix = s.parse()?;
        if p.has_host_bits() {
            return Err(format!(
                "{s} has bits set beyond its prefix length: write the network address or a single address"
            ));
        }
        Ok(p)
    }

    /// The network of the prefix: its address with the host bits cleared
    /// (`10.0.0.1/24` → `10.0.0.0/24`).
    pub fn network(&self) -> Prefix {
        let (first, _) = self.span();
        let addr = match self.addr {
            IpAddr::V4(_) => IpAddr::V4(u32::try_from(first).unwrap_or(0).into()),
            IpAddr::V6(_) => IpAddr::V6(first.into()),
        };
        Prefix {
            addr,
            len: self.len,
        }
    }

    /// Whether the two share an address (never across IP versions).
    pub fn overlaps(&self, other: &Prefix) -> bool {
        if self.addr.is_ipv4() != other.addr.is_ipv4() {
            return false;
        }
        let ((a0, a1), (b0, b1)) = (self.span(), other.span());
        a0 <= b1 && b0 <= a1
    }

    /// Whether bits beyond the prefix length are set (fine for an interface
    /// address, a mistake for a client prefix).
    pub fn has_host_bits(&self) -> bool {
        let (value, host) = self.bits();
        value & host != 0
    }

    /// The first and last addresses inside the prefix, as integers of its
    /// IP version's width (an IPv4 address as its 32-bit value).
    pub fn span(&self) -> (u128, u128) {
        let (value, host) = self.bits();
        (value & !host, value | host)
    }

    /// The address as an integer of its IP version's width, and the mask
    /// of the host bits (those beyond the prefix length).
    fn bits(&self) -> (u128, u128) {
        let (value, width) = match self.addr {
            IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
            IpAddr::V6(a) => (u128::from(a), 128),
        };
        let all = u128::MAX >> (128 - width);
        (value, all.checked_shr(u32::from(self.len)).unwrap_or(0))
    }
}

impl FromStr for Prefix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("invalid IP address {a:?} in prefix {s:?}"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => {
                    return Err(format!(
                        "invalid prefix length {l:?} in {s:?}: expected 0-{max}"
                    ));
                }
            },
        };
        Ok(Prefix { addr, len })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl<'de> Deserialize<'de> for Prefix {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(FromStrVisitor::<Prefix>::new(
            "an IP prefix such as \"10.0.0.0/24\"",
        ))
    }
}

/// A forwarding rule's VIP: one address (`10.0.0.10`, `2001:db8::10`), or
/// an IPv6 prefix (`2001:db8:1::/96`) whose every address the rule takes
/// alike, as a cloud's external IPv6 forwarding rule does. Parsed like a
/// [`Prefix`]; validation bounds the length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Vip {
    /// The address, or the prefix's network as written.
    pub addr: IpAddr,
    /// Prefix length in bits: 32 or 128 for one address.
    pub len: u8,
}

impl Vip {
    /// The VIP of one address.
    pub fn host(addr: IpAddr) -> Vip {
        let Prefix { addr, len } = Prefix::host(addr);
        Vip { addr, len }
    }

    /// As a prefix (a host prefix for one address).
    pub fn prefix(&self) -> Prefix {
        Prefix {
            addr: self.addr,
            len: self.len,
        }
    }

    /// Whether it is a prefix of more than one address.
    pub fn is_range(&self) -> bool {
        self.len < if self.addr.is_ipv4() { 32 } else { 128 }
    }

    /// The one address of it that stands for all: probed through, shown
    /// as its state's key. The address itself; for a prefix, the first
    /// after its network address (`2001:db8:1::1` of `2001:db8:1::/96`),
    /// since the all-zero one is the subnet-router anycast address.
    pub fn probe_addr(&self) -> IpAddr {
        if !self.is_range() {
            return self.addr;
        }
        let (first, _) = self.prefix().span();
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4(u32::try_from(first + 1).unwrap_or(u32::MAX).into()),
            IpAddr::V6(_) => IpAddr::V6((first + 1).into()),
        }
    }

    /// Whether `ip` is one of its addresses.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.prefix().contains(ip)
    }

    /// Whether the two share an address.
    pub fn overlaps(&self, other: &Vip) -> bool {
        self.prefix().overlaps(&other.prefix())
    }
}

impl FromStr for Vip {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let Prefix { addr, len } = s.parse()?;
        Ok(Vip { addr, len })
    }
}

/// One address as itself, a prefix as `address/length`.
impl fmt::Display for Vip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_range() {
            write!(f, "{}/{}", self.addr, self.len)
        } else {
            write!(f, "{}", self.addr)
        }
    }
}

impl<'de> Deserialize<'de> for Vip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(FromStrVisitor::<Vip>::new(
            "a VIP: an address such as \"10.0.0.10\", or an IPv6 prefix such as \"2001:db8:1::/96\"",
        ))
    }
}

/// An Ethernet MAC address, written `02:00:00:00:00:01`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl FromStr for MacAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("invalid MAC address {s:?}: expected six hex bytes like 02:00:00:00:00:01");
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for b in &mut out {
            let p = parts.next().ok_or_else(bad)?;
            if p.len() != 2 {
                return Err(bad());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(MacAddr(out))
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(FromStrVisitor::<MacAddr>::new(
            "a MAC address such as \"02:00:00:00:00:01\"",
        ))
    }
}

/// Parses a string value with `FromStr` inside the deserializer's visitor,
/// so that toml attaches the value's own span to the error.
struct FromStrVisitor<T> {
    what: &'static str,
    _t: std::marker::PhantomData<T>,
}

impl<T> FromStrVisitor<T> {
    const fn new(what: &'static str) -> Self {
        Self {
            what,
            _t: std::marker::PhantomData,
        }
    }
}

impl<T: FromStr<Err = String>> Visitor<'_> for FromStrVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }
}

/// The limits of a management listener (M50), the same for every listener
/// of the project (the daemon's control socket and `/metrics`, the zone
/// health service's): what validation accepts.
pub mod listener {
    /// Most connections a management listener serves at once.
    pub const MAX_CONNECTIONS: u32 = 4096;
    /// Longest a management listener waits for a request: longer only lets
    /// slow clients hold connection slots longer.
    pub const MAX_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
    /// Connections one client may hold at once when the file does not say
    /// (`max_connections_per_client`).
    pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: u32 = 8;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (text, ms) in [
            ("500ms", Some(500u64)),
            ("30s", Some(30_000)),
            ("5m", Some(300_000)),
            ("1h", Some(3_600_000)),
            ("1m30s", Some(90_000)),
            ("0s", Some(0)),
            ("30", None),
            ("s", None),
            ("", None),
            ("3d", None),
            ("1.5s", None),
            ("-1s", None),
        ] {
            let got = text.parse::<Duration>().ok().map(|d| d.get().as_millis());
            assert_eq!(got, ms.map(u128::from), "{text:?}");
        }
    }

    #[test]
    fn vips_are_an_address_or_a_prefix() {
        let v = |s: &str| s.parse::<Vip>().unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // One address: itself everywhere, written bare.
        let one = v("2001:db8::10");
        assert!(!one.is_range());
        assert_eq!(
            (one.to_string(), one.probe_addr()),
            ("2001:db8::10".into(), ip("2001:db8::10"))
        );
        assert_eq!(v("10.0.0.10/32"), Vip::host(ip("10.0.0.10")));
        // A /96: written with its length, probed through network + 1.
        let p = v("2001:db8:f00::/96");
        assert!(p.is_range());
        assert_eq!(p.to_string(), "2001:db8:f00::/96");
        assert_eq!(p.probe_addr(), ip("2001:db8:f00::1"));
        assert!(p.contains(ip("2001:db8:f00::ffff:ffff")));
        assert!(!p.contains(ip("2001:db8:f00::1:0:0")));
        // Overlaps: nested, equal, apart, other family.
        assert!(p.overlaps(&v("2001:db8:f00::abcd")));
        assert!(v("2001:db8:f00::abcd").overlaps(&p));
        assert!(p.overlaps(&v("2001:db8:f00::/112")));
        assert!(p.overlaps(&p));
        assert!(!p.overlaps(&v("2001:db8:f00::1:0:0/96")));
        assert!(!v("10.0.0.1").overlaps(&v("::a00:1")));
        assert!("2001:db8::/129".parse::<Vip>().is_err());
    }

    #[test]
    fn port_specs() {
        let r = |lo, hi| PortRange { lo, hi };
        for (text, want) in [
            ("all", Some(PortSpec::All)),
            ("ALL", Some(PortSpec::All)),
            ("80", Some(PortSpec::Ranges(vec![r(80, 80)]))),
            (
                "443,80",
                Some(PortSpec::Ranges(vec![r(80, 80), r(443, 443)])),
            ),
            ("8000-8100", Some(PortSpec::Ranges(vec![r(8000, 8100)]))),
            ("80,81,82-90", Some(PortSpec::Ranges(vec![r(80, 90)]))),
            ("0", None),
            ("65536", None),
            ("90-80", None),
            ("80,", None),
            ("http", None),
        ] {
            assert_eq!(text.parse::<PortSpec>().ok(), want, "{text:?}");
        }
    }

    #[test]
    fn port_spec_intersection() {
        let a: PortSpec = "80,443".parse().unwrap();
        let b: PortSpec = "81-442".parse().unwrap();
        assert!(a.intersection(&b).is_empty());
        let c: PortSpec = "400-500".parse().unwrap();
        assert_eq!(a.intersection(&c), vec![PortRange { lo: 443, hi: 443 }]);
        assert_eq!(PortSpec::All.intersection(&a).len(), 2);
    }

    #[test]
    fn prefixes() {
        let p: Prefix = "10.1.0.0/16".parse().unwrap();
        assert!(p.contains("10.1.200.3".parse().unwrap()));
        assert!(!p.contains("10.2.0.1".parse().unwrap()));
        assert!(!p.contains("fd00::1".parse().unwrap()));
        assert!(!p.has_host_bits());
        assert!("10.1.0.1/16".parse::<Prefix>().unwrap().has_host_bits());
        assert_eq!(
            "10.1.2.3/16"
                .parse::<Prefix>()
                .unwrap()
                .network()
                .to_string(),
            "10.1.0.0/16"
        );
        assert_eq!(
            "fd00::1:2/112"
                .parse::<Prefix>()
                .unwrap()
                .network()
                .to_string(),
            "fd00::1:0/112"
        );
        let z: Prefix = "0.0.0.0/0".parse().unwrap();
        assert_eq!(z.network(), z);
        assert_eq!(z.span(), (0, u128::from(u32::MAX)));
        assert_eq!(
            "10.1.2.3/24".parse::<Prefix>().unwrap().span(),
            (0x0a01_0200, 0x0a01_02ff)
        );
        assert_eq!("::/0".parse::<Prefix>().unwrap().span(), (0, u128::MAX));
        let host6 = 0xfd00_u128 << 112 | 1;
        assert_eq!("fd00::1".parse::<Prefix>().unwrap().span(), (host6, host6));
        assert!(z.contains("1.2.3.4".parse().unwrap()));
        let h: Prefix = "fd00::1".parse().unwrap();
        assert_eq!(h.len, 128);
        assert!("10.0.0.0/33".parse::<Prefix>().is_err());
    }

    #[test]
    fn macs() {
        let m: MacAddr = "02:00:00:0a:0B:ff".parse().unwrap();
        assert_eq!(m.to_string(), "02:00:00:0a:0b:ff");
        assert!("02:00:00:0a:0b".parse::<MacAddr>().is_err());
        assert!("02:00:00:0a:0b:ff:00".parse::<MacAddr>().is_err());
    }
}
