//! The accept loops of the project's listeners (M50): one rule for the
//! daemon's control socket and `/status` `/metrics` endpoint
//! (`control::listen`) and for the zone health service's
//! (`zonehealth::service`).
//!
//! A loop accepts for ever, takes a slot for each connection or turns it
//! away with the listener's `busy` answer, and serves each admitted one on
//! a task of its own, which gives its slot back however it ends:
//!
//! - [`admitted`]: an HTTP listener, whose slots are an [`Admission`]'s
//!   (allow list, per-client caps; a connection may lose its slot to a
//!   client of a higher class or below its fair share, and is then told
//!   `busy` and closed);
//! - [`limited`]: a control socket, `max` slots for its peers (the
//!   host's operators, checked by their credentials by the handler).
//!
//! What a connection is asked, within which deadlines, and how it is
//! answered is the handler's: the listeners differ there (the daemon's
//! answers come from its management loop, HTTP/1.0, with one deadline
//! for the whole request; the zone health service's from its engine,
//! HTTP/1.1), and their answers must stay what they are. What the loops
//! did besides serving ([`Event`]) goes to the listener, which counts and
//! logs it as it does.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Semaphore;

use crate::admission::{Admission, Refused};

/// The wait after a failed `accept` (out of file descriptors, say), so
/// that a failure that persists does not spin.
pub const RETRY: Duration = Duration::from_millis(100);

/// One admitted HTTP connection's work, borrowing its stream (which the
/// loop keeps, to tell it `busy` when its slot goes to another client).
pub type Exchange<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What a loop did besides serving a connection, for the listener's
/// counters and log; `P` is the peer's address.
#[derive(Debug)]
pub enum Event<'a, P> {
    /// `accept` failed; tried again after [`RETRY`].
    AcceptFailed(&'a std::io::Error),
    /// A connection refused (a listener of fixed slots refuses only
    /// [`Refused::Full`]): told `busy` (but [`Refused::Denied`]: nothing)
    /// and closed at once.
    Refused(Refused, &'a P),
    /// A connection whose slot went to another client: told `busy` and
    /// closed.
    Evicted(&'a P),
}

/// Writes `msg` if the socket takes it right away; never waits for a
/// client that does not read.
pub async fn try_write<S: AsyncWrite + Unpin>(stream: &mut S, msg: &[u8]) {
    let _ = tokio::time::timeout(Duration::ZERO, stream.write_all(msg)).await;
}

/// The next connection, or `None` after a failed `accept` (noted, then
/// [`RETRY`] waited).
async fn next<S, P>(
    accept: &mut impl AsyncFnMut() -> std::io::Result<(S, P)>,
    note: &impl Fn(Event<'_, P>),
) -> Option<(S, P)> {
    match accept().await {
        Ok(c) => Some(c),
        Err(e) => {
            note(Event::AcceptFailed(&e));
            tokio::time::sleep(RETRY).await;
            None
        }
    }
}

/// Accepts for ever, admitting each connection as `admission` rules;
/// `serve` serves an admitted one on a task of its own until it is done
/// or its slot goes to another client. (`accept` is best an `async move`
/// closure owning its listener: rustc cannot tell that the loop of one
/// that borrows it is `Send`, for `tokio::spawn`.)
pub async fn admitted<S, N, F>(
    mut accept: impl AsyncFnMut() -> std::io::Result<(S, SocketAddr)>,
    admission: Arc<Admission>,
    busy: &'static [u8],
    note: N,
    serve: F,
) where
    S: AsyncWrite + Unpin + Send + 'static,
    N: Fn(Event<'_, SocketAddr>) + Send + Sync + 'static,
    F: for<'a> Fn(&'a mut S, SocketAddr) -> Exchange<'a> + Send + Sync + 'static,
{
    let note = Arc::new(note);
    let serve = Arc::new(serve);
    loop {
        let Some((mut stream, peer)) = next(&mut accept, &*note).await else {
            continue;
        };
        let mut slot = match admission.admit(peer.ip()) {
            Ok((slot, _)) => slot,
            Err(why) => {
                note(Event::Refused(why, &peer));
                // A denied address learns nothing, not even that it is.
                if why != Refused::Denied {
                    try_write(&mut stream, busy).await;
                }
                continue;
            }
        };
        let (note, serve) = (note.clone(), serve.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = serve(&mut stream, peer) => {}
                () = slot.evicted() => {
                    note(Event::Evicted(&peer));
                    try_write(&mut stream, busy).await;
                }
            }
            drop(slot);
        });
    }
}

/// Accepts for ever, serving at most `max` connections at once, each by
/// `serve` on a task of its own; a connection beyond them is told `busy`
/// and closed.
pub async fn limited<S, P, N, W>(
    mut accept: impl AsyncFnMut() -> std::io::Result<(S, P)>,
    max: usize,
    busy: &'static [u8],
    note: N,
    serve: impl Fn(S, P) -> W,
) where
    S: AsyncWrite + Unpin,
    N: Fn(Event<'_, P>),
    W: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(max));
    loop {
        let Some((mut stream, peer)) = next(&mut accept, &note).await else {
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            note(Event::Refused(Refused::Full, &peer));
            try_write(&mut stream, busy).await;
            continue;
        };
        let work = serve(stream, peer);
        tokio::spawn(async move {
            let _slot = slot;
            work.await;
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::io::{AsyncReadExt, DuplexStream};
    use tokio::sync::{mpsc, oneshot};

    use super::*;
    use crate::admission::Policy;

    const BUSY: &[u8] = b"busy\n";

    /// What the loop noted, as text.
    type Seen = Arc<Mutex<Vec<String>>>;

    fn noter<P: std::fmt::Debug>(seen: &Seen) -> impl Fn(Event<'_, P>) + Send + Sync + 'static {
        let seen = seen.clone();
        move |e| seen.lock().unwrap().push(format!("{e:?}"))
    }

    /// A client's end and the loop's, from `peer`.
    fn connect(to: &mpsc::UnboundedSender<(DuplexStream, SocketAddr)>, peer: &str) -> DuplexStream {
        let (client, server) = tokio::io::duplex(1024);
        to.send((server, peer.parse().unwrap())).unwrap();
        client
    }

    async fn read_all(mut s: DuplexStream) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        out
    }

    #[tokio::test]
    async fn a_peer_takes_a_slot_others_are_told_busy() {
        let (to, mut from) = mpsc::unbounded_channel();
        let seen = Seen::default();
        let policy = Policy {
            allow: None,
            peers: vec!["10.0.0.9/32".parse().unwrap()],
        };
        let admission = Admission::new(1, 1, policy);
        // Each connection is answered "served" once its client closes.
        let run = tokio::spawn(admitted(
            async move || from.recv().await.ok_or(std::io::ErrorKind::Other.into()),
            admission.clone(),
            BUSY,
            noter(&seen),
            |s: &mut DuplexStream, _| {
                Box::pin(async move {
                    let mut buf = Vec::new();
                    let _ = s.read_to_end(&mut buf).await;
                    try_write(s, b"served\n").await;
                })
            },
        ));
        let held = connect(&to, "10.0.0.1:1000");
        while admission.is_empty() {
            tokio::task::yield_now().await;
        }
        // Full, and of its own class: busy.
        assert_eq!(read_all(connect(&to, "10.0.0.2:1000")).await, BUSY);
        // A peer takes the held connection's slot.
        let mut peer = connect(&to, "10.0.0.9:1000");
        assert_eq!(read_all(held).await, BUSY);
        peer.shutdown().await.unwrap();
        assert_eq!(read_all(peer).await, b"served\n");
        run.abort();
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "Refused(Full, 10.0.0.2:1000)".to_owned(),
                "Evicted(10.0.0.1:1000)".to_owned()
            ]
        );
    }

    #[tokio::test]
    async fn a_connection_beyond_max_is_told_busy_until_a_slot_is_free() {
        let (to, mut from) = mpsc::unbounded_channel();
        let seen = Seen::default();
        let (release, released) = oneshot::channel::<()>();
        let released = Arc::new(Mutex::new(Some(released)));
        let run = tokio::spawn(limited(
            async move || from.recv().await.ok_or(std::io::ErrorKind::Other.into()),
            1,
            BUSY,
            noter(&seen),
            move |mut s: DuplexStream, _| {
                let wait = released.lock().unwrap().take();
                async move {
                    if let Some(w) = wait {
                        let _ = w.await;
                    }
                    try_write(&mut s, b"served\n").await;
                }
            },
        ));
        let first = connect(&to, "10.0.0.1:1");
        assert_eq!(read_all(connect(&to, "10.0.0.1:2")).await, BUSY);
        release.send(()).unwrap();
        assert_eq!(read_all(first).await, b"served\n");
        assert_eq!(read_all(connect(&to, "10.0.0.1:3")).await, b"served\n");
        run.abort();
        assert_eq!(*seen.lock().unwrap(), ["Refused(Full, 10.0.0.1:2)"]);
    }
}
