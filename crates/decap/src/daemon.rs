//! `spillway decap` / `spillway-decap`: receives Spillway's tunnels on a backend host and
//! delivers the inner packets through a TUN device, so that servers listening
//! on the VIP (configured on `lo`) get the client's packets unchanged and
//! reply to the client directly (DSR).
//!
//! GUE and GENEVE arrive on UDP sockets; IPIP and GRE on raw IPv4 sockets
//! (which also keep the kernel from answering them with ICMP "protocol
//! unreachable"). One thread per socket; the TUN device is shared.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use socket2::{Domain, Protocol, Socket, Type};

/// Command-line arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Name of the TUN device to create.
    #[arg(long, default_value = "spwdecap0")]
    tun: String,
    /// GUE UDP port (0: off).
    #[arg(long, default_value_t = 6080)]
    gue_port: u16,
    /// GENEVE UDP port (0: off).
    #[arg(long, default_value_t = 6081)]
    geneve_port: u16,
    /// Accept IPv4-in-IPv4.
    #[arg(long)]
    ipip: bool,
    /// Accept GRE.
    #[arg(long)]
    gre: bool,
}

#[derive(Default)]
struct Counters {
    delivered: AtomicU64,
    refused: AtomicU64,
}

type Tun = Arc<Mutex<tun::Device>>;

/// Runs the decapsulator until SIGINT or SIGTERM.
pub fn run(args: &Args) -> Result<()> {
    let mut cfg = tun::Configuration::default();
    cfg.tun_name(&args.tun).mtu(9000).up();
    let dev = tun::create(&cfg).with_context(|| format!("creating TUN device {}", args.tun))?;
    let tun: Tun = Arc::new(Mutex::new(dev));
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    let counters = Arc::new(Counters::default());

    let mut threads = Vec::new();
    for (port, inner) in [
        (
            args.gue_port,
            crate::gue_inner as fn(&[u8]) -> Result<&[u8], crate::DecapError>,
        ),
        (args.geneve_port, crate::geneve_inner),
    ] {
        if port == 0 {
            continue;
        }
        let sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
            .with_context(|| format!("binding UDP port {port}"))?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let (tun, stop, counters) = (tun.clone(), stop.clone(), counters.clone());
        threads.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !stop.load(Ordering::Relaxed) {
                let Ok((n, _)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                deliver(&tun, &counters, inner(&buf[..n]));
            }
        }));
    }
    for (on, proto) in [(args.ipip, 4), (args.gre, 47)] {
        if !on {
            continue;
        }
        let sock = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(proto)))
            .with_context(|| format!("raw socket for IP protocol {proto} (needs root)"))?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        let (tun, stop, counters) = (tun.clone(), stop.clone(), counters.clone());
        threads.push(std::thread::spawn(move || {
            let mut bytes = vec![0u8; 65536];
            let mut scratch = vec![0u8; 65536 + 14];
            while !stop.load(Ordering::Relaxed) {
                // socket2's `Read` impl receives into initialised memory.
                let Ok(n) = (&sock).read(&mut bytes) else {
                    continue;
                };
                deliver(
                    &tun,
                    &counters,
                    crate::ip_tunnel_inner(&bytes[..n], &mut scratch),
                );
            }
        }));
    }
    log::info!(
        "spillway-decap: TUN {}; GUE port {}, GENEVE port {}, IPIP {}, GRE {}",
        args.tun,
        args.gue_port,
        args.geneve_port,
        args.ipip,
        args.gre
    );
    for t in threads {
        let _ = t.join();
    }
    log::info!(
        "spillway-decap: delivered {}, refused {}",
        counters.delivered.load(Ordering::Relaxed),
        counters.refused.load(Ordering::Relaxed)
    );
    Ok(())
}

fn deliver(tun: &Tun, counters: &Counters, inner: Result<&[u8], crate::DecapError>) {
    match inner {
        Ok(pkt) => {
            let ok = match tun.lock() {
                Ok(mut t) => t.write_all(pkt).is_ok(),
                Err(_) => false,
            };
            let c = if ok {
                &counters.delivered
            } else {
                &counters.refused
            };
            c.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            log::debug!("refused: {e}");
        }
    }
}
