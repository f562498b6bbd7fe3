//! ICMPv6 (RFC 4443): header, checksum with the pseudo header, quoted packet of errors.

use core::net::Ipv6Addr;

use crate::checksum;
use crate::error::ParseError;
use crate::ip::proto;
use crate::{need, rd16, rd32, wr16, wr32};

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const REST: usize = 4;
    pub const HEADER: usize = 8;
}

/// Length of the ICMPv6 header (type, code, checksum, 32-bit message field).
pub const HEADER_LEN: usize = field::HEADER;

/// ICMPv6 message types.
pub mod msg {
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 1;
    /// Packet too big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem.
    pub const PARAM_PROBLEM: u8 = 4;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Neighbor solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbor advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
}

/// Whether a message type is an error (types 0–127) that quotes the offending packet.
pub const fn is_error(t: u8) -> bool {
    t < 128
}

/// A view of an ICMPv6 message.
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
    /// Checks that the 8-byte header is present.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(self.buffer.as_ref(), field::HEADER)
    }
    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// Code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    /// Checksum.
    pub fn checksum(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// The 32-bit message field (MTU of "packet too big", pointer, identifier/sequence…).
    pub fn rest(&self) -> u32 {
        rd32(self.buffer.as_ref(), field::REST)
    }
    /// MTU of a "packet too big" message.
    pub fn mtu(&self) -> u32 {
        self.rest()
    }
    /// Echo identifier.
    pub fn echo_ident(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::REST)
    }
    /// Whether this message is an error quoting a packet.
    pub fn is_error(&self) -> bool {
        is_error(self.msg_type())
    }
    /// The data after the header: for errors, the quoted packet.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::HEADER..]
    }
    /// Whether the checksum (with the pseudo header) over the whole buffer verifies.
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_v6(src, dst, proto::ICMPV6, crate::cast::len32(b.len()));
        checksum::fold(checksum::add(ph, b)) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the type.
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::TYPE] = v;
    }
    /// Sets the code.
    pub fn set_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Sets the 32-bit message field.
    pub fn set_rest(&mut self, v: u32) {
        wr32(self.buffer.as_mut(), field::REST, v);
    }
    /// The data after the header, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::HEADER..]
    }
    /// Computes the checksum over the whole buffer with the pseudo header.
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_v6(src, dst, proto::ICMPV6, crate::cast::len32(b.len()));
        let c = !checksum::fold(checksum::add(ph, b));
        self.set_checksum(c);
    }
}

/// A parsed ICMPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Icmpv6Repr {
    /// Message type.
    pub msg_type: u8,
    /// Code.
    pub code: u8,
    /// 32-bit message field.
    pub rest: u32,
}

impl Icmpv6Repr {
    /// Parses a checked message and verifies its checksum with the pseudo header.
    pub fn parse<T: AsRef<[u8]>>(
        p: &Packet<T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
    ) -> Result<Self, ParseError> {
        p.check_len()?;
        if !p.verify_checksum(src, dst) {
            return Err(ParseError::BadChecksum);
        }
        Ok(Icmpv6Repr {
            msg_type: p.msg_type(),
            code: p.code(),
            rest: p.rest(),
        })
    }
    /// A "packet too big" error advertising `mtu`.
    pub const fn packet_too_big(mtu: u32) -> Self {
        Icmpv6Repr {
            msg_type: msg::PACKET_TOO_BIG,
            code: 0,
            rest: mtu,
        }
    }
    /// Header length (8).
    pub const fn header_len(&self) -> usize {
        field::HEADER
    }
    /// Writes the header and the checksum over the whole buffer (data must be in place).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        p: &mut Packet<T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
    ) -> Result<(), ParseError> {
        p.check_len()?;
        p.set_msg_type(self.msg_type);
        p.set_code(self.code);
        p.set_rest(self.rest);
        p.fill_checksum(src, dst);
        Ok(())
    }
}
