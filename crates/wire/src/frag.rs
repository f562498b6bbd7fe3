//! IPv4 fragmentation (RFC 791 §3.2), for the data plane's packets that are too big for the
//! egress MTU once encapsulated and may be fragmented (no DF; M48).
//!
//! Spillway fragments the inner packet before encapsulating it, as RFC 4459 §4 ("Fragmentation
//! of the inner packet", what most tunnel ingresses do for IPv4 without DF) describes: every
//! fragment is a whole tunnel packet, so neither the tunnel's receiver (a backend's kernel,
//! `spillway decap`, another Spillway's tunnel ingress, an appliance) nor any router in between
//! has to reassemble or fragment anything; the inner destination reassembles the datagram as it
//! would one fragmented by a router on the way.
//!
//! [`plan`] checks the packet and works out the fragments; [`Plan::write_later`] writes a later
//! fragment into another buffer and [`Plan::make_first`] turns the packet itself into the first
//! one (the caller then trims it to [`Plan::len`]`(0)`). A fragment's header is the packet's,
//! with its own length, offset and MF flag, and in the later fragments only the options whose
//! copy flag is set (RFC 791 §3.1). The packet may itself be a fragment: its offset carries on,
//! and its MF flag ends up on the last piece.

use crate::error::ParseError;
use crate::ipv4;

/// The most fragments a packet is split into: a 9,000-byte packet needs 7 on a 1,500-byte
/// path, 8 on IPv6's minimum of 1,280.
pub const MAX_FRAGMENTS: usize = 16;

/// Why a packet cannot be fragmented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum FragError {
    /// the IPv4 header or its options are malformed
    #[error("the IPv4 header or its options are malformed")]
    Malformed(#[from] ParseError),
    /// the packet has DF set (it is answered with ICMP instead)
    #[error("the packet has DF set")]
    DontFragment,
    /// the packet fits: nothing to fragment
    #[error("the packet fits")]
    Fits,
    /// the limit leaves no room for 8 bytes of payload behind the header
    #[error("the limit leaves no room for 8 bytes of payload")]
    TooSmall,
    /// more than MAX_FRAGMENTS fragments would be needed
    #[error("more than MAX_FRAGMENTS fragments would be needed")]
    TooMany,
    /// the output buffer is shorter than the fragment
    #[error("the output buffer is shorter than the fragment")]
    NoRoom,
}

/// How one IPv4 packet is split; see [`plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Header length of the packet and of its first fragment.
    first_hl: usize,
    /// The later fragments' options (the copied ones, padded to 4 bytes) and their length.
    later_opts: [u8; 40],
    later_opts_len: usize,
    /// Payload bytes per fragment: the first, and each later one but the last.
    first_chunk: usize,
    later_chunk: usize,
    /// The packet's payload length.
    payload: usize,
    /// Fragments in all.
    count: usize,
    /// Offset (bytes) of the packet's payload in its datagram: 0 unless it is a later fragment.
    base_offset: usize,
    /// The packet's MF flag (set: it is not its datagram's last fragment).
    more: bool,
}

/// Plans the fragments of the IPv4 packet `ip` (its bytes from the IP header; the buffer may
/// be longer) so that none is longer than `max` bytes.
///
/// # Errors
/// [`FragError::DontFragment`], [`FragError::Fits`], a malformed header or options, a `max`
/// that leaves no 8 bytes of payload, or more than [`MAX_FRAGMENTS`] fragments.
pub fn plan(ip: &[u8], max: usize) -> Result<Plan, FragError> {
    let p = ipv4::Packet::new_checked(ip)?;
    if p.dont_frag() {
        return Err(FragError::DontFragment);
    }
    let total = usize::from(p.total_len());
    if total <= max {
        return Err(FragError::Fits);
    }
    let first_hl = p.header_len();
    let mut later_opts = [0u8; 40];
    let later_opts_len = copied_options(p.options(), &mut later_opts)?;
    let later_hl = ipv4::MIN_HEADER_LEN + later_opts_len;
    let chunk = |hl: usize| max.checked_sub(hl).map(|room| room & !7).filter(|&c| c > 0);
    let (Some(first_chunk), Some(later_chunk)) = (chunk(first_hl), chunk(later_hl)) else {
        return Err(FragError::TooSmall);
    };
    let payload = total - first_hl;
    let base_offset = usize::from(p.frag_offset());
    // A datagram ends by byte 65,535: beyond, no fragment offset could say where a piece goes.
    if base_offset + payload > usize::from(u16::MAX) {
        return Err(ParseError::BadLength.into());
    }
    let count = 1 + (payload - first_chunk.min(payload)).div_ceil(later_chunk);
    if count > MAX_FRAGMENTS {
        return Err(FragError::TooMany);
    }
    Ok(Plan {
        first_hl,
        later_opts,
        later_opts_len,
        first_chunk,
        later_chunk,
        payload,
        count,
        base_offset,
        more: p.more_frags(),
    })
}

/// The options of a later fragment: those of `opts` whose copy flag (0x80) is set, padded with
/// end-of-options to a multiple of 4 bytes; their length.
fn copied_options(opts: &[u8], out: &mut [u8; 40]) -> Result<usize, ParseError> {
    let (mut i, mut n) = (0, 0);
    while let Some(&kind) = opts.get(i) {
        match kind {
            // End of options: what follows is padding.
            0 => break,
            // No operation: not copied.
            1 => i += 1,
            _ => {
                let len = usize::from(*opts.get(i + 1).ok_or(ParseError::BadOption)?);
                let opt = opts
                    .get(i..i + len)
                    .filter(|_| len >= 2)
                    .ok_or(ParseError::BadOption)?;
                if kind & 0x80 != 0 {
                    out.get_mut(n..n + len)
                        .ok_or(ParseError::BadOption)?
                        .copy_from_slice(opt);
                    n += len;
                }
                i += len;
            }
        }
    }
    // `out` is zeroed: the padding is end-of-options.
    Ok(n.next_multiple_of(4))
}

impl Plan {
    /// Fragments in all (at least 2).
    pub fn count(&self) -> usize {
        self.count
    }

    /// Fragment `k`'s header length and its payload's offset and length in the packet's payload.
    fn part(&self, k: usize) -> (usize, usize, usize) {
        if k == 0 {
            return (self.first_hl, 0, self.first_chunk);
        }
        let start = self.first_chunk + (k - 1) * self.later_chunk;
        let len = self.later_chunk.min(self.payload.saturating_sub(start));
        (ipv4::MIN_HEADER_LEN + self.later_opts_len, start, len)
    }

    /// Length of fragment `k` (0: the first), header included.
    pub fn len(&self, k: usize) -> usize {
        let (hl, _, len) = self.part(k);
        hl + len
    }

    /// Writes fragment `k` (1 or more, below [`Plan::count`]) of the packet `ip` the plan was
    /// made for into `out`, which must hold [`Plan::len`]`(k)` bytes (the rest is left alone).
    ///
    /// # Errors
    /// [`FragError::NoRoom`] for a short `out`, [`FragError::Malformed`] for a packet that is
    /// not the one planned for (shorter than planned).
    pub fn write_later(&self, ip: &[u8], k: usize, out: &mut [u8]) -> Result<(), FragError> {
        let (hl, start, len) = self.part(k);
        if k == 0 || k >= self.count {
            return Err(FragError::TooMany);
        }
        let from = self.first_hl + start;
        let (Some(src_hdr), Some(payload)) =
            (ip.get(..ipv4::MIN_HEADER_LEN), ip.get(from..from + len))
        else {
            return Err(ParseError::Truncated.into());
        };
        let frag = out.get_mut(..hl + len).ok_or(FragError::NoRoom)?;
        frag[..ipv4::MIN_HEADER_LEN].copy_from_slice(src_hdr);
        frag[ipv4::MIN_HEADER_LEN..hl].copy_from_slice(&self.later_opts[..self.later_opts_len]);
        frag[hl..].copy_from_slice(payload);
        let last = k + 1 == self.count;
        self.set_header(frag, hl, self.base_offset + start, !last || self.more)
    }

    /// Turns the packet `ip` the plan was made for into its first fragment: MF set, total
    /// length [`Plan::len`]`(0)`, checksum. The caller trims the buffer to that length (after
    /// writing the later fragments, which are read from the bytes behind it).
    ///
    /// # Errors
    /// [`FragError::Malformed`] for a buffer shorter than the packet's header.
    pub fn make_first(&self, ip: &mut [u8]) -> Result<(), FragError> {
        let len = self.len(0);
        let hdr = ip.get_mut(..len).ok_or(ParseError::Truncated)?;
        self.set_header(hdr, self.first_hl, self.base_offset, true)
    }

    fn set_header(
        &self,
        frag: &mut [u8],
        hl: usize,
        offset: usize,
        more: bool,
    ) -> Result<(), FragError> {
        let total = u16::try_from(frag.len()).map_err(|_| ParseError::BadLength)?;
        let offset = u16::try_from(offset)
            .ok()
            .filter(|o| *o <= 0xfff8)
            .ok_or(ParseError::BadLength)?;
        let mut p = ipv4::Packet::new_unchecked(frag);
        p.set_version_and_header_len(hl);
        p.set_total_len(total);
        p.set_frag(false, more, offset);
        p.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An IPv4 packet: `opts` (a multiple of 4 bytes), `payload`, DF as given, at `offset`
    /// with MF `more`.
    fn packet(opts: &[u8], payload: &[u8], df: bool, offset: u16, more: bool) -> Vec<u8> {
        let hl = 20 + opts.len();
        let mut b = vec![0u8; hl + payload.len()];
        b[hl..].copy_from_slice(payload);
        b[20..hl].copy_from_slice(opts);
        let mut p = ipv4::Packet::new_unchecked(&mut b[..]);
        p.set_version_and_header_len(hl);
        p.set_dscp_ecn(0xb8);
        p.set_total_len(u16::try_from(hl + payload.len()).unwrap());
        p.set_ident(0x1234);
        p.set_frag(df, more, offset);
        p.set_ttl(63);
        p.set_protocol(17);
        p.set_src([198, 51, 100, 7].into());
        p.set_dst([192, 0, 2, 10].into());
        p.fill_checksum();
        b
    }

    /// Every fragment of `ip` under `max`: the first (made in place) and the later ones.
    fn split(ip: &[u8], max: usize) -> Result<Vec<Vec<u8>>, FragError> {
        let plan = plan(ip, max)?;
        let mut out = vec![Vec::new(); plan.count()];
        for (k, o) in out.iter_mut().enumerate().skip(1) {
            *o = vec![0xee; plan.len(k)];
            plan.write_later(ip, k, o)?;
        }
        let mut first = ip.to_vec();
        plan.make_first(&mut first)?;
        first.truncate(plan.len(0));
        out[0] = first;
        Ok(out)
    }

    /// RFC 791's reassembly of `frags` (any order): the header of the fragment at the lowest
    /// offset and the payload bytes in offset order; the datagram's offset and whether more
    /// follow it.
    fn reassemble(frags: &[Vec<u8>]) -> (Vec<u8>, usize, bool) {
        let mut parts: Vec<(usize, bool, &[u8], &[u8])> = frags
            .iter()
            .map(|f| {
                let p = ipv4::Packet::new_checked(&f[..]).unwrap();
                assert!(p.verify_checksum(), "checksum");
                assert_eq!(usize::from(p.total_len()), f.len());
                assert!(!p.dont_frag());
                let hl = p.header_len();
                (
                    usize::from(p.frag_offset()),
                    p.more_frags(),
                    &f[..hl],
                    &f[hl..],
                )
            })
            .collect();
        parts.sort_by_key(|p| p.0);
        let mut payload = Vec::new();
        for (off, _, _, data) in &parts {
            assert_eq!(*off, parts[0].0 + payload.len(), "contiguous");
            payload.extend_from_slice(data);
        }
        let last_more = parts.last().unwrap().1;
        for p in &parts[..parts.len() - 1] {
            assert!(p.1, "MF on every fragment but the last");
            assert_eq!(p.3.len() % 8, 0, "8-byte multiples but the last");
        }
        let mut d = parts[0].2.to_vec();
        d.extend_from_slice(&payload);
        (d, parts[0].0, last_more)
    }

    #[test]
    fn a_1500_byte_datagram_fits_a_1472_byte_limit_in_two() {
        let payload: Vec<u8> = (0..1480usize)
            .map(|i| u8::try_from(i % 251).unwrap())
            .collect();
        let ip = packet(&[], &payload, false, 0, false);
        let frags = split(&ip, 1472).unwrap();
        assert_eq!(frags.len(), 2);
        assert_eq!((frags[0].len(), frags[1].len()), (1468, 52));
        let (d, off, more) = reassemble(&frags);
        assert_eq!((off, more), (0, false));
        assert_eq!(&d[20..], &payload[..]);
        // Every header field but length, flags and checksum as it was.
        for f in &frags {
            assert_eq!(f[..2], ip[..2]);
            assert_eq!(f[4..6], ip[4..6]);
            assert_eq!(f[8..10], ip[8..10]);
            assert_eq!(f[12..20], ip[12..20]);
        }
    }

    #[test]
    fn what_cannot_or_need_not_be_fragmented_is_refused() {
        let ip = packet(&[], &[0; 100], true, 0, false);
        assert_eq!(plan(&ip, 60), Err(FragError::DontFragment));
        let ip = packet(&[], &[0; 100], false, 0, false);
        assert_eq!(plan(&ip, 120), Err(FragError::Fits));
        assert_eq!(plan(&ip, 27), Err(FragError::TooSmall));
        assert!(plan(&ip, 28).is_ok());
        let big = packet(&[], &[0; 1600], false, 0, false);
        assert_eq!(plan(&big, 100), Err(FragError::TooMany));
        assert!(matches!(plan(&ip[..30], 60), Err(FragError::Malformed(_))));
        // Options overrunning the header, or a zero length.
        let bad = packet(&[0x83, 9, 0, 0], &[0; 100], false, 0, false);
        assert!(matches!(plan(&bad, 60), Err(FragError::Malformed(_))));
        let bad = packet(&[0x44, 0, 0, 0], &[0; 100], false, 0, false);
        assert!(matches!(plan(&bad, 60), Err(FragError::Malformed(_))));
        // A fragment whose payload would end beyond byte 65,535 of its datagram (found by the
        // `frag` fuzz target).
        let far = packet(&[], &[0; 56], false, 65520, true);
        assert_eq!(
            plan(&far, 32),
            Err(FragError::Malformed(ParseError::BadLength))
        );
        let last = packet(&[], &[0; 15], false, 65520, false);
        assert_eq!(split(&last, 28).unwrap().len(), 2);
    }

    #[test]
    fn later_fragments_keep_only_the_copied_options() {
        // Record route (7, not copied), a NOP, security (0x82, copied, 4 bytes here), EOL.
        let opts = [7, 7, 4, 0, 0, 0, 0, 1, 0x82, 4, 0xaa, 0xbb, 0, 0, 0, 0];
        let ip = packet(&opts, &[5; 200], false, 0, false);
        let frags = split(&ip, 100).unwrap();
        assert_eq!(&frags[0][20..36], &opts[..], "the first keeps them all");
        for f in &frags[1..] {
            assert_eq!(ipv4::Packet::new_checked(&f[..]).unwrap().header_len(), 24);
            assert_eq!(&f[20..24], &[0x82, 4, 0xaa, 0xbb]);
        }
        let (d, _, _) = reassemble(&frags);
        assert_eq!(&d[36..], &[5; 200][..]);
    }

    proptest! {
        /// Any packet without DF over any limit with room for 8 bytes: every fragment within
        /// the limit, valid, and together the packet again (its offset and MF carried on).
        #[test]
        fn fragments_reassemble_to_the_packet(
            payload in proptest::collection::vec(any::<u8>(), 1..4000),
            max in 28usize..2000,
            copied in any::<bool>(),
            offset in 0u16..1000,
            more in any::<bool>(),
        ) {
            let opts: &[u8] = if copied { &[0x83, 7, 1, 2, 3, 4, 5, 1] } else { &[] };
            let ip = packet(opts, &payload, false, offset * 8, more);
            match split(&ip, max) {
                Ok(frags) => {
                    prop_assert!(frags.len() >= 2 && frags.len() <= MAX_FRAGMENTS);
                    for f in &frags {
                        prop_assert!(f.len() <= max, "{} over {max}", f.len());
                    }
                    let (d, off, last_more) = reassemble(&frags);
                    prop_assert_eq!(off, usize::from(offset) * 8);
                    prop_assert_eq!(last_more, more);
                    prop_assert_eq!(&d[20 + opts.len()..], &payload[..]);
                }
                Err(FragError::Fits) => prop_assert!(ip.len() <= max),
                Err(FragError::TooMany) => prop_assert!(ip.len() > max * 2),
                Err(FragError::TooSmall) => prop_assert!(max < 20 + opts.len() + 8),
                Err(e) => prop_assert!(false, "{e:?}"),
            }
        }

        /// Arbitrary bytes and limits never panic.
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200), max in 0usize..300) {
            if let Ok(plan) = plan(&b, max) {
                let mut out = [0u8; 300];
                for k in 1..plan.count() {
                    let _ = plan.write_later(&b, k, &mut out);
                }
                let mut first = b.clone();
                let _ = plan.make_first(&mut first);
            }
        }
    }
}
