//! Ethernet II frames with up to two 802.1Q / 802.1ad (QinQ) VLAN tags.

use crate::error::ParseError;
use crate::{arr, need, rd16, wr16};

/// EtherType values used by Spillway.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service VLAN tag (QinQ outer tag).
    pub const QINQ: u16 = 0x88a8;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// Transparent Ethernet bridging (Ethernet inside GRE/GENEVE).
    pub const TEB: u16 = 0x6558;
}

/// A MAC address.
pub type MacAddr = [u8; 6];

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: usize = 12;
    pub const HEADER_LEN: usize = 14;
}

/// Length of an untagged Ethernet header.
pub const HEADER_LEN: usize = field::HEADER_LEN;
/// Length of one VLAN tag.
pub const VLAN_TAG_LEN: usize = 4;
/// Most VLAN tags a frame may carry (QinQ).
pub const MAX_VLAN_TAGS: usize = 2;

/// A view of the untagged part of an Ethernet header (destination, source, first EtherType).
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        Frame { buffer }
    }
    /// Wraps a buffer after [`Frame::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }
    /// Ensures the 14-byte header is present.
    pub fn check_len(&self) -> Result<(), ParseError> {
        need(self.buffer.as_ref(), field::HEADER_LEN)
    }
    /// Returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Destination MAC.
    pub fn dst(&self) -> MacAddr {
        arr(self.buffer.as_ref(), field::DST.start)
    }
    /// Source MAC.
    pub fn src(&self) -> MacAddr {
        arr(self.buffer.as_ref(), field::SRC.start)
    }
    /// The first EtherType (a TPID if the frame is tagged).
    pub fn ethertype(&self) -> u16 {
        rd16(self.buffer.as_ref(), field::ETHERTYPE)
    }
    /// Bytes after the untagged header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination MAC.
    pub fn set_dst(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&mac);
    }
    /// Sets the source MAC.
    pub fn set_src(&mut self, mac: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&mac);
    }
    /// Sets the first EtherType.
    pub fn set_ethertype(&mut self, v: u16) {
        wr16(self.buffer.as_mut(), field::ETHERTYPE, v);
    }
}

/// One VLAN tag: its TPID (0x8100 or 0x88a8) and TCI (PCP, DEI, VID).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Tag protocol identifier.
    pub tpid: u16,
    /// Tag control information.
    pub tci: u16,
}

impl VlanTag {
    /// The 12-bit VLAN identifier.
    pub const fn vid(&self) -> u16 {
        self.tci & 0x0fff
    }
    /// The 3-bit priority code point.
    pub const fn pcp(&self) -> u8 {
        (self.tci >> 13) as u8
    }
}

/// A parsed Ethernet header with its VLAN tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EthernetRepr {
    /// Destination MAC.
    pub dst: MacAddr,
    /// Source MAC.
    pub src: MacAddr,
    /// VLAN tags, outermost first; only the first `vlan_count` are meaningful.
    pub vlans: [VlanTag; MAX_VLAN_TAGS],
    /// Number of VLAN tags (0–2).
    pub vlan_count: u8,
    /// The EtherType of the payload (after all tags).
    pub ethertype: u16,
}

const fn is_tpid(v: u16) -> bool {
    v == ethertype::VLAN || v == ethertype::QINQ
}

impl EthernetRepr {
    /// Parses the header and up to two VLAN tags from the start of `frame`.
    #[inline]
    pub fn parse(frame: &[u8]) -> Result<Self, ParseError> {
        need(frame, field::HEADER_LEN)?;
        let mut vlans = [VlanTag::default(); MAX_VLAN_TAGS];
        let mut n = 0usize;
        let mut off = field::ETHERTYPE;
        let mut et = rd16(frame, off);
        while is_tpid(et) {
            if n == MAX_VLAN_TAGS {
                return Err(ParseError::TooManyHeaders);
            }
            need(frame, off + 2 + VLAN_TAG_LEN)?;
            vlans[n] = VlanTag {
                tpid: et,
                tci: rd16(frame, off + 2),
            };
            n += 1;
            off += VLAN_TAG_LEN;
            et = rd16(frame, off);
        }
        Ok(EthernetRepr {
            dst: arr(frame, field::DST.start),
            src: arr(frame, field::SRC.start),
            vlans,
            vlan_count: crate::cast::len8(n),
            ethertype: et,
        })
    }

    /// Header length including tags.
    pub const fn header_len(&self) -> usize {
        field::HEADER_LEN + VLAN_TAG_LEN * self.vlan_count as usize
    }

    /// Writes the header into the first `header_len()` bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), ParseError> {
        need(buf, self.header_len())?;
        if usize::from(self.vlan_count) > MAX_VLAN_TAGS {
            return Err(ParseError::TooManyHeaders);
        }
        buf[field::DST].copy_from_slice(&self.dst);
        buf[field::SRC].copy_from_slice(&self.src);
        let mut off = field::ETHERTYPE;
        for tag in &self.vlans[..usize::from(self.vlan_count)] {
            wr16(buf, off, tag.tpid);
            wr16(buf, off + 2, tag.tci);
            off += VLAN_TAG_LEN;
        }
        wr16(buf, off, self.ethertype);
        Ok(())
    }

    /// An untagged header.
    pub const fn untagged(dst: MacAddr, src: MacAddr, ethertype: u16) -> Self {
        EthernetRepr {
            dst,
            src,
            vlans: [VlanTag { tpid: 0, tci: 0 }; MAX_VLAN_TAGS],
            vlan_count: 0,
            ethertype,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_tags_rejected() {
        let mut f = [0u8; 30];
        wr16(&mut f, 12, 0x88a8);
        wr16(&mut f, 16, 0x8100);
        wr16(&mut f, 20, 0x8100);
        assert_eq!(EthernetRepr::parse(&f), Err(ParseError::TooManyHeaders));
        assert_eq!(EthernetRepr::parse(&f[..17]), Err(ParseError::Truncated));
    }

    #[test]
    fn view_setters() {
        let mut b = [0xa5u8; 14];
        let mut f = Frame::new_checked(&mut b[..]).unwrap();
        f.set_dst([1; 6]);
        f.set_src([2; 6]);
        f.set_ethertype(ethertype::IPV6);
        assert_eq!(f.dst(), [1; 6]);
        assert_eq!(f.src(), [2; 6]);
        assert_eq!(f.ethertype(), ethertype::IPV6);
        assert!(f.payload().is_empty());
        assert!(Frame::new_checked(&b[..13]).is_err());
    }
}
