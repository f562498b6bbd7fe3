//! The DNS client of Spillway's zone health service (M51): it publishes a
//! name's A/AAAA set on a real authoritative server with RFC 2136 dynamic
//! updates signed with TSIG (RFC 8945), and reads what the server holds
//! with plain queries.
//!
//! [`name`] encodes and decodes domain names, [`message`] builds queries
//! and updates and parses any message strictly (every length checked,
//! compression pointers only backwards), [`tsig`] signs requests and
//! verifies signed answers, and [`client`] talks to the server over TCP
//! (updates and answers of any size, no truncation to handle).
//!
//! No state is kept between calls: the caller reads the server's RRsets,
//! decides, and sends the minimal update, guarded by prerequisites so that
//! two publishers never undo each other's work unseen.

pub mod client;
pub mod message;
pub mod name;
pub mod tsig;

pub use client::{Client, ClientError};
pub use message::{Message, Op, ParseError, Prereq, Rcode, Rdata, Record, rtype};
pub use name::Name;
pub use tsig::{Algorithm, Key, KeyError};
