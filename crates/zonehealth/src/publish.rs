//! From what the server holds to what it should hold: the minimal update.
//!
//! The server is the only shared state between redundant zone health
//! services: each reads the name's A and AAAA RRsets and the removed
//! zones' TXT RRset, decides, and sends only the records that differ, with
//! the TXT RRset as read as a prerequisite. Two services that agree send
//! nothing, or the same no-op; a removal recorded by one in between makes
//! the other's update fail (YXRRSET/NXRRSET) and be decided again, so a
//! removed zone is never re-added by a service that had not seen it yet.

use std::collections::BTreeSet;
use std::net::IpAddr;

use dnsupdate::{Name, Op, Prereq, Rdata, Record, rtype};

/// What the server holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerView {
    /// The name's A and AAAA records, with their TTLs.
    pub addrs: Vec<(IpAddr, u32)>,
    /// Zones recorded as removed, as the TXT strings read (raw, for the
    /// prerequisite), and as names.
    pub removed_raw: Vec<Rdata>,
    /// The removed zones' names.
    pub removed: BTreeSet<String>,
}

impl ServerView {
    /// From the records of the three RRsets.
    pub fn from_records(a: &[Record], aaaa: &[Record], txt: &[Record]) -> ServerView {
        let addrs = a
            .iter()
            .chain(aaaa)
            .filter_map(|r| match r.rdata {
                Rdata::A(x) => Some((IpAddr::V4(x), r.ttl)),
                Rdata::Aaaa(x) => Some((IpAddr::V6(x), r.ttl)),
                _ => None,
            })
            .collect();
        let removed_raw: Vec<Rdata> = txt.iter().map(|r| r.rdata.clone()).collect();
        let removed = removed_raw
            .iter()
            .filter_map(|r| match r {
                Rdata::Txt(strings) => Some(
                    strings
                        .iter()
                        .map(|s| String::from_utf8_lossy(s).into_owned())
                        .collect::<String>(),
                ),
                _ => None,
            })
            .collect();
        ServerView {
            addrs,
            removed_raw,
            removed,
        }
    }

    /// The published addresses.
    pub fn published(&self) -> BTreeSet<IpAddr> {
        self.addrs.iter().map(|&(a, _)| a).collect()
    }

    /// The prerequisite that the removed zones are still as read.
    pub fn removed_unchanged(&self, removed_name: &Name) -> Prereq {
        if self.removed_raw.is_empty() {
            Prereq::RrsetAbsent {
                name: removed_name.clone(),
                rtype: rtype::TXT,
            }
        } else {
            Prereq::RrsetIs {
                name: removed_name.clone(),
                rdatas: self.removed_raw.clone(),
            }
        }
    }
}

/// The operations that turn the name's address set from `view` into
/// `want` with `ttl`: additions, deletions, and re-additions of kept
/// records whose TTL differs (an added duplicate replaces the record,
/// RFC 2136 §3.4.2.2).
pub fn address_ops(name: &Name, view: &ServerView, want: &BTreeSet<IpAddr>, ttl: u32) -> Vec<Op> {
    let have = view.published();
    let mut ops: Vec<Op> = view
        .addrs
        .iter()
        .filter(|(a, _)| !want.contains(a))
        .map(|&(a, _)| Op::Delete {
            name: name.clone(),
            rdata: Rdata::addr(a),
        })
        .collect();
    ops.extend(
        want.iter()
            .filter(|a| !have.contains(a) || view.addrs.iter().any(|&(x, t)| x == **a && t != ttl))
            .map(|&a| Op::Add {
                name: name.clone(),
                ttl,
                rdata: Rdata::addr(a),
            }),
    );
    ops
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_what_differs_is_sent() {
        let n = Name::parse("www.lab.test").unwrap();
        let view = ServerView {
            addrs: vec![
                (ip("198.18.10.20"), 60),
                (ip("198.18.10.21"), 60),
                (ip("2001:db8::1"), 30),
            ],
            ..Default::default()
        };
        let want: BTreeSet<IpAddr> =
            [ip("198.18.10.20"), ip("198.18.10.22"), ip("2001:db8::1")].into();
        let ops = address_ops(&n, &view, &want, 60);
        assert_eq!(
            ops,
            [
                Op::Delete {
                    name: n.clone(),
                    rdata: Rdata::addr(ip("198.18.10.21"))
                },
                Op::Add {
                    name: n.clone(),
                    ttl: 60,
                    rdata: Rdata::addr(ip("198.18.10.22"))
                },
                Op::Add {
                    name: n.clone(),
                    ttl: 60,
                    rdata: Rdata::addr(ip("2001:db8::1"))
                },
            ]
        );
        let same = ServerView {
            addrs: vec![(ip("198.18.10.20"), 60)],
            ..Default::default()
        };
        assert!(address_ops(&n, &same, &[ip("198.18.10.20")].into(), 60).is_empty());
    }

    #[test]
    fn the_removed_zones_guard_the_update() {
        let r = Name::parse("_spillway-removed.www.lab.test").unwrap();
        assert!(matches!(
            ServerView::default().removed_unchanged(&r),
            Prereq::RrsetAbsent { .. }
        ));
        let txt = Record {
            name: r.clone(),
            rtype: rtype::TXT,
            class: 1,
            ttl: 60,
            rdata: Rdata::txt("a"),
        };
        let v = ServerView::from_records(&[], &[], &[txt]);
        assert_eq!(v.removed, ["a".to_string()].into());
        assert_eq!(
            v.removed_unchanged(&r),
            Prereq::RrsetIs {
                name: r,
                rdatas: vec![Rdata::txt("a")]
            }
        );
    }
}
