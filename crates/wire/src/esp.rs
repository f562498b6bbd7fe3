//! ESP (RFC 4303): only the cleartext SPI and sequence number are visible.

use crate::error::ParseError;
use crate::{need, rd32, wr32};

mod field {
    pub const SPI: usize = 0;
    pub const SEQ: usize = 4;
    pub const HEADER: usize = 8;
}

/// Length of the ESP header (SPI + sequence number).
pub const HEADER_LEN: usize = field::HEADER;

/// A view of an ESP packet.
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
    /// Checks that SPI and sequence number are present.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(self.buffer.as_ref(), field::HEADER)
    }
    /// Security parameters index.
    pub fn spi(&self) -> u32 {
        rd32(self.buffer.as_ref(), field::SPI)
    }
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        rd32(self.buffer.as_ref(), field::SEQ)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the SPI.
    pub fn set_spi(&mut self, v: u32) {
        wr32(self.buffer.as_mut(), field::SPI, v);
    }
    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        wr32(self.buffer.as_mut(), field::SEQ, v);
    }
}

/// A parsed ESP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EspRepr {
    /// Security parameters index (0 is reserved and rejected).
    pub spi: u32,
    /// Sequence number.
    pub seq: u32,
}

impl EspRepr {
    /// Parses a checked packet; SPI 0 is reserved (RFC 4303 §2.1) and rejected.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, ParseError> {
        p.check_len()?;
        if p.spi() == 0 {
            return Err(ParseError::Unsupported);
        }
        Ok(EspRepr {
            spi: p.spi(),
            seq: p.seq(),
        })
    }
    /// Header length (8).
    pub const fn header_len(&self) -> usize {
        field::HEADER
    }
    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), ParseError> {
        p.check_len()?;
        p.set_spi(self.spi);
        p.set_seq(self.seq);
        Ok(())
    }
}
