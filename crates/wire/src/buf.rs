//! The packet-buffer abstraction that in-place encapsulation is written against.
//!
//! A buffer is a contiguous window (`data`) inside larger storage, with free space before it
//! (headroom). DPDK's `rte_mbuf` has exactly this shape (`rte_pktmbuf_prepend` / `_adj` /
//! `_trim`); the `dpdk` crate implements [`PacketBuf`] for its `Mbuf`, and [`MemBuf`] is the
//! heap-free in-memory implementation used by tests, fuzzers, `replay` and the benches.

use crate::error::BufError;

/// What the receiving NIC found of a packet's IPv4 header checksum (DPDK's
/// `RTE_MBUF_F_RX_IP_CKSUM_*` flags). It describes the outermost IPv4 header as received:
/// after decapsulation or a rewrite it says nothing of the header now in front.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RxChecksum {
    /// Not verified (no offload, not IPv4, a virtual device, or no NIC at all): software
    /// must verify it.
    Unknown,
    /// Verified right (or the header's integrity verified otherwise).
    Good,
    /// Verified wrong.
    Bad,
}

/// A packet in a buffer with headroom, as DPDK mbufs and [`MemBuf`] provide.
///
/// Implementations must keep `data()` contiguous. Growing at the tail ([`PacketBuf::append`])
/// serves a packet built in a fresh buffer (a fragment, M48); encapsulation only prepends.
pub trait PacketBuf {
    /// The packet bytes.
    fn data(&self) -> &[u8];
    /// The packet bytes, writable.
    fn data_mut(&mut self) -> &mut [u8];
    /// Free bytes available in front of the packet.
    fn headroom(&self) -> usize;
    /// Grows the packet by `n` bytes at the front and returns those new (unspecified) bytes.
    fn prepend(&mut self, n: usize) -> Result<&mut [u8], BufError>;
    /// Removes `n` bytes from the front of the packet.
    fn adj(&mut self, n: usize) -> Result<(), BufError>;
    /// Removes `n` bytes from the end of the packet.
    fn trim(&mut self, n: usize) -> Result<(), BufError>;
    /// Grows the packet by `n` bytes at the end and returns those new (unspecified) bytes.
    fn append(&mut self, n: usize) -> Result<&mut [u8], BufError>;
    /// Grows the packet by `front` bytes at the front and cuts it to `len` bytes in all (what
    /// lies beyond the first `len - front` old bytes, e.g. Ethernet padding, is dropped), and
    /// returns the whole packet; the new front bytes are unspecified. [`PacketBuf::trim`] then
    /// [`PacketBuf::prepend`], where an implementation can do it in one update of its lengths
    /// (encapsulation does this per packet). On error the packet is unchanged.
    fn reframe(&mut self, front: usize, len: usize) -> Result<&mut [u8], BufError> {
        let keep = len.checked_sub(front).ok_or(BufError::TooShort)?;
        let excess = self.len().checked_sub(keep).ok_or(BufError::TooShort)?;
        if front > self.headroom() {
            return Err(BufError::NoHeadroom);
        }
        if excess != 0 {
            self.trim(excess)?;
        }
        self.prepend(front)?;
        Ok(self.data_mut())
    }
    /// What the NIC found of the received packet's IPv4 header checksum;
    /// [`RxChecksum::Unknown`] unless a NIC filled the buffer and said.
    #[inline(always)]
    fn rx_ipv4_checksum(&self) -> RxChecksum {
        RxChecksum::Unknown
    }
    /// Length of the packet in bytes.
    fn len(&self) -> usize {
        self.data().len()
    }
    /// Whether the packet is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Makes `pkt` exactly `len` bytes long for a reply that is written from scratch: trims the
/// tail when it is longer, grows at the front (into the headroom) when it is shorter. The
/// contents are unspecified afterwards. On error the packet is unchanged.
pub fn resize_for_rewrite<B: PacketBuf + ?Sized>(pkt: &mut B, len: usize) -> Result<(), BufError> {
    let cur = pkt.len();
    if len > cur {
        pkt.prepend(len - cur).map(|_| ())
    } else {
        pkt.trim(cur - len)
    }
}

/// An in-memory [`PacketBuf`] over any byte storage (an array, a `&mut [u8]`, …); no heap.
///
/// `MemBuf<[u8; 2048]>` owns its bytes; `MemBuf<&mut [u8]>` borrows them.
#[derive(Debug, Clone)]
pub struct MemBuf<S> {
    storage: S,
    head: usize,
    len: usize,
}

impl<S: AsRef<[u8]> + AsMut<[u8]>> MemBuf<S> {
    /// Places `packet` in `storage` after `headroom` free bytes.
    pub fn new(mut storage: S, headroom: usize, packet: &[u8]) -> Result<Self, BufError> {
        let cap = storage.as_ref().len();
        let end = headroom
            .checked_add(packet.len())
            .ok_or(BufError::TooLarge)?;
        if end > cap {
            return Err(BufError::TooLarge);
        }
        storage.as_mut()[headroom..end].copy_from_slice(packet);
        Ok(MemBuf {
            storage,
            head: headroom,
            len: packet.len(),
        })
    }

    /// Resets the buffer to hold `packet` after `headroom` free bytes (reuses the storage).
    pub fn reset(&mut self, headroom: usize, packet: &[u8]) -> Result<(), BufError> {
        let cap = self.storage.as_ref().len();
        let end = headroom
            .checked_add(packet.len())
            .ok_or(BufError::TooLarge)?;
        if end > cap {
            return Err(BufError::TooLarge);
        }
        self.storage.as_mut()[headroom..end].copy_from_slice(packet);
        self.head = headroom;
        self.len = packet.len();
        Ok(())
    }

    /// Returns the storage.
    pub fn into_inner(self) -> S {
        self.storage
    }
}

impl<S: AsRef<[u8]> + AsMut<[u8]>> PacketBuf for MemBuf<S> {
    fn data(&self) -> &[u8] {
        &self.storage.as_ref()[self.head..self.head + self.len]
    }

    fn data_mut(&mut self) -> &mut [u8] {
        let (h, l) = (self.head, self.len);
        &mut self.storage.as_mut()[h..h + l]
    }

    fn headroom(&self) -> usize {
        self.head
    }

    fn prepend(&mut self, n: usize) -> Result<&mut [u8], BufError> {
        if n > self.head {
            return Err(BufError::NoHeadroom);
        }
        self.head -= n;
        self.len += n;
        let h = self.head;
        Ok(&mut self.storage.as_mut()[h..h + n])
    }

    fn adj(&mut self, n: usize) -> Result<(), BufError> {
        if n > self.len {
            return Err(BufError::TooShort);
        }
        self.head += n;
        self.len -= n;
        Ok(())
    }

    fn trim(&mut self, n: usize) -> Result<(), BufError> {
        if n > self.len {
            return Err(BufError::TooShort);
        }
        self.len -= n;
        Ok(())
    }

    fn append(&mut self, n: usize) -> Result<&mut [u8], BufError> {
        let start = self.head + self.len;
        let end = start
            .checked_add(n)
            .filter(|&e| e <= self.storage.as_ref().len())
            .ok_or(BufError::NoTailroom)?;
        self.len += n;
        Ok(&mut self.storage.as_mut()[start..end])
    }

    fn reframe(&mut self, front: usize, len: usize) -> Result<&mut [u8], BufError> {
        let keep = len.checked_sub(front).ok_or(BufError::TooShort)?;
        if keep > self.len {
            return Err(BufError::TooShort);
        }
        if front > self.head {
            return Err(BufError::NoHeadroom);
        }
        self.head -= front;
        self.len = len;
        Ok(self.data_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepend_adj_trim() {
        let mut b = MemBuf::new([0u8; 32], 8, &[1, 2, 3, 4]).unwrap();
        assert_eq!(b.headroom(), 8);
        b.prepend(2).unwrap().copy_from_slice(&[9, 9]);
        assert_eq!(b.data(), &[9, 9, 1, 2, 3, 4]);
        assert_eq!(b.prepend(7), Err(BufError::NoHeadroom));
        b.adj(3).unwrap();
        assert_eq!(b.data(), &[2, 3, 4]);
        b.trim(1).unwrap();
        assert_eq!(b.data(), &[2, 3]);
        assert_eq!(b.trim(3), Err(BufError::TooShort));
        assert_eq!(b.adj(3), Err(BufError::TooShort));
        assert_eq!(b.len(), 2);
        assert!(MemBuf::new([0u8; 4], 2, &[1, 2, 3]).is_err());
        let mut store = [0u8; 16];
        let mut s = MemBuf::new(&mut store[..], 4, &[7]).unwrap();
        s.reset(0, &[1, 2]).unwrap();
        assert_eq!(s.data(), &[1, 2]);
        assert_eq!(s.headroom(), 0);
    }

    #[test]
    fn reframe_is_trim_then_prepend_or_leaves_the_packet_alone() {
        // MemBuf's own reframe against the trait's trim-then-prepend (a wrapper that does
        // not override it), for every front / length around a 6-byte packet in 4 of headroom.
        struct Plain(MemBuf<[u8; 16]>);
        impl PacketBuf for Plain {
            fn data(&self) -> &[u8] {
                self.0.data()
            }
            fn data_mut(&mut self) -> &mut [u8] {
                self.0.data_mut()
            }
            fn headroom(&self) -> usize {
                self.0.headroom()
            }
            fn prepend(&mut self, n: usize) -> Result<&mut [u8], BufError> {
                self.0.prepend(n)
            }
            fn adj(&mut self, n: usize) -> Result<(), BufError> {
                self.0.adj(n)
            }
            fn trim(&mut self, n: usize) -> Result<(), BufError> {
                self.0.trim(n)
            }
            fn append(&mut self, n: usize) -> Result<&mut [u8], BufError> {
                self.0.append(n)
            }
        }
        let pkt = [1, 2, 3, 4, 5, 6];
        for front in 0..7 {
            for len in 0..14 {
                let mut a = MemBuf::new([0u8; 16], 4, &pkt).unwrap();
                let mut b = Plain(MemBuf::new([0u8; 16], 4, &pkt).unwrap());
                let ra = a.reframe(front, len).map(|d| d.len());
                let rb = b.reframe(front, len).map(|d| d.len());
                assert_eq!(ra, rb, "front {front} len {len}");
                assert_eq!((a.headroom(), a.data()), (b.headroom(), b.data()));
                match ra {
                    Ok(n) => {
                        assert_eq!(n, len);
                        assert_eq!(a.headroom(), 4 - front);
                        assert_eq!(&a.data()[front..], &pkt[..len - front]);
                    }
                    Err(_) => assert_eq!((a.headroom(), a.data()), (4, &pkt[..])),
                }
            }
        }
    }

    #[test]
    fn append_grows_into_the_tail_room_only() {
        let mut b = MemBuf::new([0u8; 8], 2, &[1, 2]).unwrap();
        b.append(3).unwrap().copy_from_slice(&[3, 4, 5]);
        assert_eq!(b.data(), &[1, 2, 3, 4, 5]);
        assert_eq!(b.append(2), Err(BufError::NoTailroom));
        assert_eq!(b.len(), 5, "unchanged on error");
        b.append(1).unwrap()[0] = 6;
        assert_eq!(b.data(), &[1, 2, 3, 4, 5, 6]);
        assert_eq!(b.append(usize::MAX), Err(BufError::NoTailroom));
    }

    #[test]
    fn resize_for_rewrite_grows_at_the_front_and_trims_the_tail() {
        let mut b = MemBuf::new([0u8; 16], 4, &[1, 2, 3, 4]).unwrap();
        resize_for_rewrite(&mut b, 6).unwrap();
        assert_eq!((b.len(), b.headroom()), (6, 2));
        resize_for_rewrite(&mut b, 3).unwrap();
        assert_eq!((b.len(), b.headroom()), (3, 2));
        assert_eq!(resize_for_rewrite(&mut b, 6), Err(BufError::NoHeadroom));
        assert_eq!(b.len(), 3, "unchanged on error");
    }
}
