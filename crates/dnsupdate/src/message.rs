//! DNS messages (RFC 1035 §4.1): queries and dynamic updates (RFC 2136)
//! built from [`Record`]s, and any message parsed strictly: every count and
//! length checked against the bytes present, nothing trusted, no panic.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::name::Name;

/// Record types this client reads or writes.
pub mod rtype {
    /// IPv4 address.
    pub const A: u16 = 1;
    /// Start of authority: the zone section of an update names it.
    pub const SOA: u16 = 6;
    /// Text strings: the zone health service's removed zones.
    pub const TXT: u16 = 16;
    /// IPv6 address.
    pub const AAAA: u16 = 28;
    /// Transaction signature (RFC 8945).
    pub const TSIG: u16 = 250;
}

/// Classes (RFC 1035 §3.2.4, RFC 2136 §2.4–2.5).
pub mod class {
    /// Internet.
    pub const IN: u16 = 1;
    /// "None": a prerequisite that an RRset is absent; an update deleting
    /// one RR.
    pub const NONE: u16 = 254;
    /// "Any": deleting a whole RRset; the TSIG record's class.
    pub const ANY: u16 = 255;
}

/// Opcode of a standard query.
pub const OPCODE_QUERY: u8 = 0;
/// Opcode of a dynamic update.
pub const OPCODE_UPDATE: u8 = 5;

/// Header length.
pub const HEADER_LEN: usize = 12;
/// Largest message over TCP (its 16-bit length prefix).
pub const MAX_LEN: usize = 65535;

pub use crate::name::ParseError;

/// A response code, with TSIG's extended codes (RFC 8945 §5.3.2).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Rcode(pub u16);

impl Rcode {
    /// No error.
    pub const NOERROR: Rcode = Rcode(0);
    /// The server could not parse the request.
    pub const FORMERR: Rcode = Rcode(1);
    /// The server failed.
    pub const SERVFAIL: Rcode = Rcode(2);
    /// The name does not exist.
    pub const NXDOMAIN: Rcode = Rcode(3);
    /// Refused by policy.
    pub const REFUSED: Rcode = Rcode(5);
    /// An RRset that should not exist does (a prerequisite failed).
    pub const YXRRSET: Rcode = Rcode(7);
    /// An RRset that should exist does not (a prerequisite failed).
    pub const NXRRSET: Rcode = Rcode(8);
    /// Not authoritative, or the signature was not accepted.
    pub const NOTAUTH: Rcode = Rcode(9);
    /// A name outside the update's zone.
    pub const NOTZONE: Rcode = Rcode(10);
    /// TSIG: the MAC does not verify.
    pub const BADSIG: Rcode = Rcode(16);
    /// TSIG: the key is unknown to the server (or not for this algorithm).
    pub const BADKEY: Rcode = Rcode(17);
    /// TSIG: the clocks differ by more than the fudge.
    pub const BADTIME: Rcode = Rcode(18);

    /// Its mnemonic.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "NOERROR",
            1 => "FORMERR",
            2 => "SERVFAIL",
            3 => "NXDOMAIN",
            4 => "NOTIMP",
            5 => "REFUSED",
            6 => "YXDOMAIN",
            7 => "YXRRSET",
            8 => "NXRRSET",
            9 => "NOTAUTH",
            10 => "NOTZONE",
            16 => "BADSIG",
            17 => "BADKEY",
            18 => "BADTIME",
            22 => "BADTRUNC",
            _ => "unknown",
        }
    }
}

impl fmt::Display for Rcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

impl fmt::Debug for Rcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Record data.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rdata {
    /// An A record's address.
    A(Ipv4Addr),
    /// An AAAA record's address.
    Aaaa(Ipv6Addr),
    /// A TXT record's character strings (each at most 255 bytes).
    Txt(Vec<Vec<u8>>),
    /// Anything else, as it was on the wire (names in it may be compressed:
    /// never interpreted); empty in deletions and absence prerequisites.
    Other(Vec<u8>),
}

impl Rdata {
    /// An address record.
    pub fn addr(a: std::net::IpAddr) -> Rdata {
        match a {
            std::net::IpAddr::V4(v4) => Rdata::A(v4),
            std::net::IpAddr::V6(v6) => Rdata::Aaaa(v6),
        }
    }

    /// A TXT record of one string (cut at 255 bytes).
    pub fn txt(s: &str) -> Rdata {
        let b = s.as_bytes();
        Rdata::Txt(vec![b[..b.len().min(255)].to_vec()])
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Rdata::A(a) => out.extend(a.octets()),
            Rdata::Aaaa(a) => out.extend(a.octets()),
            Rdata::Txt(strings) => {
                for s in strings {
                    let s = &s[..s.len().min(255)];
                    out.push(u8::try_from(s.len()).unwrap_or(u8::MAX));
                    out.extend(s);
                }
            }
            Rdata::Other(b) => out.extend(b),
        }
    }

    fn parse(rtype: u16, b: &[u8]) -> Result<Rdata, ParseError> {
        // Deletions and prerequisites carry no data whatever their type.
        if b.is_empty() && rtype != rtype::TXT {
            return Ok(Rdata::Other(Vec::new()));
        }
        Ok(match rtype {
            rtype::A => Rdata::A(Ipv4Addr::from(
                <[u8; 4]>::try_from(b).map_err(|_| ParseError::BadRdata)?,
            )),
            rtype::AAAA => Rdata::Aaaa(Ipv6Addr::from(
                <[u8; 16]>::try_from(b).map_err(|_| ParseError::BadRdata)?,
            )),
            rtype::TXT => {
                let mut strings = Vec::new();
                let mut i = 0;
                while let Some(&len) = b.get(i) {
                    let s = b
                        .get(i + 1..i + 1 + usize::from(len))
                        .ok_or(ParseError::BadRdata)?;
                    strings.push(s.to_vec());
                    i += 1 + usize::from(len);
                }
                if strings.is_empty() {
                    // A TXT record holds at least one string (RFC 1035 §3.3.14).
                    return Ok(Rdata::Other(Vec::new()));
                }
                Rdata::Txt(strings)
            }
            _ => Rdata::Other(b.to_vec()),
        })
    }
}

/// A resource record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Owner name.
    pub name: Name,
    /// Type.
    pub rtype: u16,
    /// Class.
    pub class: u16,
    /// Time to live, seconds.
    pub ttl: u32,
    /// Data.
    pub rdata: Rdata,
}

impl Record {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend(self.name.wire());
        out.extend(self.rtype.to_be_bytes());
        out.extend(self.class.to_be_bytes());
        out.extend(self.ttl.to_be_bytes());
        let at = out.len();
        out.extend([0, 0]);
        self.rdata.encode(out);
        let len = u16::try_from(out.len() - at - 2).unwrap_or(u16::MAX);
        out[at..at + 2].copy_from_slice(&len.to_be_bytes());
    }
}

/// A question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    /// Name asked for (in an update: the zone).
    pub name: Name,
    /// Type (in an update: SOA).
    pub qtype: u16,
    /// Class.
    pub qclass: u16,
}

/// A TSIG record's data (RFC 8945 §4.2), and where the record starts in
/// the message it was parsed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TsigRecord {
    /// Offset of the record (its owner name) in the message.
    pub offset: usize,
    /// Key name (the owner).
    pub key: Name,
    /// Algorithm name.
    pub algorithm: Name,
    /// Seconds since the epoch when it was signed (48 bits).
    pub time_signed: u64,
    /// Seconds of clock difference allowed.
    pub fudge: u16,
    /// The MAC.
    pub mac: Vec<u8>,
    /// The message ID when it was signed.
    pub original_id: u16,
    /// TSIG error (an extended rcode: BADSIG, BADKEY, BADTIME).
    pub error: u16,
    /// Other data (the server's time with BADTIME).
    pub other: Vec<u8>,
}

/// A DNS message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// ID.
    pub id: u16,
    /// Flags: QR, opcode, AA, TC, RD, RA, Z, AD, CD and the rcode's low 4 bits.
    pub flags: u16,
    /// Question (in an update: the zone section).
    pub questions: Vec<Question>,
    /// Answer (update: prerequisites).
    pub answers: Vec<Record>,
    /// Authority (update: the updates).
    pub authority: Vec<Record>,
    /// Additional, without the TSIG record.
    pub additional: Vec<Record>,
    /// The TSIG record, if the message was signed.
    pub tsig: Option<TsigRecord>,
}

/// A change an update makes (RFC 2136 §2.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Add an RR (a no-op if it is there; sets the RRset's TTL).
    Add {
        /// Owner.
        name: Name,
        /// TTL.
        ttl: u32,
        /// Data (its type too).
        rdata: Rdata,
    },
    /// Delete one RR (a no-op if it is not there).
    Delete {
        /// Owner.
        name: Name,
        /// Data (its type too).
        rdata: Rdata,
    },
}

/// A condition the server checks before it applies an update (RFC 2136
/// §2.4): unmet, nothing changes and the answer says YXRRSET / NXRRSET.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prereq {
    /// The RRset of this type exists and holds exactly these RRs (any TTL).
    RrsetIs {
        /// Owner.
        name: Name,
        /// The RRs (all of one type, at least one).
        rdatas: Vec<Rdata>,
    },
    /// No RRset of this type exists at the name.
    RrsetAbsent {
        /// Owner.
        name: Name,
        /// Type.
        rtype: u16,
    },
}

/// The record type of `rdata` (`Other` has none of its own).
fn type_of(rdata: &Rdata) -> u16 {
    match rdata {
        Rdata::A(_) => rtype::A,
        Rdata::Aaaa(_) => rtype::AAAA,
        Rdata::Txt(_) | Rdata::Other(_) => rtype::TXT,
    }
}

impl Message {
    /// A query for `name`'s RRset of `qtype` (no recursion asked).
    pub fn query(id: u16, name: &Name, qtype: u16) -> Message {
        Message {
            id,
            flags: u16::from(OPCODE_QUERY) << 11,
            questions: vec![Question {
                name: name.clone(),
                qtype,
                qclass: class::IN,
            }],
            answers: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
            tsig: None,
        }
    }

    /// An update of `zone`: `prereqs` checked, then `ops` applied, all or
    /// nothing (RFC 2136 §3).
    pub fn update(id: u16, zone: &Name, prereqs: &[Prereq], ops: &[Op]) -> Message {
        let mut answers = Vec::new();
        for p in prereqs {
            match p {
                Prereq::RrsetIs { name, rdatas } => {
                    answers.extend(rdatas.iter().map(|r| Record {
                        name: name.clone(),
                        rtype: type_of(r),
                        class: class::IN,
                        ttl: 0,
                        rdata: r.clone(),
                    }));
                }
                Prereq::RrsetAbsent { name, rtype } => answers.push(Record {
                    name: name.clone(),
                    rtype: *rtype,
                    class: class::NONE,
                    ttl: 0,
                    rdata: Rdata::Other(Vec::new()),
                }),
            }
        }
        let authority = ops
            .iter()
            .map(|op| match op {
                Op::Add { name, ttl, rdata } => Record {
                    name: name.clone(),
                    rtype: type_of(rdata),
                    class: class::IN,
                    ttl: *ttl,
                    rdata: rdata.clone(),
                },
                Op::Delete { name, rdata } => Record {
                    name: name.clone(),
                    rtype: type_of(rdata),
                    class: class::NONE,
                    ttl: 0,
                    rdata: rdata.clone(),
                },
            })
            .collect();
        Message {
            id,
            flags: u16::from(OPCODE_UPDATE) << 11,
            questions: vec![Question {
                name: zone.clone(),
                qtype: rtype::SOA,
                qclass: class::IN,
            }],
            answers,
            authority,
            additional: Vec::new(),
            tsig: None,
        }
    }

    /// Whether it is a response.
    pub fn is_response(&self) -> bool {
        self.flags & 0x8000 != 0
    }

    /// Its opcode.
    pub fn opcode(&self) -> u8 {
        u8::try_from((self.flags >> 11) & 0xf).unwrap_or(0)
    }

    /// Its response code: the header's, or the TSIG record's error when
    /// there is one (BADSIG, BADKEY, BADTIME come with NOTAUTH).
    pub fn rcode(&self) -> Rcode {
        match &self.tsig {
            Some(t) if t.error != 0 => Rcode(t.error),
            _ => Rcode(self.flags & 0xf),
        }
    }

    /// The wire form, without any TSIG record (signing appends it).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        out.extend(self.id.to_be_bytes());
        out.extend(self.flags.to_be_bytes());
        for n in [
            self.questions.len(),
            self.answers.len(),
            self.authority.len(),
            self.additional.len(),
        ] {
            out.extend(u16::try_from(n).unwrap_or(u16::MAX).to_be_bytes());
        }
        for q in &self.questions {
            out.extend(q.name.wire());
            out.extend(q.qtype.to_be_bytes());
            out.extend(q.qclass.to_be_bytes());
        }
        for r in self
            .answers
            .iter()
            .chain(&self.authority)
            .chain(&self.additional)
        {
            r.encode(&mut out);
        }
        out
    }

    /// Parses a whole message. A TSIG record must be the last record (RFC
    /// 8945 §5.1); it is returned apart, with its offset, for verification.
    pub fn parse(b: &[u8]) -> Result<Message, ParseError> {
        let hdr = b.get(..HEADER_LEN).ok_or(ParseError::Truncated)?;
        let word = |i: usize| u16::from_be_bytes([hdr[i], hdr[i + 1]]);
        let (id, flags) = (word(0), word(2));
        let counts = [word(4), word(6), word(8), word(10)];
        let mut pos = HEADER_LEN;
        let mut questions = Vec::new();
        for _ in 0..counts[0] {
            let (name, after) = Name::decode(b, pos)?;
            let f = b.get(after..after + 4).ok_or(ParseError::Truncated)?;
            questions.push(Question {
                name,
                qtype: u16::from_be_bytes([f[0], f[1]]),
                qclass: u16::from_be_bytes([f[2], f[3]]),
            });
            pos = after + 4;
        }
        let mut sections: [Vec<Record>; 3] = Default::default();
        let mut tsig = None;
        let total: usize = counts[1..].iter().map(|&c| usize::from(c)).sum();
        let mut seen = 0;
        for (s, &count) in counts[1..].iter().enumerate() {
            for _ in 0..count {
                seen += 1;
                let start = pos;
                let (name, after) = Name::decode(b, pos)?;
                let f = b.get(after..after + 10).ok_or(ParseError::Truncated)?;
                let rtype = u16::from_be_bytes([f[0], f[1]]);
                let class = u16::from_be_bytes([f[2], f[3]]);
                let ttl = u32::from_be_bytes([f[4], f[5], f[6], f[7]]);
                let len = usize::from(u16::from_be_bytes([f[8], f[9]]));
                let data = b
                    .get(after + 10..after + 10 + len)
                    .ok_or(ParseError::Truncated)?;
                pos = after + 10 + len;
                if rtype == rtype::TSIG {
                    if s != 2 || seen != total || tsig.is_some() {
                        return Err(ParseError::MisplacedTsig);
                    }
                    tsig = Some(parse_tsig(start, name, data)?);
                    continue;
                }
                sections[s].push(Record {
                    name,
                    rtype,
                    class,
                    ttl,
                    rdata: Rdata::parse(rtype, data)?,
                });
            }
        }
        if pos != b.len() {
            return Err(ParseError::Trailing);
        }
        let [answers, authority, additional] = sections;
        Ok(Message {
            id,
            flags,
            questions,
            answers,
            authority,
            additional,
            tsig,
        })
    }
}

/// The data of the TSIG record at `offset`, owned by `key`.
fn parse_tsig(offset: usize, key: Name, data: &[u8]) -> Result<TsigRecord, ParseError> {
    // The algorithm name is never compressed (RFC 8945 §4.2): decoding it
    // within `data` alone enforces that.
    let (algorithm, after) = Name::decode(data, 0).map_err(|_| ParseError::BadRdata)?;
    let rest = data.get(after..).ok_or(ParseError::BadRdata)?;
    let fixed = rest.get(..10).ok_or(ParseError::BadRdata)?;
    let time_signed = u64::from_be_bytes([
        0, 0, fixed[0], fixed[1], fixed[2], fixed[3], fixed[4], fixed[5],
    ]);
    let fudge = u16::from_be_bytes([fixed[6], fixed[7]]);
    let mac_len = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
    let mac = rest.get(10..10 + mac_len).ok_or(ParseError::BadRdata)?;
    let tail = rest.get(10 + mac_len..).ok_or(ParseError::BadRdata)?;
    let t = tail.get(..6).ok_or(ParseError::BadRdata)?;
    let original_id = u16::from_be_bytes([t[0], t[1]]);
    let error = u16::from_be_bytes([t[2], t[3]]);
    let other_len = usize::from(u16::from_be_bytes([t[4], t[5]]));
    let other = tail.get(6..).ok_or(ParseError::BadRdata)?;
    if other.len() != other_len {
        return Err(ParseError::BadRdata);
    }
    Ok(TsigRecord {
        offset,
        key,
        algorithm,
        time_signed,
        fudge,
        mac: mac.to_vec(),
        original_id,
        error,
        other: other.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn n(s: &str) -> Name {
        Name::parse(s).unwrap()
    }

    #[test]
    fn an_update_in_rfc_2136_form() {
        let m = Message::update(
            7,
            &n("lab.test"),
            &[Prereq::RrsetAbsent {
                name: n("_r.www.lab.test"),
                rtype: rtype::TXT,
            }],
            &[
                Op::Add {
                    name: n("www.lab.test"),
                    ttl: 60,
                    rdata: Rdata::A(Ipv4Addr::new(198, 18, 10, 20)),
                },
                Op::Delete {
                    name: n("www.lab.test"),
                    rdata: Rdata::A(Ipv4Addr::new(198, 18, 10, 21)),
                },
            ],
        );
        let b = m.encode();
        // Header: id 7, opcode 5, ZO 1, PR 1, UP 2, AD 0.
        assert_eq!(&b[..12], &[0, 7, 0x28, 0, 0, 1, 0, 1, 0, 2, 0, 0]);
        let p = Message::parse(&b).unwrap();
        assert_eq!(p, m);
        assert_eq!(p.opcode(), OPCODE_UPDATE);
        // Absence: class NONE, TTL 0, no data; deletion: class NONE, TTL 0.
        assert_eq!(
            (p.answers[0].class, p.answers[0].rdata.clone()),
            (class::NONE, Rdata::Other(vec![]))
        );
        assert_eq!((p.authority[1].class, p.authority[1].ttl), (class::NONE, 0));
    }

    #[test]
    fn strict_parsing() {
        let q = Message::query(1, &n("www.lab.test"), rtype::A).encode();
        assert!(Message::parse(&q).is_ok());
        assert_eq!(
            Message::parse(&q[..q.len() - 1]),
            Err(ParseError::Truncated)
        );
        let mut long = q.clone();
        long.push(0);
        assert_eq!(Message::parse(&long), Err(ParseError::Trailing));
        // An A record of 3 bytes.
        let mut m = Message::query(1, &n("x"), rtype::A);
        m.answers.push(Record {
            name: n("x"),
            rtype: rtype::A,
            class: class::IN,
            ttl: 1,
            rdata: Rdata::Other(vec![1, 2, 3]),
        });
        assert_eq!(Message::parse(&m.encode()), Err(ParseError::BadRdata));
        // Counts larger than the records present.
        let mut lie = q.clone();
        lie[7] = 9;
        assert_eq!(Message::parse(&lie), Err(ParseError::Truncated));
    }
}
