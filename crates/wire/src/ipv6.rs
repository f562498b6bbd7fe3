//! IPv6 (RFC 8200) and a bounded walk over its extension headers.

use core::net::Ipv6Addr;

use crate::error::ParseError;
use crate::ip::proto;
use crate::{arr, need, rd16, rd32, wr16, wr32};

mod field {
    pub const VER_TC_FL: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
    pub const HEADER: usize = 40;
}

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = field::HEADER;
/// Most extension headers [`walk_extensions`] follows before giving up.
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// A view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }
    /// Wraps a buffer after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the version and that the payload length fits the buffer (which may be longer).
    /// Jumbograms (payload length 0 with a jumbo option) are not supported.
    pub fn check_len(&self) -> Result<(), ParseError> {
        self.check_header_len()?;
        need(
            self.buffer.as_ref(),
            field::HEADER + usize::from(self.payload_len()),
        )
    }
    /// Checks only the version and the fixed header (for packets quoted in ICMPv6 errors).
    pub fn check_header_len(&self) -> Result<(), ParseError> {
        need(self.buffer.as_ref(), field::HEADER)?;
        if self.version() != 6 {
            return Err(ParseError::BadVersion);
        }
        Ok(())
    }
    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Version (6).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FL] >> 4
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        ((rd32(self.buffer.as_ref(), field::VER_TC_FL) >> 20) & 0xff) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        rd32(self.buffer.as_ref(), field::VER_TC_FL) & 0x000f_ffff
    }
    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }
    /// First next-header value.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.src_bytes())
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.dst_bytes())
    }
    /// Source address bytes.
    pub fn src_bytes(&self) -> [u8; 16] {
        arr(self.buffer.as_ref(), field::SRC)
    }
    /// Destination address bytes.
    pub fn dst_bytes(&self) -> [u8; 16] {
        arr(self.buffer.as_ref(), field::DST)
    }
    /// The payload (extension headers included), up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::HEADER..field::HEADER + usize::from(self.payload_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 6, traffic class and flow label.
    pub fn set_ver_tc_fl(&mut self, tc: u8, flow_label: u32) {
        let v = (6u32 << 28) | (u32::from(tc) << 20) | (flow_label & 0x000f_ffff);
        wr32(self.buffer.as_mut(), field::VER_TC_FL, v);
    }
    /// Sets the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::PAYLOAD_LEN, v);
    }
    /// Sets the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }
    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
    /// Sets the source address.
    pub fn set_src(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC..field::SRC + 16].copy_from_slice(&a.octets());
    }
    /// Sets the destination address.
    pub fn set_dst(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST..field::DST + 16].copy_from_slice(&a.octets());
    }
    /// Swaps source and destination (transport checksums are unaffected).
    pub fn swap_addrs(&mut self) {
        let b = self.buffer.as_mut();
        let (s, d) = (arr::<16>(b, field::SRC), arr::<16>(b, field::DST));
        b[field::SRC..field::SRC + 16].copy_from_slice(&d);
        b[field::DST..field::DST + 16].copy_from_slice(&s);
    }
    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = field::HEADER + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[field::HEADER..end]
    }
}

/// A parsed fixed IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// First next header.
    pub next_header: u8,
    /// Payload length (extension headers included).
    pub payload_len: u16,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// Parses a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, ParseError> {
        p.check_len()?;
        Ok(Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.next_header(),
            payload_len: p.payload_len(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        })
    }
    /// Header length (40).
    pub const fn header_len(&self) -> usize {
        field::HEADER
    }
    /// Writes the fixed header into the first 40 bytes of the buffer.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), ParseError> {
        need(p.buffer.as_ref(), field::HEADER)?;
        if self.flow_label > 0x000f_ffff {
            return Err(ParseError::BadFlags);
        }
        p.set_ver_tc_fl(self.traffic_class, self.flow_label);
        p.set_payload_len(self.payload_len);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src(self.src);
        p.set_dst(self.dst);
        Ok(())
    }
}

/// Whether `nh` is an extension header that [`walk_extensions`] steps over.
pub const fn is_extension(nh: u8) -> bool {
    matches!(
        nh,
        proto::HOPOPT | proto::IPV6_ROUTE | proto::IPV6_FRAG | proto::IPV6_OPTS | proto::AH
    )
}

/// A parsed IPv6 fragment header (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragmentRepr {
    /// Next header after the fragment header.
    pub next_header: u8,
    /// Fragment offset in bytes (multiple of 8).
    pub offset: u16,
    /// More-fragments flag.
    pub more_frags: bool,
    /// Identification.
    pub ident: u32,
}

/// Length of the IPv6 fragment header.
pub const FRAGMENT_HEADER_LEN: usize = 8;

impl FragmentRepr {
    /// Parses a fragment header from the start of `b`.
    pub fn parse(b: &[u8]) -> Result<Self, ParseError> {
        need(b, FRAGMENT_HEADER_LEN)?;
        let off_m = rd16(b, 2);
        Ok(FragmentRepr {
            next_header: b[0],
            offset: off_m & 0xfff8,
            more_frags: off_m & 1 != 0,
            ident: rd32(b, 4),
        })
    }
    /// Writes the header into the first 8 bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), ParseError> {
        need(b, FRAGMENT_HEADER_LEN)?;
        if self.offset % 8 != 0 {
            return Err(ParseError::BadLength);
        }
        b[0] = self.next_header;
        b[1] = 0;
        wr16(b, 2, self.offset | u16::from(self.more_frags));
        wr32(b, 4, self.ident);
        Ok(())
    }
    /// Whether this is the first fragment (offset 0).
    pub const fn is_first(&self) -> bool {
        self.offset == 0
    }

    /// Whether this is an atomic fragment (offset 0, no more fragments:
    /// RFC 6946): the packet is whole and carries its upper-layer header.
    pub const fn is_atomic(&self) -> bool {
        self.offset == 0 && !self.more_frags
    }
}

/// A generic options/routing extension header: next header and length in 8-octet units
/// beyond the first (its body is opaque; emit fills it with Pad1 options, i.e. zeros).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtHeaderRepr {
    /// Next header.
    pub next_header: u8,
    /// Header length in 8-octet units, not counting the first 8 octets.
    pub len_units: u8,
}

impl ExtHeaderRepr {
    /// Parses a hop-by-hop, routing or destination-options header.
    pub fn parse(b: &[u8]) -> Result<Self, ParseError> {
        need(b, 2)?;
        let r = ExtHeaderRepr {
            next_header: b[0],
            len_units: b[1],
        };
        need(b, r.header_len())?;
        Ok(r)
    }
    /// Length in bytes.
    pub const fn header_len(&self) -> usize {
        (self.len_units as usize + 1) * 8
    }
    /// Writes the header, zero-filling its body.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), ParseError> {
        let n = self.header_len();
        need(b, n)?;
        b[0] = self.next_header;
        b[1] = self.len_units;
        b[2..n].fill(0);
        Ok(())
    }
}

/// Routing types (RFC 8200 §4.4; IANA "Routing Types").
pub mod routing {
    /// Type 0, the source route deprecated by RFC 5095.
    pub const TYPE0: u8 = 0;
    /// The Segment Routing Header (RFC 8754).
    pub const SRH: u8 = 4;
}

/// The fixed part of a routing header (RFC 8200 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoutingRepr {
    /// Routing type ([`routing`]).
    pub routing_type: u8,
    /// Segments left: route segments still to visit before the final destination.
    pub segments_left: u8,
    /// Offset of the routing header from the start of the IPv6 payload.
    pub offset: usize,
    /// Its length in bytes.
    pub len: usize,
}

/// The segments a Segment Routing Header (RFC 8754 §2) still sends its packet to: Segment
/// List\[Segments Left - 1\] down to Segment List\[0\] (the current destination address is
/// the active segment). `srh` is the whole routing header. A header too short for its Last
/// Entry, or whose Segments Left exceeds Last Entry + 1 (RFC 8754 §4.3.1.1), is an error.
pub fn srh_segments_left(srh: &[u8]) -> Result<impl Iterator<Item = [u8; 16]> + '_, ParseError> {
    // `parse` checks that the whole header, 8 bytes at least, is there.
    let e = ExtHeaderRepr::parse(srh)?;
    if srh[2] != routing::SRH {
        return Err(ParseError::Unsupported);
    }
    let (left, entries) = (usize::from(srh[3]), usize::from(srh[4]) + 1);
    if left > entries || 8 + 16 * entries > e.header_len() {
        return Err(ParseError::BadOption);
    }
    let list = srh.get(8..8 + 16 * left).ok_or(ParseError::Truncated)?;
    Ok(list.chunks_exact(16).map(|c| arr::<16>(c, 0)))
}

/// Result of walking the extension-header chain of an IPv6 payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtWalk {
    /// The upper-layer protocol (the first next-header that is not an extension header).
    pub upper: u8,
    /// Offset of the upper-layer header from the start of the IPv6 payload.
    pub offset: usize,
    /// The fragment header, if one was found.
    pub fragment: Option<FragmentRepr>,
    /// The routing header, if one was found (a second one is an error, RFC 8200 §4.1).
    pub routing: Option<RoutingRepr>,
    /// Number of extension headers stepped over.
    pub count: u8,
}

/// Walks hop-by-hop, routing, fragment, destination-options (and AH) headers starting at
/// `payload` (the bytes after the fixed header) with first next-header `nh`.
///
/// Stops at the first non-extension header, or at a non-first fragment (whose upper-layer
/// header is not in this packet: `upper` is then the fragment's next header and `offset`
/// points after the fragment header). At most [`MAX_EXTENSION_HEADERS`] are followed.
pub fn walk_extensions(payload: &[u8], mut nh: u8) -> Result<ExtWalk, ParseError> {
    let mut off = 0usize;
    let mut fragment = None;
    let mut routing = None;
    let mut count = 0u8;
    while is_extension(nh) {
        if usize::from(count) == MAX_EXTENSION_HEADERS {
            return Err(ParseError::TooManyHeaders);
        }
        let rest = payload.get(off..).ok_or(ParseError::Truncated)?;
        count += 1;
        match nh {
            proto::IPV6_FRAG => {
                if fragment.is_some() {
                    return Err(ParseError::BadOption);
                }
                let f = FragmentRepr::parse(rest)?;
                fragment = Some(f);
                off += FRAGMENT_HEADER_LEN;
                nh = f.next_header;
                if !f.is_first() {
                    break;
                }
            }
            proto::AH => {
                // RFC 4302: length in 4-octet units minus 2.
                need(rest, 2)?;
                let len = (usize::from(rest[1]) + 2) * 4;
                need(rest, len)?;
                nh = rest[0];
                off += len;
            }
            _ => {
                let e = ExtHeaderRepr::parse(rest)?;
                if nh == proto::IPV6_ROUTE {
                    // The fixed part is in the 8 bytes `parse` checked.
                    if routing.is_some() || rest.len() < 4 {
                        return Err(ParseError::BadOption);
                    }
                    routing = Some(RoutingRepr {
                        routing_type: rest[2],
                        segments_left: rest[3],
                        offset: off,
                        len: e.header_len(),
                    });
                }
                nh = e.next_header;
                off += e.header_len();
            }
        }
    }
    Ok(ExtWalk {
        upper: nh,
        offset: off,
        fragment,
        routing,
        count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_stops_at_non_first_fragment() {
        let mut b = [0u8; 24];
        ExtHeaderRepr {
            next_header: proto::IPV6_FRAG,
            len_units: 0,
        }
        .emit(&mut b)
        .unwrap();
        FragmentRepr {
            next_header: proto::HOPOPT,
            offset: 8,
            more_frags: false,
            ident: 7,
        }
        .emit(&mut b[8..])
        .unwrap();
        let w = walk_extensions(&b, proto::HOPOPT).unwrap();
        assert_eq!(w.upper, proto::HOPOPT);
        assert_eq!(w.offset, 16);
        assert_eq!(w.count, 2);
        assert_eq!(w.fragment.unwrap().ident, 7);
    }

    /// A routing header of `routing_type` with `left` segments left and the segment list
    /// `segments` (Last Entry = its length - 1), then TCP.
    fn routing_header(routing_type: u8, left: u8, segments: &[[u8; 16]]) -> Vec<u8> {
        let len_units = u8::try_from(segments.len() * 2).unwrap();
        let mut b = vec![proto::TCP, len_units, routing_type, left];
        b.push(u8::try_from(segments.len().max(1) - 1).unwrap());
        b.extend([0, 0, 0]);
        for s in segments {
            b.extend(s);
        }
        b
    }

    #[test]
    fn walk_reports_the_routing_header() {
        let seg = |i: u8| [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, i];
        let mut b = vec![proto::IPV6_ROUTE, 0, 1, 4, 0, 0, 0, 0];
        b.extend(routing_header(routing::SRH, 2, &[seg(1), seg(2), seg(3)]));
        let w = walk_extensions(&b, proto::IPV6_OPTS).unwrap();
        let r = w.routing.unwrap();
        assert_eq!((w.upper, w.offset, w.count), (proto::TCP, 8 + 56, 2));
        assert_eq!(
            (r.routing_type, r.segments_left, r.offset, r.len),
            (4, 2, 8, 56)
        );
        let left: Vec<[u8; 16]> = srh_segments_left(&b[r.offset..r.offset + r.len])
            .unwrap()
            .collect();
        assert_eq!(left, vec![seg(1), seg(2)]);
        // No routing header, no routing facts.
        let w = walk_extensions(&b[..8], proto::IPV6_OPTS);
        assert!(w.is_err(), "next header says routing, none follows");
        // Two routing headers.
        let mut two = routing_header(routing::TYPE0, 1, &[seg(1)]);
        two[0] = proto::IPV6_ROUTE;
        two.extend(routing_header(routing::SRH, 0, &[seg(1)]));
        assert_eq!(
            walk_extensions(&two, proto::IPV6_ROUTE),
            Err(ParseError::BadOption)
        );
    }

    #[test]
    fn srh_segments_left_is_checked() {
        let seg = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
        let h = routing_header(routing::SRH, 0, &[seg]);
        assert_eq!(srh_segments_left(&h).unwrap().count(), 0);
        let h = routing_header(routing::SRH, 1, &[seg]);
        assert_eq!(
            srh_segments_left(&h).unwrap().collect::<Vec<_>>(),
            vec![seg]
        );
        // More segments left than listed.
        let h = routing_header(routing::SRH, 2, &[seg]);
        assert!(matches!(srh_segments_left(&h), Err(ParseError::BadOption)));
        // A Last Entry beyond the header's length.
        let mut h = routing_header(routing::SRH, 1, &[seg]);
        h[4] = 1;
        assert!(matches!(srh_segments_left(&h), Err(ParseError::BadOption)));
        // Not an SRH, or cut short.
        let h = routing_header(routing::TYPE0, 1, &[seg]);
        assert!(matches!(
            srh_segments_left(&h),
            Err(ParseError::Unsupported)
        ));
        let h = routing_header(routing::SRH, 1, &[seg]);
        assert!(matches!(
            srh_segments_left(&h[..20]),
            Err(ParseError::Truncated)
        ));
    }

    #[test]
    fn walk_is_bounded_and_checked() {
        // A chain of 9 destination-options headers.
        let mut b = [0u8; 80];
        for i in 0..10 {
            b[i * 8] = proto::IPV6_OPTS;
        }
        assert_eq!(
            walk_extensions(&b, proto::IPV6_OPTS),
            Err(ParseError::TooManyHeaders)
        );
        assert_eq!(
            walk_extensions(&b[..20], proto::IPV6_OPTS),
            Err(ParseError::Truncated)
        );
        let w = walk_extensions(&b, proto::TCP).unwrap();
        assert_eq!((w.upper, w.offset, w.count), (proto::TCP, 0, 0));
    }
}
