//! TCP header (RFC 9293): ports, sequence numbers, flags, options, checksum.

use core::net::IpAddr;

use crate::checksum;
use crate::error::ParseError;
use crate::ip::{proto, pseudo_header};
use crate::{need, rd16, rd32, wr16, wr32};

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const FLAGS: usize = 12;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
    pub const MIN_HEADER: usize = 20;
}

/// Length of a TCP header without options.
pub const MIN_HEADER_LEN: usize = field::MIN_HEADER;
/// Longest TCP options field.
pub const MAX_OPTIONS_LEN: usize = 40;

/// Raw TCP options (a multiple of 4 bytes, at most 40): the same container as IPv4's.
pub type Options = crate::ipv4::Options;

/// TCP flags (the low 9 bits of the data-offset/flags word).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u16);

impl Flags {
    /// FIN.
    pub const FIN: Flags = Flags(0x001);
    /// SYN.
    pub const SYN: Flags = Flags(0x002);
    /// RST.
    pub const RST: Flags = Flags(0x004);
    /// PSH.
    pub const PSH: Flags = Flags(0x008);
    /// ACK.
    pub const ACK: Flags = Flags(0x010);
    /// URG.
    pub const URG: Flags = Flags(0x020);
    /// ECE.
    pub const ECE: Flags = Flags(0x040);
    /// CWR.
    pub const CWR: Flags = Flags(0x080);
    /// AE (formerly NS).
    pub const AE: Flags = Flags(0x100);
    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
    /// Union.
    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
}

/// A view of a TCP segment.
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
    /// Checks that the header with its options is present.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(self.buffer.as_ref(), field::MIN_HEADER)?;
        let hl = self.header_len();
        if hl < field::MIN_HEADER {
            return Err(ParseError::BadHeaderLength);
        }
        need(self.buffer.as_ref(), hl)
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
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        rd32(self.buffer.as_ref(), field::SEQ)
    }
    /// Acknowledgment number.
    pub fn ack(&self) -> u32 {
        rd32(self.buffer.as_ref(), field::ACK)
    }
    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::FLAGS] >> 4) * 4
    }
    /// The 3 reserved bits between data offset and flags.
    pub fn reserved(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 1) & 0x7
    }
    /// Flags.
    pub fn flags(&self) -> Flags {
        Flags(rd16(self.buffer.as_ref(), field::FLAGS) & 0x01ff)
    }
    /// Window.
    pub fn window(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::WINDOW)
    }
    /// Checksum.
    pub fn checksum(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::URGENT)
    }
    /// Options bytes.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::MIN_HEADER..self.header_len()]
    }
    /// Payload (the rest of the buffer).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    /// Whether the checksum over the whole buffer verifies (false for mixed families).
    pub fn verify_checksum(&self, src: &IpAddr, dst: &IpAddr) -> bool {
        let b = self.buffer.as_ref();
        match pseudo_header(src, dst, proto::TCP, crate::cast::len32(b.len())) {
            Some(ph) => checksum::fold(checksum::add(ph, b)) == 0xffff,
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
    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        wr32(self.buffer.as_mut(), field::SEQ, v);
    }
    /// Sets the acknowledgment number.
    pub fn set_ack(&mut self, v: u32) {
        wr32(self.buffer.as_mut(), field::ACK, v);
    }
    /// Sets header length (bytes, multiple of 4) and flags; reserved bits are cleared.
    pub fn set_header_len_and_flags(&mut self, len: usize, flags: Flags) {
        let v = (crate::cast::len16((len / 4) & 0xf) << 12) | (flags.0 & 0x01ff);
        wr16(self.buffer.as_mut(), field::FLAGS, v);
    }
    /// Sets the window.
    pub fn set_window(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::WINDOW, v);
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Sets the urgent pointer.
    pub fn set_urgent(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::URGENT, v);
    }
    /// Computes the checksum over the whole buffer (header and payload).
    pub fn fill_checksum(&mut self, src: &IpAddr, dst: &IpAddr) -> Result<(), ParseError> {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let ph = pseudo_header(src, dst, proto::TCP, crate::cast::len32(b.len()))
            .ok_or(ParseError::BadVersion)?;
        let c = !checksum::fold(checksum::add(ph, b));
        self.set_checksum(c);
        Ok(())
    }
}

/// A parsed TCP header (options kept as raw bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Flags.
    pub flags: Flags,
    /// Window.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Raw options (a multiple of 4 bytes).
    pub options: Options,
}

impl TcpRepr {
    /// Parses the header of a checked segment (the checksum is not verified here; use
    /// [`Packet::verify_checksum`] with the addresses).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, ParseError> {
        p.check_len()?;
        if p.reserved() != 0 {
            return Err(ParseError::BadFlags);
        }
        Ok(TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq(),
            ack: p.ack(),
            flags: p.flags(),
            window: p.window(),
            urgent: p.urgent(),
            options: Options::new(p.options())?,
        })
    }
    /// Header length including options.
    pub fn header_len(&self) -> usize {
        field::MIN_HEADER + self.options.as_bytes().len()
    }
    /// Writes the header; the checksum field is set to 0 (call `fill_checksum` once the
    /// payload is in place).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), ParseError> {
        let hl = self.header_len();
        need(p.buffer.as_ref(), hl)?;
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq(self.seq);
        p.set_ack(self.ack);
        p.set_header_len_and_flags(hl, self.flags);
        p.set_window(self.window);
        p.set_checksum(0);
        p.set_urgent(self.urgent);
        p.buffer.as_mut()[field::MIN_HEADER..hl].copy_from_slice(self.options.as_bytes());
        Ok(())
    }
}
