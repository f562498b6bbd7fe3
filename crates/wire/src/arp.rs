//! ARP for IPv4 over Ethernet (RFC 826).

use core::net::Ipv4Addr;

use crate::error::ParseError;
use crate::ethernet::MacAddr;
use crate::{arr, need, rd16, wr16};

mod field {
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    pub const SHA: usize = 8;
    pub const SPA: usize = 14;
    pub const THA: usize = 18;
    pub const TPA: usize = 24;
    pub const LEN: usize = 28;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = field::LEN;

/// ARP operation codes.
pub mod op {
    /// Request.
    pub const REQUEST: u16 = 1;
    /// Reply.
    pub const REPLY: u16 = 2;
}

/// A view of an ARP packet.
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
    /// Ensures the 28 bytes of an Ethernet/IPv4 ARP packet are present.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(self.buffer.as_ref(), field::LEN)
    }
    /// Hardware type.
    pub fn htype(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::HTYPE)
    }
    /// Protocol type.
    pub fn ptype(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::PTYPE)
    }
    /// Hardware address length.
    pub fn hlen(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }
    /// Protocol address length.
    pub fn plen(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }
    /// Operation.
    pub fn oper(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::OPER)
    }
    /// Sender hardware address.
    pub fn sha(&self) -> MacAddr {
        arr(self.buffer.as_ref(), field::SHA)
    }
    /// Sender protocol address.
    pub fn spa(&self) -> Ipv4Addr {
        Ipv4Addr::from(arr::<4>(self.buffer.as_ref(), field::SPA))
    }
    /// Target hardware address.
    pub fn tha(&self) -> MacAddr {
        arr(self.buffer.as_ref(), field::THA)
    }
    /// Target protocol address.
    pub fn tpa(&self) -> Ipv4Addr {
        Ipv4Addr::from(arr::<4>(self.buffer.as_ref(), field::TPA))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the fixed Ethernet/IPv4 type and length fields.
    pub fn set_ethernet_ipv4(&mut self) {
        let b = self.buffer.as_mut();
        wr16(b, field::HTYPE, 1);
        wr16(b, field::PTYPE, crate::ethernet::ethertype::IPV4);
        b[field::HLEN] = 6;
        b[field::PLEN] = 4;
    }
    /// Sets the operation.
    pub fn set_oper(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::OPER, v);
    }
    /// Sets the sender hardware address.
    pub fn set_sha(&mut self, v: MacAddr) {
        self.buffer.as_mut()[field::SHA..field::SHA + 6].copy_from_slice(&v);
    }
    /// Sets the sender protocol address.
    pub fn set_spa(&mut self, v: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA..field::SPA + 4].copy_from_slice(&v.octets());
    }
    /// Sets the target hardware address.
    pub fn set_tha(&mut self, v: MacAddr) {
        self.buffer.as_mut()[field::THA..field::THA + 6].copy_from_slice(&v);
    }
    /// Sets the target protocol address.
    pub fn set_tpa(&mut self, v: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA..field::TPA + 4].copy_from_slice(&v.octets());
    }
}

/// An Ethernet/IPv4 ARP message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    /// Operation (1 request, 2 reply).
    pub oper: u16,
    /// Sender hardware address.
    pub sha: MacAddr,
    /// Sender protocol address.
    pub spa: Ipv4Addr,
    /// Target hardware address.
    pub tha: MacAddr,
    /// Target protocol address.
    pub tpa: Ipv4Addr,
}

impl ArpRepr {
    /// Parses an Ethernet/IPv4 ARP message; other hardware/protocol types are unsupported.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, ParseError> {
        p.check_len()?;
        if p.htype() != 1
            || p.ptype() != crate::ethernet::ethertype::IPV4
            || p.hlen() != 6
            || p.plen() != 4
        {
            return Err(ParseError::Unsupported);
        }
        Ok(ArpRepr {
            oper: p.oper(),
            sha: p.sha(),
            spa: p.spa(),
            tha: p.tha(),
            tpa: p.tpa(),
        })
    }
    /// Length of the emitted message.
    pub const fn buffer_len(&self) -> usize {
        field::LEN
    }
    /// Writes the message.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), ParseError> {
        p.check_len()?;
        p.set_ethernet_ipv4();
        p.set_oper(self.oper);
        p.set_sha(self.sha);
        p.set_spa(self.spa);
        p.set_tha(self.tha);
        p.set_tpa(self.tpa);
        Ok(())
    }
}
