//! GENEVE (RFC 8926): base header, option TLV iteration and emission, and Spillway's
//! gateway options (M30): endpoint ID (class 0x0139, type 1, 8 bytes) and flow cookie
//! (class 0x0139, type 3, 4 bytes), with configurable class and types.

use crate::error::ParseError;
use crate::{need, rd16, rd32, wr16, wr32};

mod field {
    pub const VER_OPTLEN: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PROTOCOL: usize = 2;
    pub const VNI: usize = 4;
    pub const HEADER: usize = 8;
}

/// Length of the GENEVE base header.
pub const BASE_HEADER_LEN: usize = field::HEADER;
/// IANA UDP port.
pub const PORT: u16 = 6081;
/// Length of an option TLV header.
pub const OPTION_HEADER_LEN: usize = 4;
/// Most option bytes a header can carry (6-bit length in 4-byte words).
pub const MAX_OPTIONS_LEN: usize = 63 * 4;

/// A view of a GENEVE header (base header plus options).
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
    /// Checks that the base header and the options it announces are present.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(self.buffer.as_ref(), field::HEADER)?;
        need(self.buffer.as_ref(), self.header_len())
    }
    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Version (0).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_OPTLEN] >> 6
    }
    /// Options length in bytes.
    pub fn options_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_OPTLEN] & 0x3f) * 4
    }
    /// Header length, options included.
    pub fn header_len(&self) -> usize {
        field::HEADER + self.options_len()
    }
    /// OAM (control) packet bit.
    pub fn oam(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }
    /// Critical-options-present bit.
    pub fn critical(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }
    /// Reserved bits of the flags byte.
    pub fn reserved_flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0x3f
    }
    /// Protocol type of the payload (an EtherType).
    pub fn protocol(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::PROTOCOL)
    }
    /// Virtual network identifier (24 bits).
    pub fn vni(&self) -> u32 {
        rd32(self.buffer.as_ref(), field::VNI) >> 8
    }
    /// The raw options bytes.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::HEADER..self.header_len()]
    }
    /// An iterator over the option TLVs.
    pub fn option_iter(&self) -> Options<'_> {
        Options::new(self.options())
    }
    /// The payload after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 0 and the options length in bytes (multiple of 4, at most 252).
    pub fn set_options_len(&mut self, len: usize) {
        self.buffer.as_mut()[field::VER_OPTLEN] = crate::cast::len8((len / 4) & 0x3f);
    }
    /// Sets the OAM and critical bits, clearing the reserved ones.
    pub fn set_flags(&mut self, oam: bool, critical: bool) {
        self.buffer.as_mut()[field::FLAGS] = (u8::from(oam) << 7) | (u8::from(critical) << 6);
    }
    /// Sets the protocol type.
    pub fn set_protocol(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::PROTOCOL, v);
    }
    /// Sets the VNI (24 bits) and clears the reserved byte.
    pub fn set_vni(&mut self, vni: u32) {
        wr32(self.buffer.as_mut(), field::VNI, (vni & 0x00ff_ffff) << 8);
    }
    /// The raw options bytes, writable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[field::HEADER..hl]
    }
}

/// One option TLV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GeneveOption<'a> {
    /// Option class.
    pub class: u16,
    /// Type (the top bit is the critical bit).
    pub opt_type: u8,
    /// Option data (a multiple of 4 bytes).
    pub data: &'a [u8],
}

impl GeneveOption<'_> {
    /// Length on the wire.
    pub const fn wire_len(&self) -> usize {
        OPTION_HEADER_LEN + self.data.len()
    }
    /// Whether the critical bit is set.
    pub const fn is_critical(&self) -> bool {
        self.opt_type & 0x80 != 0
    }
    /// Writes the TLV at the start of `b` and returns its length. Data must be a multiple
    /// of 4 bytes and at most 124.
    pub fn emit(&self, b: &mut [u8]) -> Result<usize, ParseError> {
        if self.data.len() % 4 != 0 || self.data.len() > 31 * 4 {
            return Err(ParseError::BadOption);
        }
        let n = self.wire_len();
        need(b, n)?;
        wr16(b, 0, self.class);
        b[2] = self.opt_type;
        b[3] = crate::cast::len8(self.data.len() / 4);
        b[OPTION_HEADER_LEN..n].copy_from_slice(self.data);
        Ok(n)
    }
}

/// Iterator over option TLVs; yields `Err(BadOption)` once (then stops) on a TLV that
/// overruns the options area.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Options<'a> {
    /// Iterates the TLVs in `options`.
    pub const fn new(options: &'a [u8]) -> Self {
        Options {
            rest: options,
            failed: false,
        }
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<GeneveOption<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        let r = self.rest;
        if r.len() < OPTION_HEADER_LEN || r[3] & 0xe0 != 0 {
            self.failed = true;
            return Some(Err(ParseError::BadOption));
        }
        let n = OPTION_HEADER_LEN + usize::from(r[3] & 0x1f) * 4;
        if r.len() < n {
            self.failed = true;
            return Some(Err(ParseError::BadOption));
        }
        self.rest = &r[n..];
        Some(Ok(GeneveOption {
            class: rd16(r, 0),
            opt_type: r[2],
            data: &r[OPTION_HEADER_LEN..n],
        }))
    }
}

/// A parsed GENEVE base header (options are read with [`Packet::option_iter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GeneveRepr {
    /// OAM packet.
    pub oam: bool,
    /// Critical options present.
    pub critical: bool,
    /// Payload protocol (EtherType).
    pub protocol: u16,
    /// VNI (24 bits).
    pub vni: u32,
    /// Options length in bytes (multiple of 4, at most 252).
    pub options_len: u16,
}

impl GeneveRepr {
    /// Parses a checked header; version must be 0 and every option TLV well-formed.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, ParseError> {
        p.check_len()?;
        if p.version() != 0 {
            return Err(ParseError::BadVersion);
        }
        for o in p.option_iter() {
            o?;
        }
        Ok(GeneveRepr {
            oam: p.oam(),
            critical: p.critical(),
            protocol: p.protocol(),
            vni: p.vni(),
            options_len: crate::cast::len16(p.options_len()),
        })
    }
    /// Header length, options included.
    pub const fn header_len(&self) -> usize {
        field::HEADER + self.options_len as usize
    }
    /// Writes the base header; the options area (`options_len` bytes after it) is left for
    /// the caller to fill with [`GeneveOption::emit`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), ParseError> {
        let ol = usize::from(self.options_len);
        if ol % 4 != 0 || ol > MAX_OPTIONS_LEN || self.vni > 0x00ff_ffff {
            return Err(ParseError::BadOption);
        }
        need(p.buffer.as_ref(), field::HEADER + ol)?;
        p.set_options_len(ol);
        p.set_flags(self.oam, self.critical);
        p.set_protocol(self.protocol);
        p.set_vni(self.vni);
        Ok(())
    }
}

/// Option class and types of Spillway's gateway options (M30; configurable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OptionIds {
    /// Option class (default 0x0139).
    pub class: u16,
    /// Type of the 64-bit gateway endpoint ID option (default 1).
    pub endpoint_type: u8,
    /// Type of the 32-bit flow cookie option (default 3).
    pub cookie_type: u8,
}

impl OptionIds {
    /// Spillway's own class 0x0139 with types 1 and 3 (M30).
    pub const DEFAULT: OptionIds = OptionIds {
        class: 0x0139,
        endpoint_type: 1,
        cookie_type: 3,
    };
}

impl Default for OptionIds {
    fn default() -> Self {
        OptionIds::DEFAULT
    }
}

/// Spillway's gateway options carried in a GENEVE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GatewayOptions {
    /// The gateway endpoint ID (8 bytes of data).
    pub endpoint_id: Option<u64>,
    /// The flow cookie (4 bytes of data).
    pub cookie: Option<u32>,
}

impl GatewayOptions {
    /// Bytes the options take on the wire.
    pub const fn wire_len(&self) -> usize {
        (if self.endpoint_id.is_some() { 12 } else { 0 })
            + (if self.cookie.is_some() { 8 } else { 0 })
    }

    /// Writes the options (endpoint ID first, then cookie) and returns their length.
    pub fn emit(&self, ids: &OptionIds, b: &mut [u8]) -> Result<usize, ParseError> {
        need(b, self.wire_len())?;
        let mut off = 0;
        if let Some(id) = self.endpoint_id {
            let data = id.to_be_bytes();
            off += GeneveOption {
                class: ids.class,
                opt_type: ids.endpoint_type,
                data: &data,
            }
            .emit(&mut b[off..])?;
        }
        if let Some(c) = self.cookie {
            let data = c.to_be_bytes();
            off += GeneveOption {
                class: ids.class,
                opt_type: ids.cookie_type,
                data: &data,
            }
            .emit(&mut b[off..])?;
        }
        Ok(off)
    }

    /// Finds Spillway's options among the TLVs in `options` (others are skipped). An
    /// option of the right class and type but the wrong length is an error.
    pub fn parse(ids: &OptionIds, options: &[u8]) -> Result<Self, ParseError> {
        let mut g = GatewayOptions::default();
        for o in Options::new(options) {
            let o = o?;
            if o.class != ids.class {
                continue;
            }
            if o.opt_type == ids.endpoint_type {
                let d: [u8; 8] = o.data.try_into().map_err(|_| ParseError::BadOption)?;
                g.endpoint_id = Some(u64::from_be_bytes(d));
            } else if o.opt_type == ids.cookie_type {
                let d: [u8; 4] = o.data.try_into().map_err(|_| ParseError::BadOption)?;
                g.cookie = Some(u32::from_be_bytes(d));
            }
        }
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_iterator_stops_on_overrun() {
        let b = [0x01, 0x39, 0x01, 0x02, 0, 0, 0, 0];
        let mut it = Options::new(&b);
        assert_eq!(it.next(), Some(Err(ParseError::BadOption)));
        assert_eq!(it.next(), None);
        let b = [0x01, 0x39, 0x01, 0x20];
        assert_eq!(Options::new(&b).next(), Some(Err(ParseError::BadOption)));
    }

    #[test]
    fn gateway_option_wrong_length_rejected() {
        // cookie type with 8 bytes of data
        let b = [0x01, 0x39, 0x03, 0x02, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            GatewayOptions::parse(&OptionIds::default(), &b),
            Err(ParseError::BadOption)
        );
    }
}
