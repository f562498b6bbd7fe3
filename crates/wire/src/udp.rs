//! UDP header (RFC 768) and its checksum rules over IPv4 and IPv6.

use core::net::IpAddr;

use crate::checksum;
use crate::error::ParseError;
use crate::ip::{proto, pseudo_header};
use crate::{need, rd16, wr16};

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
    pub const HEADER: usize = 8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::HEADER;

/// A view of a UDP datagram.
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
    /// Checks the header and that the length field is at least 8 and fits the buffer.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(self.buffer.as_ref(), field::HEADER)?;
        let l = usize::from(self.len());
        if l < field::HEADER {
            return Err(ParseError::BadLength);
        }
        need(self.buffer.as_ref(), l)
    }
    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Length field (header + payload).
    pub fn len(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Whether the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= field::HEADER
    }
    /// Checksum field (0 means "not computed").
    pub fn checksum(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::HEADER..usize::from(self.len())]
    }
    /// Whether the checksum verifies over the datagram (up to the length field). A zero
    /// checksum is accepted only over IPv4; whether a zero checksum over IPv6 is acceptable
    /// (RFC 6935/6936 tunnels) is the caller's decision via [`Packet::checksum`].
    pub fn verify_checksum(&self, src: &IpAddr, dst: &IpAddr) -> bool {
        if self.checksum() == 0 {
            return src.is_ipv4();
        }
        let l = usize::from(self.len());
        match pseudo_header(src, dst, proto::UDP, crate::cast::len32(l)) {
            Some(ph) => checksum::fold(checksum::add(ph, &self.buffer.as_ref()[..l])) == 0xffff,
            None => false,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::SRC_PORT, v);
    }
    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::DST_PORT, v);
    }
    /// Sets the length field.
    pub fn set_len(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::LENGTH, v);
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Computes the checksum over the datagram (up to the length field); a computed 0 is
    /// sent as 0xffff (RFC 768).
    pub fn fill_checksum(&mut self, src: &IpAddr, dst: &IpAddr) -> Result<(), ParseError> {
        self.set_checksum(0);
        let l = usize::from(self.len());
        let ph = pseudo_header(src, dst, proto::UDP, crate::cast::len32(l))
            .ok_or(ParseError::BadVersion)?;
        let c = !checksum::fold(checksum::add(ph, &self.buffer.as_ref()[..l]));
        self.set_checksum(if c == 0 { 0xffff } else { c });
        Ok(())
    }
}

/// A parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length.
    pub payload_len: u16,
}

impl UdpRepr {
    /// Parses a checked datagram (checksum not verified here).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, ParseError> {
        p.check_len()?;
        Ok(UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: p.len() - crate::cast::len16(field::HEADER),
        })
    }
    /// Header length (8).
    pub const fn header_len(&self) -> usize {
        field::HEADER
    }
    /// Writes the header with a zero checksum.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), ParseError> {
        need(p.buffer.as_ref(), field::HEADER)?;
        let len = usize::from(self.payload_len) + field::HEADER;
        if len > usize::from(u16::MAX) {
            return Err(ParseError::BadLength);
        }
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(crate::cast::len16(len));
        p.set_checksum(0);
        Ok(())
    }
}
