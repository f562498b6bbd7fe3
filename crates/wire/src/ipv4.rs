//! IPv4 (RFC 791) with options and fragmentation fields.

use core::net::Ipv4Addr;

use crate::checksum;
use crate::error::ParseError;
use crate::{arr, need, rd16, wr16};

mod field {
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
    pub const MIN_HEADER: usize = 20;
}

/// Length of an IPv4 header without options.
pub const MIN_HEADER_LEN: usize = field::MIN_HEADER;
/// Longest IPv4 options field.
pub const MAX_OPTIONS_LEN: usize = 40;

/// A view of an IPv4 packet.
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
    /// Checks version, that the header (with options) fits, and that the total length is
    /// consistent with the header and the buffer. The buffer may be longer (link padding).
    pub fn check_len(&self) -> Result<(), ParseError> {
        let b = self.buffer.as_ref();
        need(b, field::MIN_HEADER)?;
        if self.version() != 4 {
            return Err(ParseError::BadVersion);
        }
        let hl = self.header_len();
        if hl < field::MIN_HEADER {
            return Err(ParseError::BadHeaderLength);
        }
        need(b, hl)?;
        let tl = usize::from(self.total_len());
        if tl < hl {
            return Err(ParseError::BadLength);
        }
        need(b, tl)
    }
    /// Checks only that the header (with options) is present: for packets quoted in ICMP
    /// errors, whose payload is cut short.
    pub fn check_header_len(&self) -> Result<(), ParseError> {
        let b = self.buffer.as_ref();
        need(b, field::MIN_HEADER)?;
        if self.version() != 4 {
            return Err(ParseError::BadVersion);
        }
        let hl = self.header_len();
        if hl < field::MIN_HEADER {
            return Err(ParseError::BadHeaderLength);
        }
        need(b, hl)
    }
    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Version (4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }
    /// DSCP and ECN byte.
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }
    /// Total length.
    pub fn total_len(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::IDENT)
    }
    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        rd16(self.buffer.as_ref(), field::FLG_OFF) & 0x4000 != 0
    }
    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        rd16(self.buffer.as_ref(), field::FLG_OFF) & 0x2000 != 0
    }
    /// Reserved (evil) flag bit.
    pub fn reserved_flag(&self) -> bool {
        rd16(self.buffer.as_ref(), field::FLG_OFF) & 0x8000 != 0
    }
    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (rd16(self.buffer.as_ref(), field::FLG_OFF) & 0x1fff) << 3
    }
    /// Whether this packet is a fragment (MF set or non-zero offset).
    pub fn is_fragment(&self) -> bool {
        rd16(self.buffer.as_ref(), field::FLG_OFF) & 0x3fff != 0
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    /// Header checksum.
    pub fn checksum(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.src_bytes())
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.dst_bytes())
    }
    /// Source address bytes.
    pub fn src_bytes(&self) -> [u8; 4] {
        arr(self.buffer.as_ref(), field::SRC)
    }
    /// Destination address bytes.
    pub fn dst_bytes(&self) -> [u8; 4] {
        arr(self.buffer.as_ref(), field::DST)
    }
    /// The options bytes.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::MIN_HEADER..self.header_len()]
    }
    /// Whether the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::add(0, &self.buffer.as_ref()[..self.header_len()])) == 0xffff
    }
    /// The payload (up to the total length).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 4 and the header length in bytes (multiple of 4, 20–60).
    pub fn set_version_and_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | crate::cast::len8((len / 4) & 0x0f);
    }
    /// Sets the DSCP/ECN byte.
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = v;
    }
    /// Sets the total length.
    pub fn set_total_len(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::LENGTH, v);
    }
    /// Sets the identification.
    pub fn set_ident(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::IDENT, v);
    }
    /// Sets flags and fragment offset (offset in bytes, multiple of 8).
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let v = (u16::from(dont_frag) << 14) | (u16::from(more_frags) << 13) | (offset >> 3);
        wr16(self.buffer.as_mut(), field::FLG_OFF, v);
    }
    /// Sets the TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }
    /// Sets the protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Sets the source address.
    pub fn set_src(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC..field::SRC + 4].copy_from_slice(&a.octets());
    }
    /// Sets the destination address.
    pub fn set_dst(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST..field::DST + 4].copy_from_slice(&a.octets());
    }
    /// Computes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = checksum::checksum(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }
    /// Sets the TTL and updates the checksum incrementally (RFC 1624).
    pub fn set_ttl_incremental(&mut self, ttl: u8) {
        let b = self.buffer.as_ref();
        let old = rd16(b, field::TTL);
        let new = (u16::from(ttl) << 8) | u16::from(b[field::PROTOCOL]);
        let c = checksum::update16(self.checksum(), old, new);
        self.set_ttl(ttl);
        self.set_checksum(c);
    }
    /// Swaps source and destination. The header checksum is unchanged (the one's complement
    /// sum is commutative), so it is left as is.
    pub fn swap_addrs(&mut self) {
        let b = self.buffer.as_mut();
        let (s, d) = (arr::<4>(b, field::SRC), arr::<4>(b, field::DST));
        b[field::SRC..field::SRC + 4].copy_from_slice(&d);
        b[field::DST..field::DST + 4].copy_from_slice(&s);
    }
    /// The options bytes, writable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[field::MIN_HEADER..hl]
    }
    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, tl) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[hl..tl]
    }
}

/// The sum of the 20-byte header `h` of an IPv4 packet without options, for
/// [`ChecksumTest`]: three loads and three additions (five instructions), where the
/// checksum's definition has ten 16-bit additions and a fold. Modulo 0xffff every power of
/// 2^16 is 1, so the sum of the header's ten 16-bit words is congruent to the sum of any
/// wider words over the same bytes, in either byte order (RFC 1071 §2): here two 64-bit
/// words and one 32-bit word, a carry out of 64 bits (2^64, congruent to 1) added back.
#[inline(always)]
pub fn header_sum(h: &[u8; 20]) -> u64 {
    // Whole-word copies: one load each (read byte by byte, the compiler may
    // share some bytes with other reads and assemble the rest).
    let (mut a, mut b, mut c) = ([0u8; 8], [0u8; 8], [0u8; 4]);
    a.copy_from_slice(&h[..8]);
    b.copy_from_slice(&h[8..16]);
    c.copy_from_slice(&h[16..]);
    let (a, b) = (u64::from_le_bytes(a), u64::from_le_bytes(b));
    let c = u64::from(u32::from_le_bytes(c));
    // a + b + c with the carries added back: add, adc, adc.
    let (x, carry) = a.overflowing_add(b);
    let (y, carry2) = x.overflowing_add(c);
    let (z, carry3) = y.overflowing_add(u64::from(carry));
    // After a carry out, `z` < 2^33: adding it back cannot overflow.
    z + u64::from(carry2 | carry3)
}

/// Tells from a [`header_sum`] whether the header's checksum verifies (what
/// [`Packet::verify_checksum`] says), for every header whose first byte is not zero (an
/// IPv4 header's never is).
///
/// The header verifies when the one's-complement sum of its words is 0xffff, that is when
/// their plain sum is a non-zero multiple of 0xffff (the fold only subtracts multiples of
/// it): the header sum is congruent to it, and zero only for 20 zero bytes. Divisibility by
/// the odd 0xffff is one multiplication by its inverse modulo 2^64 and one comparison: the
/// multiples of 0xffff are exactly the numbers the inverse maps to 0 ..= (2^64 - 1) /
/// 0xffff. The two constants are fields so that a caller that keeps the test in memory
/// (a worker's field) has them read as operands of the multiplication and comparison
/// instead of materialised with two 10-byte `movabs` for each packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChecksumTest {
    inverse: u64,
    limit: u64,
}

impl ChecksumTest {
    /// The test.
    pub const NEW: ChecksumTest = ChecksumTest {
        inverse: inverse_mod_2_64(0xffff),
        limit: u64::MAX / 0xffff,
    };

    /// Whether `sum`, a [`header_sum`], is that of a header whose checksum verifies.
    #[inline(always)]
    pub const fn verifies(&self, sum: u64) -> bool {
        sum.wrapping_mul(self.inverse) <= self.limit
    }
}

impl Default for ChecksumTest {
    fn default() -> Self {
        ChecksumTest::NEW
    }
}

/// The inverse of the odd `d` modulo 2^64 (Newton's iteration: each step doubles the
/// correct low bits, from the 3 that `d` itself has since d·d ≡ 1 mod 8).
const fn inverse_mod_2_64(d: u64) -> u64 {
    let mut x = d;
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(d.wrapping_mul(x)));
        i += 1;
    }
    x
}

const _: () = assert!(0xffffu64.wrapping_mul(inverse_mod_2_64(0xffff)) == 1);

/// Whether the 20-byte header `h` of an IPv4 packet without options (its first byte
/// non-zero) has a valid header checksum: [`ChecksumTest`] of its [`header_sum`].
#[inline(always)]
pub fn header_checksum_ok(h: &[u8; 20]) -> bool {
    ChecksumTest::NEW.verifies(header_sum(h))
}

/// IPv4 option types (RFC 791 §3.1).
pub mod option {
    /// End of option list.
    pub const END: u8 = 0;
    /// No operation (padding).
    pub const NOP: u8 = 1;
    /// Loose source and record route.
    pub const LSRR: u8 = 0x83;
    /// Strict source and record route.
    pub const SSRR: u8 = 0x89;
}

/// The type of the first loose or strict source route option ([`option::LSRR`],
/// [`option::SSRR`]) among the IPv4 `options` (the header bytes after the first 20), if any.
/// The walk stops at the end-of-list option; an option whose length is under 2 or runs
/// past the options is an error ([`ParseError::BadOption`]).
pub fn source_route(options: &[u8]) -> Result<Option<u8>, ParseError> {
    let mut rest = options;
    while let Some((&kind, after)) = rest.split_first() {
        match kind {
            option::END => break,
            option::NOP => rest = after,
            _ => {
                let len = usize::from(*after.first().ok_or(ParseError::BadOption)?);
                if len < 2 || len > rest.len() {
                    return Err(ParseError::BadOption);
                }
                if kind == option::LSRR || kind == option::SSRR {
                    return Ok(Some(kind));
                }
                rest = &rest[len..];
            }
        }
    }
    Ok(None)
}

/// Raw IPv4 options (copied as bytes; a multiple of 4, at most 40).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Options {
    bytes: [u8; MAX_OPTIONS_LEN],
    len: u8,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            bytes: [0; MAX_OPTIONS_LEN],
            len: 0,
        }
    }
}

impl Options {
    /// Options from bytes; the length must be a multiple of 4 and at most 40.
    pub fn new(b: &[u8]) -> Result<Self, ParseError> {
        if b.len() > MAX_OPTIONS_LEN || b.len() % 4 != 0 {
            return Err(ParseError::BadHeaderLength);
        }
        let mut o = Options::default();
        o.bytes[..b.len()].copy_from_slice(b);
        o.len = crate::cast::len8(b.len());
        Ok(o)
    }
    /// The option bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// A parsed IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Payload protocol.
    pub protocol: u8,
    /// Payload length in bytes.
    pub payload_len: u16,
    /// Time to live.
    pub ttl: u8,
    /// DSCP and ECN byte.
    pub dscp_ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
    /// More-fragments flag.
    pub more_frags: bool,
    /// Fragment offset in bytes (multiple of 8).
    pub frag_offset: u16,
    /// Options.
    pub options: Options,
}

impl Ipv4Repr {
    /// Parses a checked packet and verifies its header checksum; the reserved flag must be 0.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, ParseError> {
        p.check_len()?;
        if p.reserved_flag() {
            return Err(ParseError::BadFlags);
        }
        if !p.verify_checksum() {
            return Err(ParseError::BadChecksum);
        }
        Ok(Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            payload_len: p.total_len() - crate::cast::len16(p.header_len()),
            ttl: p.ttl(),
            dscp_ecn: p.dscp_ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset: p.frag_offset(),
            options: Options::new(p.options())?,
        })
    }
    /// Header length including options.
    pub const fn header_len(&self) -> usize {
        field::MIN_HEADER + self.options.len as usize
    }
    /// Writes the header (with checksum) into the first `header_len()` bytes of the buffer.
    /// The payload is not touched.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), ParseError> {
        let hl = self.header_len();
        need(p.buffer.as_ref(), hl)?;
        let total = u16::try_from(hl + usize::from(self.payload_len));
        let Ok(total) = total else {
            return Err(ParseError::BadLength);
        };
        if self.frag_offset % 8 != 0 {
            return Err(ParseError::BadLength);
        }
        p.set_version_and_header_len(hl);
        p.set_dscp_ecn(self.dscp_ecn);
        p.set_total_len(total);
        p.set_ident(self.ident);
        p.set_frag(self.dont_frag, self.more_frags, self.frag_offset);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src(self.src);
        p.set_dst(self.dst);
        p.buffer.as_mut()[field::MIN_HEADER..hl].copy_from_slice(self.options.as_bytes());
        p.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header with a right checksum, then every single-byte change of it.
    #[test]
    fn fast_checksum_is_verify_checksum() {
        let mut h = [
            0x45, 0, 0, 60, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 192, 0, 2, 7, 10, 0, 0, 10,
        ];
        Packet::new_unchecked(&mut h[..]).fill_checksum();
        assert!(header_checksum_ok(&h));
        assert!(Packet::new_unchecked(&h[..]).verify_checksum());
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for i in 1..20 {
            for v in 0..=255u8 {
                let mut g = h;
                g[i] = v;
                let want = Packet::new_unchecked(&g[..]).verify_checksum();
                assert_eq!(header_checksum_ok(&g), want, "byte {i} = {v}");
            }
        }
        // Random headers, and random headers given their right checksum (the sum's
        // carries and the 0x0000 / 0xffff checksum both come up).
        for _ in 0..20_000 {
            let mut g = [0u8; 20];
            for b in &mut g {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed.to_le_bytes()[3];
            }
            // Version 4, 20 bytes (verify_checksum reads IHL words).
            g[0] = 0x45;
            let want = Packet::new_unchecked(&g[..]).verify_checksum();
            assert_eq!(header_checksum_ok(&g), want, "{g:?}");
            Packet::new_unchecked(&mut g[..]).fill_checksum();
            assert!(header_checksum_ok(&g), "{g:?}");
        }
        // The sums that reach a carry out of 64 bits.
        let mut g = [0xff; 20];
        g[..4].copy_from_slice(&[0x45, 0xff, 0xff, 0xff]);
        assert_eq!(
            header_checksum_ok(&g),
            Packet::new_unchecked(&g[..]).verify_checksum()
        );
        g[10] = 0;
        g[11] = 0;
        assert_eq!(
            header_checksum_ok(&g),
            Packet::new_unchecked(&g[..]).verify_checksum()
        );
    }

    #[test]
    fn source_routes_are_found_and_bad_options_refused() {
        let lsrr = [option::NOP, option::LSRR, 7, 4, 10, 0, 0, 1, 0, 0, 0, 0];
        assert_eq!(source_route(&lsrr), Ok(Some(option::LSRR)));
        let ssrr = [option::SSRR, 7, 4, 10, 0, 0, 1, option::END];
        assert_eq!(source_route(&ssrr), Ok(Some(option::SSRR)));
        // Record route (7) and a timestamp (0x44) are no source routes.
        let rr = [7, 7, 4, 0, 0, 0, 0, 0x44, 4, 5, 0, option::END];
        assert_eq!(source_route(&rr), Ok(None));
        // After the end of the list, nothing counts.
        let ended = [option::END, option::LSRR, 3, 4];
        assert_eq!(source_route(&ended), Ok(None));
        assert_eq!(source_route(&[]), Ok(None));
        for bad in [
            &[option::LSRR][..],
            &[option::LSRR, 1, 0, 0],
            &[option::LSRR, 0, 0, 0],
            &[7, 9, 4, 0],
            &[option::NOP, option::NOP, option::NOP, 0x44],
        ] {
            assert_eq!(source_route(bad), Err(ParseError::BadOption), "{bad:?}");
        }
    }
}
