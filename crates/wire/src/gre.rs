//! GRE (RFC 2784) with the key and sequence-number extensions (RFC 2890).

use crate::checksum;
use crate::error::ParseError;
use crate::{need, rd16, rd32, wr16, wr32};

mod field {
    pub const FLAGS_VER: usize = 0;
    pub const PROTOCOL: usize = 2;
    pub const MIN_HEADER: usize = 4;
}

const F_CHECKSUM: u16 = 0x8000;
const F_KEY: u16 = 0x2000;
const F_SEQ: u16 = 0x1000;
/// Reserved0 bits that must be zero (routing, strict route, recursion, flags) and version.
const RESERVED_MASK: u16 = 0x4ff8;
const VERSION_MASK: u16 = 0x0007;

/// Length of the GRE header without optional fields.
pub const MIN_HEADER_LEN: usize = field::MIN_HEADER;

/// A view of a GRE packet.
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
    /// Checks that the header with the optional fields its flags announce is present.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(self.buffer.as_ref(), field::MIN_HEADER)?;
        need(self.buffer.as_ref(), self.header_len())
    }
    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn flags(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::FLAGS_VER)
    }
    /// Checksum-present bit.
    pub fn has_checksum(&self) -> bool {
        self.flags() & F_CHECKSUM != 0
    }
    /// Key-present bit.
    pub fn has_key(&self) -> bool {
        self.flags() & F_KEY != 0
    }
    /// Sequence-number-present bit.
    pub fn has_seq(&self) -> bool {
        self.flags() & F_SEQ != 0
    }
    /// Reserved0 bits other than C, K, S.
    pub fn reserved0(&self) -> u16 {
        self.flags() & RESERVED_MASK
    }
    /// Version (must be 0).
    pub fn version(&self) -> u8 {
        (self.flags() & VERSION_MASK) as u8
    }
    /// Protocol type of the payload (an EtherType).
    pub fn protocol(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::PROTOCOL)
    }
    /// Header length implied by the flags.
    pub fn header_len(&self) -> usize {
        field::MIN_HEADER
            + 4 * (usize::from(self.has_checksum())
                + usize::from(self.has_key())
                + usize::from(self.has_seq()))
    }
    /// Checksum field, if present.
    pub fn checksum(&self) -> Option<u16> {
        self.has_checksum()
            .then(|| rd16(self.buffer.as_ref(), field::MIN_HEADER))
    }
    /// Key, if present.
    pub fn key(&self) -> Option<u32> {
        let off = field::MIN_HEADER + 4 * usize::from(self.has_checksum());
        self.has_key().then(|| rd32(self.buffer.as_ref(), off))
    }
    /// Sequence number, if present.
    pub fn seq(&self) -> Option<u32> {
        let off = field::MIN_HEADER
            + 4 * (usize::from(self.has_checksum()) + usize::from(self.has_key()));
        self.has_seq().then(|| rd32(self.buffer.as_ref(), off))
    }
    /// The payload after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    /// Whether the checksum (if present) over header and payload verifies.
    pub fn verify_checksum(&self) -> bool {
        !self.has_checksum() || checksum::fold(checksum::add(0, self.buffer.as_ref())) == 0xffff
    }
}

/// A parsed GRE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GreRepr {
    /// Payload protocol (EtherType).
    pub protocol: u16,
    /// Whether a checksum over header and payload is present.
    pub checksum: bool,
    /// Key (RFC 2890).
    pub key: Option<u32>,
    /// Sequence number (RFC 2890).
    pub seq: Option<u32>,
}

impl GreRepr {
    /// Parses a checked header; version must be 0, reserved bits clear, checksum valid.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, ParseError> {
        p.check_len()?;
        if p.version() != 0 || p.reserved0() != 0 {
            return Err(ParseError::BadFlags);
        }
        if !p.verify_checksum() {
            return Err(ParseError::BadChecksum);
        }
        Ok(GreRepr {
            protocol: p.protocol(),
            checksum: p.has_checksum(),
            key: p.key(),
            seq: p.seq(),
        })
    }
    /// Header length.
    pub const fn header_len(&self) -> usize {
        field::MIN_HEADER
            + 4 * (self.checksum as usize
                + self.key.is_some() as usize
                + self.seq.is_some() as usize)
    }
    /// Writes the header into the start of `b`. If the checksum is present, `b` must hold
    /// the payload too (the checksum covers it); call after the payload is in place.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), ParseError> {
        let hl = self.header_len();
        need(b, hl)?;
        let mut flags = 0u16;
        if self.checksum {
            flags |= F_CHECKSUM;
        }
        if self.key.is_some() {
            flags |= F_KEY;
        }
        if self.seq.is_some() {
            flags |= F_SEQ;
        }
        wr16(b, field::FLAGS_VER, flags);
        wr16(b, field::PROTOCOL, self.protocol);
        let mut off = field::MIN_HEADER;
        if self.checksum {
            wr32(b, off, 0);
            off += 4;
        }
        if let Some(k) = self.key {
            wr32(b, off, k);
            off += 4;
        }
        if let Some(s) = self.seq {
            wr32(b, off, s);
        }
        if self.checksum {
            let c = checksum::checksum(b);
            wr16(b, field::MIN_HEADER, c);
        }
        Ok(())
    }
}
