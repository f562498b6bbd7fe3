//! Owned packet buffers and fixed-size bursts of them.

use std::mem::MaybeUninit;
use std::ptr::NonNull;

use dpdk_sys::rte_mbuf;

/// Why an mbuf length operation was refused. The mbuf is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MbufError {
    /// not enough headroom in front of the packet data
    #[error("not enough headroom: need {need} bytes, have {have}")]
    NoHeadroom {
        /// Bytes asked for.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// not enough tailroom behind the packet data
    #[error("not enough tailroom: need {need} bytes, have {have}")]
    NoTailroom {
        /// Bytes asked for.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// the packet (first segment) is shorter than the bytes to remove
    #[error("packet too short: cannot remove {need} bytes from {have}")]
    TooShort {
        /// Bytes asked for.
        need: usize,
        /// Bytes in the segment.
        have: usize,
    },
}

/// One packet buffer, owned: freed back to its pool on drop.
///
/// Data access covers the first segment, which is the whole packet unless the
/// port was configured for scattered RX (Spillway never does; see
/// [`Mbuf::is_contiguous`]).
#[repr(transparent)]
pub struct Mbuf(NonNull<rte_mbuf>);

// SAFETY: an Mbuf is the unique owner of its rte_mbuf (never cloned or shared),
// and DPDK lets any thread free an mbuf back to its (thread-safe) pool.
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `m` must point to a valid mbuf that nobody else owns or references, with
    /// its data within its buffer; the returned value frees it on drop.
    #[inline]
    pub unsafe fn from_raw(m: NonNull<rte_mbuf>) -> Mbuf {
        Mbuf(m)
    }

    /// Gives up ownership (e.g. to hand the buffer to C code).
    #[inline]
    pub fn into_raw(self) -> NonNull<rte_mbuf> {
        let m = self.0;
        std::mem::forget(self);
        m
    }

    #[inline(always)]
    fn raw(&self) -> &rte_mbuf {
        // SAFETY: we own the mbuf exclusively (type invariant), so a shared
        // reference to its header is valid for the borrow of self.
        unsafe { self.0.as_ref() }
    }

    /// The header, writable (exclusively owned, as in [`Mbuf::raw`]).
    #[inline(always)]
    fn raw_mut(&mut self) -> &mut rte_mbuf {
        // SAFETY: we own the mbuf exclusively (type invariant) and `&mut self`
        // guarantees no other borrow of its header exists.
        unsafe { self.0.as_mut() }
    }

    /// Start of the packet data in the first segment.
    #[inline(always)]
    fn data_ptr(&self) -> *mut u8 {
        let m = self.raw();
        // SAFETY: DPDK keeps data_off <= buf_len, so the result stays within
        // (or one past) the segment's buffer allocation.
        unsafe { m.buf_addr.cast::<u8>().add(usize::from(m.data_off)) }
    }

    /// The packet bytes (first segment).
    #[inline]
    pub fn data(&self) -> &[u8] {
        let len = usize::from(self.raw().data_len);
        // SAFETY: DPDK keeps data_off + data_len within the segment's buffer,
        // and we own the mbuf exclusively, so nothing writes these bytes
        // during the borrow of self.
        unsafe { std::slice::from_raw_parts(self.data_ptr(), len) }
    }

    /// The packet bytes (first segment), writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.raw().data_len);
        // SAFETY: as in `data`; `&mut self` guarantees no other borrow of the
        // bytes exists, and the mbuf's buffer is not shared (never cloned).
        unsafe { std::slice::from_raw_parts_mut(self.data_ptr(), len) }
    }

    /// Total packet length over all segments.
    #[inline]
    pub fn pkt_len(&self) -> usize {
        self.raw().pkt_len as usize
    }

    /// True when the whole packet is in the first segment.
    #[inline]
    pub fn is_contiguous(&self) -> bool {
        self.raw().nb_segs == 1
    }

    /// Free bytes in front of the data.
    #[inline]
    pub fn headroom(&self) -> usize {
        usize::from(self.raw().data_off)
    }

    /// Free bytes behind the data (last segment).
    #[inline]
    pub fn tailroom(&self) -> usize {
        // SAFETY: valid owned mbuf; the call only reads its header.
        usize::from(unsafe { dpdk_sys::rte_pktmbuf_tailroom(self.0.as_ptr()) })
    }

    /// Input port the packet arrived on.
    #[inline]
    pub fn port(&self) -> u16 {
        self.raw().port
    }

    /// Grows the packet at the front by `n` bytes (into the headroom) and
    /// returns the new leading bytes, whose contents are unspecified.
    #[inline]
    pub fn prepend(&mut self, n: usize) -> Result<&mut [u8], MbufError> {
        let have = self.headroom();
        let len = u16::try_from(n)
            .ok()
            .filter(|_| n <= have)
            .ok_or(MbufError::NoHeadroom { need: n, have })?;
        // What rte_pktmbuf_prepend does once its headroom check passed, here
        // so that it inlines (the C function is static inline: through
        // bindgen's wrapper it would be a call per packet). data_off +
        // data_len <= buf_len, so data_len + len fits in u16.
        let m = self.raw_mut();
        m.data_off -= len;
        m.data_len += len;
        m.pkt_len += u32::from(len);
        Ok(&mut self.data_mut()[..n])
    }

    /// Removes `n` bytes from the front of the packet (e.g. a decapsulated
    /// outer header).
    #[inline]
    pub fn adj(&mut self, n: usize) -> Result<(), MbufError> {
        let have = usize::from(self.raw().data_len);
        let len = u16::try_from(n)
            .ok()
            .filter(|_| n <= have)
            .ok_or(MbufError::TooShort { need: n, have })?;
        // rte_pktmbuf_adj after its length check (inlined, as in `prepend`).
        let m = self.raw_mut();
        m.data_len -= len;
        m.data_off += len;
        m.pkt_len -= u32::from(len);
        Ok(())
    }

    /// Grows the packet at the end by `n` bytes and returns them (contents
    /// unspecified).
    #[inline]
    pub fn append(&mut self, n: usize) -> Result<&mut [u8], MbufError> {
        let have = self.tailroom();
        let len = u16::try_from(n)
            .ok()
            .filter(|_| n <= have && self.is_contiguous())
            .ok_or(MbufError::NoTailroom { need: n, have })?;
        // SAFETY: valid owned mbuf; single segment with n <= tailroom, so
        // append cannot fail and extends the first (only) segment.
        let p = unsafe { dpdk_sys::rte_pktmbuf_append(self.0.as_ptr(), len) };
        debug_assert!(!p.is_null());
        let total = self.data().len();
        Ok(&mut self.data_mut()[total - n..])
    }

    /// Removes `n` bytes from the end of the packet.
    #[inline]
    pub fn trim(&mut self, n: usize) -> Result<(), MbufError> {
        let have = usize::from(self.raw().data_len);
        let len = u16::try_from(n)
            .ok()
            .filter(|_| n <= have && self.is_contiguous())
            .ok_or(MbufError::TooShort { need: n, have })?;
        // rte_pktmbuf_trim of a single segment after its length check
        // (inlined, as in `prepend`).
        let m = self.raw_mut();
        m.data_len -= len;
        m.pkt_len -= u32::from(len);
        Ok(())
    }

    /// Grows the packet by `front` bytes at the front and cuts it to `len`
    /// bytes in all (see `wire::buf::PacketBuf::reframe`): one update of the
    /// lengths for a single-segment packet; a segmented one can only grow at
    /// the front (as `trim` refuses it).
    /// On error the packet is unchanged.
    #[inline]
    pub fn reframe(&mut self, front: usize, len: usize) -> Result<&mut [u8], wire::BufError> {
        let keep = len.checked_sub(front).ok_or(wire::BufError::TooShort)?;
        let have = usize::from(self.raw().data_len);
        if keep > have {
            return Err(wire::BufError::TooShort);
        }
        if front > self.headroom() {
            return Err(wire::BufError::NoHeadroom);
        }
        if !self.is_contiguous() {
            // `trim` refuses a segmented packet; without a tail to cut, growing the
            // first segment at the front is all there is to do.
            if keep < have {
                return Err(wire::BufError::TooShort);
            }
            return self.prepend(front).map_err(|_| wire::BufError::NoHeadroom);
        }
        // front <= data_off and len = keep + front <= data_len + data_off <= buf_len, so both
        // fit in u16 (what rte_pktmbuf_prepend and _trim do, in one step).
        #[allow(clippy::cast_possible_truncation, reason = "both fit u16, see above")]
        let (front, len) = (front as u16, len as u16);
        let m = self.raw_mut();
        m.data_off -= front;
        m.data_len = len;
        m.pkt_len = u32::from(len);
        Ok(self.data_mut())
    }

    /// Replaces the packet with `bytes` (resetting it to an empty packet with
    /// default headroom first). Fails if the buffer is too small.
    pub fn set_data(&mut self, bytes: &[u8]) -> Result<(), MbufError> {
        if !self.is_contiguous() {
            return Err(MbufError::NoTailroom {
                need: bytes.len(),
                have: 0,
            });
        }
        // SAFETY: valid owned single-segment mbuf; reset only rewrites its
        // header fields (lengths, offsets, flags) to the empty state.
        unsafe { dpdk_sys::rte_pktmbuf_reset(self.0.as_ptr()) };
        self.append(bytes.len())?.copy_from_slice(bytes);
        Ok(())
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own the mbuf (type invariant) and never use it again.
        unsafe { dpdk_sys::rte_pktmbuf_free(self.0.as_ptr()) }
    }
}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf")
            .field("len", &self.pkt_len())
            .field("headroom", &self.headroom())
            .field("port", &self.port())
            .finish()
    }
}

/// A fixed-capacity burst of owned mbufs, laid out exactly as the
/// `struct rte_mbuf *[]` that DPDK's burst calls take, so RX and TX need no
/// copying and no heap. Dropping (or [`clear`](Self::clear)ing) it frees
/// every mbuf it still holds.
pub struct MbufBurst<const N: usize = 32> {
    len: usize,
    bufs: [MaybeUninit<Mbuf>; N],
}

// SAFETY: holds only Mbufs, which are Send.
unsafe impl<const N: usize> Send for MbufBurst<N> {}

impl<const N: usize> Default for MbufBurst<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> MbufBurst<N> {
    /// Capacity of the burst.
    pub const CAPACITY: usize = N;

    /// An empty burst.
    pub const fn new() -> Self {
        MbufBurst {
            len: 0,
            bufs: [const { MaybeUninit::uninit() }; N],
        }
    }

    /// Number of mbufs held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds no mbuf.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when it cannot take another mbuf.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == N
    }

    /// Adds an mbuf at the end, or hands it back when the burst is full.
    #[inline]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.len == N {
            return Err(m);
        }
        self.bufs[self.len].write(m);
        self.len += 1;
        Ok(())
    }

    /// Removes and returns the last mbuf.
    #[inline]
    pub fn pop(&mut self) -> Option<Mbuf> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: slots below the old len are initialised; len was lowered
        // first, so this slot is no longer considered initialised and the
        // value is moved out exactly once.
        Some(unsafe { self.bufs[self.len].assume_init_read() })
    }

    /// Moves every held mbuf out, in order, to `f(index, mbuf)`; the burst is
    /// empty afterwards. (Used to sort a received burst into TX bursts.)
    #[inline]
    pub fn drain_each(&mut self, mut f: impl FnMut(usize, Mbuf)) {
        let len = std::mem::replace(&mut self.len, 0);
        for i in 0..len {
            // SAFETY: slots below the old len are initialised; len is already
            // 0, so each is moved out exactly once (should `f` panic, the rest
            // leak rather than being freed twice).
            let m = unsafe { self.bufs[i].assume_init_read() };
            f(i, m);
        }
    }

    /// The held mbufs.
    #[inline]
    pub fn as_slice(&self) -> &[Mbuf] {
        // SAFETY: the first `len` slots are initialised, and MaybeUninit<Mbuf>
        // has the same layout as Mbuf.
        unsafe { std::slice::from_raw_parts(self.bufs.as_ptr().cast::<Mbuf>(), self.len) }
    }

    /// The held mbufs, mutably.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Mbuf] {
        // SAFETY: as in `as_slice`, with exclusive access through &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.bufs.as_mut_ptr().cast::<Mbuf>(), self.len) }
    }

    /// Frees every mbuf held.
    #[inline]
    pub fn clear(&mut self) {
        let len = std::mem::replace(&mut self.len, 0);
        if len == 0 {
            return;
        }
        let count = u32::try_from(len).unwrap_or(u32::MAX);
        // SAFETY: the first `len` slots hold owned mbufs (pointer layout, see
        // the type docs); len is already 0, so they are freed exactly once.
        unsafe {
            dpdk_sys::rte_pktmbuf_free_bulk(self.bufs.as_mut_ptr().cast::<*mut rte_mbuf>(), count)
        }
    }

    /// Pointer to the first free slot, for a driver to fill (RX).
    #[inline]
    pub(crate) fn spare_ptr(&mut self) -> (*mut *mut rte_mbuf, usize) {
        // SAFETY: len <= N, so the offset stays within (or one past) the array.
        let ptr = unsafe { self.bufs.as_mut_ptr().add(self.len) };
        (ptr.cast::<*mut rte_mbuf>(), N - self.len)
    }

    /// Records that a driver filled `n` slots after the held ones.
    ///
    /// # Safety
    /// The `n` slots after the held ones must now hold owned, valid mbufs.
    #[inline]
    pub(crate) unsafe fn commit(&mut self, n: usize) {
        debug_assert!(self.len + n <= N);
        self.len += n;
    }

    /// Pointer to the held mbufs, for a driver to take (TX).
    #[inline]
    pub(crate) fn held_ptr(&mut self) -> *mut *mut rte_mbuf {
        self.bufs.as_mut_ptr().cast::<*mut rte_mbuf>()
    }

    /// Forgets the first `n` mbufs (their ownership went to a driver) and
    /// moves the rest to the front.
    ///
    /// # Safety
    /// The first `n` held mbufs must have been taken over by someone else.
    #[inline]
    pub(crate) unsafe fn forget_front(&mut self, n: usize) {
        debug_assert!(n <= self.len);
        let rest = self.len - n;
        if rest > 0 {
            let src = self.bufs[n..].as_ptr();
            // SAFETY: both ranges lie within the first `len` slots; ptr::copy
            // handles the overlap. The moved-from slots past `rest` are then
            // treated as uninitialised, so nothing is freed twice.
            unsafe { std::ptr::copy(src, self.bufs.as_mut_ptr(), rest) };
        }
        self.len = rest;
    }
}

impl<const N: usize> Drop for MbufBurst<N> {
    fn drop(&mut self) {
        self.clear();
    }
}

impl<const N: usize> std::fmt::Debug for MbufBurst<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MbufBurst")
            .field("len", &self.len)
            .field("capacity", &N)
            .finish()
    }
}

/// The data plane's encapsulation code (`wire`) is written against
/// `PacketBuf`; on DPDK it runs directly on mbufs.
impl wire::buf::PacketBuf for Mbuf {
    #[inline]
    fn data(&self) -> &[u8] {
        Mbuf::data(self)
    }

    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        Mbuf::data_mut(self)
    }

    #[inline]
    fn headroom(&self) -> usize {
        Mbuf::headroom(self)
    }

    #[inline]
    fn prepend(&mut self, n: usize) -> Result<&mut [u8], wire::BufError> {
        Mbuf::prepend(self, n).map_err(|_| wire::BufError::NoHeadroom)
    }

    #[inline]
    fn adj(&mut self, n: usize) -> Result<(), wire::BufError> {
        Mbuf::adj(self, n).map_err(|_| wire::BufError::TooShort)
    }

    #[inline]
    fn trim(&mut self, n: usize) -> Result<(), wire::BufError> {
        Mbuf::trim(self, n).map_err(|_| wire::BufError::TooShort)
    }

    #[inline]
    fn append(&mut self, n: usize) -> Result<&mut [u8], wire::BufError> {
        Mbuf::append(self, n).map_err(|_| wire::BufError::NoTailroom)
    }

    #[inline]
    fn reframe(&mut self, front: usize, len: usize) -> Result<&mut [u8], wire::BufError> {
        Mbuf::reframe(self, front, len)
    }

    #[inline(always)]
    fn rx_ipv4_checksum(&self) -> wire::buf::RxChecksum {
        rx_ip_checksum(self.raw().ol_flags)
    }
}

/// What an mbuf's `ol_flags` say of its IPv4 header checksum.
#[inline(always)]
fn rx_ip_checksum(ol_flags: u64) -> wire::buf::RxChecksum {
    use wire::buf::RxChecksum;
    // NONE: the checksum field is wrong but the header's integrity was
    // verified (DPDK's definition): as good as GOOD.
    match ol_flags & dpdk_sys::SPW_MBUF_F_RX_IP_CKSUM_MASK {
        dpdk_sys::SPW_MBUF_F_RX_IP_CKSUM_GOOD | dpdk_sys::SPW_MBUF_F_RX_IP_CKSUM_NONE => {
            RxChecksum::Good
        }
        dpdk_sys::SPW_MBUF_F_RX_IP_CKSUM_BAD => RxChecksum::Bad,
        _ => RxChecksum::Unknown,
    }
}

impl<const N: usize> wire::burst::PacketBurst for MbufBurst<N> {
    type Pkt = Mbuf;

    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn capacity(&self) -> usize {
        N
    }

    #[inline]
    fn packets_mut(&mut self) -> &mut [Mbuf] {
        self.as_mut_slice()
    }

    #[inline]
    fn push(&mut self, pkt: Mbuf) -> Result<(), Mbuf> {
        MbufBurst::push(self, pkt)
    }

    #[inline]
    fn drain_each(&mut self, f: impl FnMut(usize, Mbuf)) {
        MbufBurst::drain_each(self, f);
    }
}

#[cfg(test)]
mod tests {
    use wire::buf::RxChecksum;

    #[test]
    fn ip_checksum_flags() {
        // DPDK 22.11's values (rte_mbuf_core.h): BAD bit 4, GOOD bit 7, both: NONE.
        let (bad, good) = (1u64 << 4, 1u64 << 7);
        assert_eq!(super::rx_ip_checksum(0), RxChecksum::Unknown);
        assert_eq!(super::rx_ip_checksum(bad), RxChecksum::Bad);
        assert_eq!(super::rx_ip_checksum(good), RxChecksum::Good);
        assert_eq!(super::rx_ip_checksum(bad | good), RxChecksum::Good);
        // Other flags (L4 checksum, RSS hash, VLAN) change nothing.
        assert_eq!(super::rx_ip_checksum(!(bad | good)), RxChecksum::Unknown);
        assert_eq!(
            super::rx_ip_checksum(good | 1 << 8 | 1 << 3),
            RxChecksum::Good
        );
    }
}
