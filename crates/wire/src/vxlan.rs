//! VXLAN (RFC 7348).

use crate::error::ParseError;
use crate::{need, rd32, wr32};

mod field {
    pub const FLAGS: usize = 0;
    pub const VNI: usize = 4;
    pub const HEADER: usize = 8;
}

/// Length of the VXLAN header.
pub const HEADER_LEN: usize = field::HEADER;
/// IANA UDP port.
pub const PORT: u16 = 4789;
const FLAG_I: u8 = 0x08;

/// A view of a VXLAN header.
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
    /// Flags byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// VXLAN network identifier (24 bits).
    pub fn vni(&self) -> u32 {
        rd32(self.buffer.as_ref(), field::VNI) >> 8
    }
    /// The inner Ethernet frame.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::HEADER..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes flags (I set) and reserved bytes.
    pub fn set_flags_valid(&mut self) {
        let b = self.buffer.as_mut();
        b[0..4].copy_from_slice(&[FLAG_I, 0, 0, 0]);
    }
    /// Sets the VNI (24 bits) and clears the last reserved byte.
    pub fn set_vni(&mut self, vni: u32) {
        wr32(self.buffer.as_mut(), field::VNI, (vni & 0x00ff_ffff) << 8);
    }
}

/// A parsed VXLAN header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VxlanRepr {
    /// VXLAN network identifier (24 bits).
    pub vni: u32,
}

impl VxlanRepr {
    /// Parses a checked header; the I flag must be set.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, ParseError> {
        p.check_len()?;
        if p.flags() & FLAG_I == 0 {
            return Err(ParseError::BadFlags);
        }
        Ok(VxlanRepr { vni: p.vni() })
    }
    /// Header length (8).
    pub const fn header_len(&self) -> usize {
        field::HEADER
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), ParseError> {
        p.check_len()?;
        if self.vni > 0x00ff_ffff {
            return Err(ParseError::BadOption);
        }
        p.set_flags_valid();
        p.set_vni(self.vni);
        Ok(())
    }
}
