//! `--health ADDR:PORT`: a TCP listener that Spillway's ordinary TCP and
//! HTTP health checks can probe (appliances are probed in plain, not
//! through the tunnel). A plain connect succeeds; an HTTP request, whatever
//! its method and path, is answered `200 OK`.
//!
//! Each client is served on a short-lived thread of its own with read and
//! write timeouts, at most [`MAX_CLIENTS`] at once (more are closed at once),
//! so a client that sends nothing, or never stops sending, neither blocks
//! the probes of others nor grows the appliance without bound.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use socket2::{Domain, Protocol, Socket, Type};

/// The answer to any request.
pub const RESPONSE: &[u8] = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\
Content-Length: 3\r\nConnection: close\r\n\r\nok\n";

/// Clients served at once; the next ones are closed without an answer.
pub const MAX_CLIENTS: usize = 64;

/// How long a client may take to send its request (and to take the answer).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// Bytes read at most before answering (a request head is far smaller).
const MAX_REQUEST: usize = 8192;

/// How often the accept loop looks at the stop flag.
const POLL: Duration = Duration::from_millis(20);

/// Binds the listener (`SO_REUSEADDR`, so that a restarted appliance binds
/// at once; an IPv6 one is IPv6-only, so that `0.0.0.0` and `::` both bind).
pub fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .context("creating a TCP socket")?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_address(true)?;
    s.bind(&addr.into())
        .with_context(|| format!("binding health listener TCP {addr}"))?;
    s.listen(128)
        .with_context(|| format!("listening on TCP {addr}"))?;
    let l: TcpListener = s.into();
    // Polled, so that the loop sees `stop`.
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Serves `listener` on a thread of its own until `stop` is set.
pub fn spawn(listener: TcpListener, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    std::thread::spawn(move || serve(&listener, &stop))
}

fn serve(listener: &TcpListener, stop: &AtomicBool) {
    let active = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(POLL);
                continue;
            }
            // Out of descriptors or an aborted connection: try again later,
            // never end the listener.
            Err(e) => {
                log::debug!("spillway-nva: health accept: {e}");
                std::thread::sleep(POLL);
                continue;
            }
        };
        if active.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
            active.fetch_sub(1, Ordering::AcqRel);
            drop(stream);
            continue;
        }
        let active = active.clone();
        let spawned = std::thread::Builder::new()
            .name("nva-health".into())
            .spawn({
                let active = active.clone();
                move || {
                    answer(stream);
                    active.fetch_sub(1, Ordering::AcqRel);
                }
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// One client: read until the end of a request head (or EOF, a timeout or
/// [`MAX_REQUEST`] bytes), answer, and close after the client does (closing
/// with unread bytes would reset the connection under the answer).
fn answer(mut s: TcpStream) {
    if s.set_nonblocking(false).is_err()
        || s.set_read_timeout(Some(CLIENT_TIMEOUT)).is_err()
        || s.set_write_timeout(Some(CLIENT_TIMEOUT)).is_err()
    {
        return;
    }
    let mut buf = [0u8; MAX_REQUEST];
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            // A plain connect that closes: nothing to answer.
            Ok(0) if got == 0 => return,
            Ok(0) => break,
            Ok(n) => {
                got += n;
                if buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    if s.write_all(RESPONSE).is_err() {
        return;
    }
    let _ = s.shutdown(Shutdown::Write);
    // Drain until the client closes, bounded in bytes and by the timeout.
    let mut left = 16 * MAX_REQUEST;
    while left > 0 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn start() -> (SocketAddr, Arc<AtomicBool>, JoinHandle<()>) {
        let l = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let addr = l.local_addr().expect("local addr");
        let stop = Arc::new(AtomicBool::new(false));
        let t = spawn(l, stop.clone());
        (addr, stop, t)
    }

    fn get(addr: SocketAddr) -> std::io::Result<String> {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: nva\r\nConnection: close\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    }

    #[test]
    fn answers_http_and_plain_connects() {
        let (addr, stop, t) = start();
        let r = get(addr).expect("get");
        assert!(r.starts_with("HTTP/1.0 200 OK\r\n"), "{r:?}");
        assert!(r.ends_with("\r\n\r\nok\n"), "{r:?}");
        // A TCP check connects and closes; the listener goes on.
        drop(TcpStream::connect(addr).expect("connect"));
        assert!(get(addr).expect("get").starts_with("HTTP/1.0 200 OK"));
        stop.store(true, Ordering::Relaxed);
        t.join().expect("listener ends on stop");
    }

    #[test]
    fn bad_clients_neither_block_nor_kill_it() {
        let (addr, stop, t) = start();
        // A client sending garbage without end, and one closing mid-request.
        let mut flood = TcpStream::connect(addr).expect("connect");
        let _ = flood.write_all(&[b'x'; 3 * MAX_REQUEST]);
        let mut half = TcpStream::connect(addr).expect("connect");
        half.write_all(b"GET / HT").expect("write");
        drop(half);
        // Silent clients, more than are served at once, held open.
        let silent: Vec<TcpStream> = (0..MAX_CLIENTS + 8)
            .map(|_| TcpStream::connect(addr).expect("connect"))
            .collect();
        // Once the silent ones time out, probes are answered again.
        let t0 = Instant::now();
        let answer = loop {
            match get(addr) {
                Ok(r) if r.starts_with("HTTP/1.0 200 OK") => break r,
                other => {
                    assert!(t0.elapsed() < Duration::from_secs(20), "{other:?}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        eprintln!(
            "answered {:?} after {:?} with {} silent clients",
            answer.lines().next(),
            t0.elapsed(),
            silent.len()
        );
        // The flooding client got its answer (or was cut off), never a hang.
        flood
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut r = Vec::new();
        let _ = flood.read_to_end(&mut r);
        assert!(r.is_empty() || r.starts_with(b"HTTP/1.0 200 OK"), "{r:?}");
        drop(silent);
        stop.store(true, Ordering::Relaxed);
        t.join().expect("listener ends on stop");
    }

    #[test]
    fn binds_v4_and_v6_wildcards_side_by_side() {
        let a = bind("0.0.0.0:0".parse().expect("addr")).expect("v4");
        let port = a.local_addr().expect("addr").port();
        // Hosts without IPv6 cannot bind it; that is not this test's concern.
        if let Ok(b) = bind(SocketAddr::new("::".parse().expect("addr"), port)) {
            assert_eq!(b.local_addr().expect("addr").port(), port);
        }
    }
}
