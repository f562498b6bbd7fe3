//! ICMP for IPv4 (RFC 792, RFC 1191): header, checksum, and the quoted packet of errors.

use crate::checksum;
use crate::error::ParseError;
use crate::{need, rd16, rd32, wr16, wr32};

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const REST: usize = 4;
    pub const HEADER: usize = 8;
}

/// Length of the ICMP header (type, code, checksum, rest-of-header).
pub const HEADER_LEN: usize = field::HEADER;

/// ICMP message types.
pub mod msg {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable (code 4: fragmentation needed).
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Source quench (deprecated, still an error).
    pub const SOURCE_QUENCH: u8 = 4;
    /// Redirect.
    pub const REDIRECT: u8 = 5;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter problem.
    pub const PARAM_PROBLEM: u8 = 12;
    /// Destination-unreachable code "fragmentation needed and DF set".
    pub const CODE_FRAG_NEEDED: u8 = 4;
}

/// Whether a message type is an error that quotes the offending packet.
pub const fn is_error(t: u8) -> bool {
    matches!(
        t,
        msg::DEST_UNREACHABLE
            | msg::SOURCE_QUENCH
            | msg::REDIRECT
            | msg::TIME_EXCEEDED
            | msg::PARAM_PROBLEM
    )
}

/// A view of an ICMP message.
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
    /// The 32-bit rest-of-header (identifier/sequence, MTU, pointer, gateway…).
    pub fn rest(&self) -> u32 {
        rd32(self.buffer.as_ref(), field::REST)
    }
    /// Echo identifier.
    pub fn echo_ident(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::REST)
    }
    /// Next-hop MTU of a "fragmentation needed" message (RFC 1191).
    pub fn next_hop_mtu(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::REST + 2)
    }
    /// Whether this message is an error quoting a packet.
    pub fn is_error(&self) -> bool {
        is_error(self.msg_type())
    }
    /// Whether this is "fragmentation needed and DF set".
    pub fn is_frag_needed(&self) -> bool {
        self.msg_type() == msg::DEST_UNREACHABLE && self.code() == msg::CODE_FRAG_NEEDED
    }
    /// The data after the header: for errors, the quoted IP header and leading payload.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::HEADER..]
    }
    /// Whether the checksum over the whole buffer verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::add(0, self.buffer.as_ref())) == 0xffff
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
    /// Sets the rest-of-header.
    pub fn set_rest(&mut self, v: u32) {
        wr32(self.buffer.as_mut(), field::REST, v);
    }
    /// The data after the header, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::HEADER..]
    }
    /// Computes the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

/// A parsed ICMP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Icmpv4Repr {
    /// Message type.
    pub msg_type: u8,
    /// Code.
    pub code: u8,
    /// Rest-of-header.
    pub rest: u32,
}

impl Icmpv4Repr {
    /// Parses a checked message and verifies its checksum over the whole buffer.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, ParseError> {
        p.check_len()?;
        if !p.verify_checksum() {
            return Err(ParseError::BadChecksum);
        }
        Ok(Icmpv4Repr {
            msg_type: p.msg_type(),
            code: p.code(),
            rest: p.rest(),
        })
    }
    /// A "fragmentation needed" error advertising `mtu`.
    pub const fn frag_needed(mtu: u16) -> Self {
        Icmpv4Repr {
            msg_type: msg::DEST_UNREACHABLE,
            code: msg::CODE_FRAG_NEEDED,
            rest: mtu as u32,
        }
    }
    /// Header length (8).
    pub const fn header_len(&self) -> usize {
        field::HEADER
    }
    /// Writes the header and computes the checksum over the whole buffer, so the data
    /// must be in place (or written before calling `fill_checksum` again).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), ParseError> {
        p.check_len()?;
        p.set_msg_type(self.msg_type);
        p.set_code(self.code);
        p.set_rest(self.rest);
        p.fill_checksum();
        Ok(())
    }
}
