//! Talking to the authoritative server: one TCP connection per exchange
//! (RFC 7766; updates and answers of any size, nothing to retransmit),
//! every request signed, every answer verified.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::message::{Message, Op, ParseError, Prereq, Rcode, Record};
use crate::name::Name;
use crate::tsig::{Key, VerifyError};

/// Why an exchange with the server failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// the server could not be reached, or the exchange timed out
    #[error("{what} {server}: {source}")]
    Io {
        /// what was being done
        what: &'static str,
        /// the server
        server: SocketAddr,
        /// why
        source: std::io::Error,
    },
    /// the answer is not a DNS message
    #[error("the server's answer is malformed: {0}")]
    Malformed(#[from] ParseError),
    /// the answer belongs to another request
    #[error("the server answered another request (ID {got:#06x}, ours {want:#06x})")]
    WrongId {
        /// its ID
        got: u16,
        /// ours
        want: u16,
    },
    /// the server refused our signature (BADSIG, BADKEY, BADTIME with NOTAUTH)
    #[error(
        "the server refused the request's TSIG signature: {0} (check the key name, algorithm and secret)"
    )]
    KeyRefused(Rcode),
    /// the server answered with an error code
    #[error("the server answered {0}")]
    Rcode(Rcode),
    /// an update's prerequisite did not hold: someone else changed the
    /// RRsets since they were read
    #[error("the records changed since they were read ({0})")]
    Changed(Rcode),
    /// the answer's signature did not verify: never trusted
    #[error("the server's answer failed TSIG verification: {0}")]
    Verify(#[from] VerifyError),
}

impl ClientError {
    /// Whether trying again later may help (the server unreachable or busy)
    /// rather than the configuration being wrong.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Io { .. } | ClientError::Changed(_) => true,
            ClientError::Rcode(r) => *r == Rcode::SERVFAIL,
            _ => false,
        }
    }
}

/// A client of one authoritative server, with one key.
#[derive(Debug, Clone)]
pub struct Client {
    server: SocketAddr,
    key: Key,
    timeout: Duration,
}

/// Message IDs: different for every request of the process (TCP and TSIG
/// already tie an answer to its request; the ID is checked too).
static NEXT_ID: AtomicU16 = AtomicU16::new(0);

fn next_id() -> u16 {
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    NEXT_ID.fetch_add(1, Ordering::Relaxed) ^ (seed & 0xffff) as u16
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Client {
    /// A client of `server`, signing with `key`; each exchange (connect,
    /// send, answer) takes at most `timeout`.
    pub fn new(server: SocketAddr, key: Key, timeout: Duration) -> Client {
        Client {
            server,
            key,
            timeout,
        }
    }

    /// The server.
    pub fn server(&self) -> SocketAddr {
        self.server
    }

    /// The RRset of `rtype` at `name` as the server holds it (empty when the
    /// name or the RRset does not exist).
    pub fn rrset(&self, name: &Name, rtype: u16) -> Result<Vec<Record>, ClientError> {
        let answer = self.exchange(&Message::query(next_id(), name, rtype))?;
        match answer.rcode() {
            Rcode::NOERROR | Rcode::NXDOMAIN => Ok(answer
                .answers
                .into_iter()
                .filter(|r| r.rtype == rtype && &r.name == name)
                .collect()),
            r => Err(ClientError::Rcode(r)),
        }
    }

    /// Sends the update of `zone`: `ops` applied if every prerequisite
    /// holds, all or nothing.
    pub fn update(&self, zone: &Name, prereqs: &[Prereq], ops: &[Op]) -> Result<(), ClientError> {
        let answer = self.exchange(&Message::update(next_id(), zone, prereqs, ops))?;
        match answer.rcode() {
            Rcode::NOERROR => Ok(()),
            r @ (Rcode::YXRRSET | Rcode::NXRRSET) => Err(ClientError::Changed(r)),
            r => Err(ClientError::Rcode(r)),
        }
    }

    /// One signed request and its verified answer.
    fn exchange(&self, req: &Message) -> Result<Message, ClientError> {
        let (bytes, mac) = self.key.sign(&req.encode(), now_secs());
        let raw = self.round_trip(&bytes)?;
        let answer = Message::parse(&raw)?;
        if answer.id != req.id || !answer.is_response() {
            return Err(ClientError::WrongId {
                got: answer.id,
                want: req.id,
            });
        }
        if let Some(r) = Key::refused(&answer) {
            return Err(ClientError::KeyRefused(r));
        }
        // A server that answers a signed request unsigned is either not
        // checking signatures at all or not the server: an error either way
        // (a NOTAUTH / REFUSED unsigned says why).
        match self.key.verify(&raw, &answer, &mac, now_secs()) {
            Ok(()) => Ok(answer),
            Err(VerifyError::Unsigned) if answer.rcode() != Rcode::NOERROR => {
                Err(ClientError::Rcode(answer.rcode()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Sends `bytes` with its length prefix and reads one answer.
    fn round_trip(&self, bytes: &[u8]) -> Result<Vec<u8>, ClientError> {
        let io = |what| {
            let server = self.server;
            move |source| ClientError::Io {
                what,
                server,
                source,
            }
        };
        let deadline = Instant::now() + self.timeout;
        let left = || {
            deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::TimedOut))
        };
        let mut s =
            TcpStream::connect_timeout(&self.server, self.timeout).map_err(io("connecting to"))?;
        s.set_nodelay(true).map_err(io("connecting to"))?;
        let len = u16::try_from(bytes.len()).map_err(|_| {
            io("sending to")(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "request over 65535 bytes",
            ))
        })?;
        s.set_write_timeout(Some(left().map_err(io("sending to"))?))
            .map_err(io("sending to"))?;
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend(bytes);
        s.write_all(&framed).map_err(io("sending to"))?;
        let mut read = |buf: &mut [u8]| -> std::io::Result<()> {
            let mut at = 0;
            while at < buf.len() {
                s.set_read_timeout(Some(left()?))?;
                match s.read(&mut buf[at..]) {
                    Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                    Ok(n) => at += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        };
        let mut len = [0u8; 2];
        read(&mut len).map_err(io("waiting for the answer of"))?;
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
        read(&mut answer).map_err(io("reading the answer of"))?;
        Ok(answer)
    }
}
