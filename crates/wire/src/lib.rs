//! Spillway's packet library: zero-copy header views, flow keys and in-place encapsulation.
//!
//! # Design
//!
//! Everything here is pure: no DPDK, no I/O, no allocation, no `unsafe`. The data plane
//! (on DPDK mbufs), the offline `replay` command, the backend-side decapsulator and the
//! reference NVA all share this crate, so that what is tested and fuzzed here is exactly
//! what runs in production.
//!
//! Each protocol module follows smoltcp's `wire` style:
//!
//! * a `Packet<T: AsRef<[u8]>>` (or similarly named) view over a byte buffer, with a private
//!   `field` module of byte offsets, `new_unchecked` / `new_checked` / `check_len`, getters on
//!   `AsRef<[u8]>` and setters on `AsMut<[u8]>`. **After a successful `check_len`, no accessor
//!   panics.** Bytes are never cast to packed structs; every field is read at its offset.
//! * a small `Copy` `Repr` with `parse` (from a checked view) and `emit` (into a view whose
//!   buffer is at least `header_len()` long).
//!
//! On top of the headers:
//!
//! * [`packet`] parses a received Ethernet frame into a [`packet::PacketInfo`] (offsets,
//!   addresses, ports, fragment state, the quoted flow of ICMP errors) in one pass.
//! * [`flow`] builds [`flow::FlowKey`]s (5-, 3-, 2-tuple, ICMP-error inner flow, symmetric)
//!   and the stable `spillway-flow-v1` hash.
//! * [`buf`] defines the [`buf::PacketBuf`] trait that DPDK mbufs and the in-memory
//!   [`buf::MemBuf`] implement.
//! * [`encap`] encapsulates and decapsulates in place for every delivery mode of M8 and
//!   performs the GENEVE return-path rewrite of M32.
//! * [`frag`] splits an IPv4 packet without DF into fragments that fit the egress MTU once
//!   encapsulated (M48), each then encapsulated on its own.
//! * [`ndp`] validates IPv6 neighbor solicitations and answers them in place for the
//!   balancer's addresses; [`reply`] turns a TCP segment into the reset that answers it
//!   (M14). Both rewrite the received frame instead of building a new one.
//!
//! Malformed input is reported through small typed error enums ([`error`]); the data plane
//! turns them into drop counters.
#![cfg_attr(not(test), no_std)]

pub mod arp;
pub mod buf;
pub mod burst;
mod cast;
pub mod checksum;
pub mod encap;
pub mod error;
pub mod esp;
pub mod ethernet;
pub mod flow;
pub mod frag;
pub mod geneve;
pub mod gre;
pub mod gue;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod ndp;
pub mod neighbour;
pub mod packet;
pub mod reply;
pub mod tcp;
pub mod udp;
pub mod vrrp;
pub mod vxlan;

pub use error::{BufError, DecapError, EncapError, NdpError, ParseError, ReplyError};

/// Reads a big-endian `u16` at `off`. Panics if out of bounds: callers check lengths first.
#[inline(always)]
pub(crate) fn rd16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

/// Reads a big-endian `u32` at `off`.
#[inline(always)]
pub(crate) fn rd32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Writes a big-endian `u16` at `off`.
#[inline(always)]
pub(crate) fn wr16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian `u32` at `off`.
#[inline(always)]
pub(crate) fn wr32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

/// Copies `N` bytes starting at `off` into an array.
#[inline(always)]
pub(crate) fn arr<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[off..off + N]);
    a
}

/// Returns `Err(ParseError::Truncated)` unless `b` holds at least `n` bytes.
#[inline(always)]
pub(crate) fn need(b: &[u8], n: usize) -> Result<(), ParseError> {
    if b.len() < n {
        Err(ParseError::Truncated)
    } else {
        Ok(())
    }
}
