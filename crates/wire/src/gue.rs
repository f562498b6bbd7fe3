//! Generic UDP Encapsulation (draft-ietf-intarea-gue): variant 0 with a header and
//! variant 1 direct IP encapsulation (the form Katran and GLB use).
//!
//! Variant 1 has no header at all: the UDP payload is an IPv4 or IPv6 packet, whose first
//! two bits (`01` for both versions 4 and 6) double as the GUE variant.

use crate::error::ParseError;
use crate::{need, rd16, wr16};

mod field {
    pub const VER_C_HLEN: usize = 0;
    pub const PROTO: usize = 1;
    pub const FLAGS: usize = 2;
    pub const HEADER: usize = 4;
}

/// Length of the variant 0 base header.
pub const BASE_HEADER_LEN: usize = field::HEADER;
/// UDP port for GUE assigned by IANA.
pub const PORT: u16 = 6080;

/// A view of a GUE variant 0 header (base header plus extension fields).
#[derive(Debug, Clone)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Header { buffer }
    }
    /// Wraps a buffer after [`Header::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the base header and the extension fields `hlen` announces.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(self.buffer.as_ref(), field::HEADER)?;
        need(self.buffer.as_ref(), self.header_len())
    }
    /// Variant (top two bits).
    pub fn variant(&self) -> u8 {
        self.buffer.as_ref()[field::VER_C_HLEN] >> 6
    }
    /// Control-message bit.
    pub fn control(&self) -> bool {
        self.buffer.as_ref()[field::VER_C_HLEN] & 0x20 != 0
    }
    /// Extension-field length in 32-bit words.
    pub fn hlen(&self) -> u8 {
        self.buffer.as_ref()[field::VER_C_HLEN] & 0x1f
    }
    /// Header length in bytes, extension fields included.
    pub fn header_len(&self) -> usize {
        field::HEADER + 4 * usize::from(self.hlen())
    }
    /// IP protocol of the payload (or control type when `control` is set).
    pub fn proto(&self) -> u8 {
        self.buffer.as_ref()[field::PROTO]
    }
    /// Flags.
    pub fn flags(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::FLAGS)
    }
    /// Extension fields.
    pub fn extensions(&self) -> &[u8] {
        &self.buffer.as_ref()[field::HEADER..self.header_len()]
    }
}

/// A parsed GUE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GueRepr {
    /// Variant 1: the payload is directly an IPv4 (`ipv6 == false`) or IPv6 packet.
    DirectIp {
        /// Whether the inner packet is IPv6.
        ipv6: bool,
    },
    /// Variant 0 with a header.
    Header {
        /// Control message.
        control: bool,
        /// IP protocol of the payload, or control type.
        proto: u8,
        /// Flags.
        flags: u16,
        /// Extension-field length in 32-bit words (the fields are emitted as zeros).
        hlen: u8,
    },
}

impl GueRepr {
    /// Parses the start of a GUE UDP payload.
    pub fn parse(b: &[u8]) -> Result<Self, ParseError> {
        need(b, 1)?;
        match b[0] >> 6 {
            0 => {
                let h = Header::new_checked(b)?;
                Ok(GueRepr::Header {
                    control: h.control(),
                    proto: h.proto(),
                    flags: h.flags(),
                    hlen: h.hlen(),
                })
            }
            1 => match b[0] >> 4 {
                4 => Ok(GueRepr::DirectIp { ipv6: false }),
                6 => Ok(GueRepr::DirectIp { ipv6: true }),
                _ => Err(ParseError::BadVersion),
            },
            _ => Err(ParseError::Unsupported),
        }
    }
    /// Header length (0 for variant 1).
    pub const fn header_len(&self) -> usize {
        match self {
            GueRepr::DirectIp { .. } => 0,
            GueRepr::Header { hlen, .. } => field::HEADER + 4 * (*hlen as usize & 0x1f),
        }
    }
    /// Writes the header (nothing for variant 1).
    pub fn emit(&self, b: &mut [u8]) -> Result<(), ParseError> {
        match *self {
            GueRepr::DirectIp { .. } => Ok(()),
            GueRepr::Header {
                control,
                proto,
                flags,
                hlen,
            } => {
                if hlen > 0x1f {
                    return Err(ParseError::BadHeaderLength);
                }
                let n = self.header_len();
                need(b, n)?;
                b[field::VER_C_HLEN] = (u8::from(control) << 5) | hlen;
                b[field::PROTO] = proto;
                wr16(b, field::FLAGS, flags);
                b[field::HEADER..n].fill(0);
                Ok(())
            }
        }
    }
}
