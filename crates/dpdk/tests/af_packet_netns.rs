//! A DPDK `net_af_packet` port on one end of a veth pair whose other end is in
//! a network namespace made by this test: the kernel in the namespace and our
//! port exchange real frames in both directions. Needs root and iproute2.

#![allow(clippy::cast_possible_truncation)] // test values are small
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: fail loudly

mod common;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use dpdk::{MbufBurst, Port, PortConfig, create_vdev};

const NS_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const OUR_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

/// A namespace and a veth pair, removed on drop (also when the test fails).
struct Lab {
    ns: String,
    host_if: String,
    ns_if: String,
}

impl Lab {
    fn new() -> Lab {
        let tag = format!("{:x}{:04x}", std::process::id() % 0xfffff, rand_u16());
        let lab = Lab {
            ns: format!("spw-t-{tag}"),
            host_if: format!("spwh{tag}"),
            ns_if: format!("spwn{tag}"),
        };
        assert!(lab.host_if.len() <= 15, "interface names fit IFNAMSIZ");
        common::ip(&["netns", "add", &lab.ns]);
        common::ip(&[
            "link",
            "add",
            &lab.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &lab.ns_if,
        ]);
        common::ip(&["link", "set", &lab.ns_if, "netns", &lab.ns]);
        // No IPv6 on the host side: keeps router solicitations off our port.
        let _ = std::fs::write(
            format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", lab.host_if),
            "1",
        );
        common::ip(&["link", "set", &lab.host_if, "up"]);
        common::ip(&["-n", &lab.ns, "link", "set", "lo", "up"]);
        common::ip(&[
            "-n",
            &lab.ns,
            "addr",
            "add",
            &format!("{NS_ADDR}/24"),
            "dev",
            &lab.ns_if,
        ]);
        common::ip(&["-n", &lab.ns, "link", "set", &lab.ns_if, "up"]);
        lab
    }

    /// Runs `f` on a thread that has entered the namespace.
    fn in_ns<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = format!("/var/run/netns/{}", self.ns);
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("open netns");
            nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

fn rand_u16() -> u16 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.subsec_nanos() ^ (t.subsec_nanos() >> 16)) as u16
}

/// Finds the UDP frame from the namespace carrying `payload`.
fn is_udp_with_payload(frame: &[u8], payload: &[u8]) -> bool {
    frame.len() >= 42
        && frame[12..14] == [0x08, 0x00]
        && frame[23] == 17
        && frame[26..30] == NS_ADDR.octets()
        && frame[30..34] == OUR_ADDR.octets()
        && frame.ends_with(payload)
}

#[test]
fn af_packet_port_exchanges_frames_with_a_namespace() {
    let lab = Lab::new();
    let eal = common::eal(common::best_args());
    let pool = common::pool(eal, 1023);
    let start = pool.in_use();
    let id = create_vdev(
        eal,
        &common::unique("net_af_packet_t"),
        &format!("iface={}", lab.host_if),
    )
    .expect("create net_af_packet vdev");
    let mut port = Port::configure(eal, id, &PortConfig::default(), &pool).expect("configure");
    port.start().expect("start");
    let our_mac = port.mac();
    let mac_str: Vec<String> = our_mac.iter().map(|b| format!("{b:02x}")).collect();
    common::ip(&[
        "-n",
        &lab.ns,
        "neigh",
        "replace",
        &OUR_ADDR.to_string(),
        "lladdr",
        &mac_str.join(":"),
        "dev",
        &lab.ns_if,
    ]);

    {
        let mut rxq = port.rx_queue(0).expect("rx queue");
        let mut txq = port.tx_queue(0).expect("tx queue");

        // 1. The namespace's kernel sends a UDP datagram; our port receives it.
        let to_us = format!("from-namespace-{}", std::process::id()).into_bytes();
        let sent = to_us.clone();
        lab.in_ns(move || {
            let s = UdpSocket::bind(SocketAddrV4::new(NS_ADDR, 0)).expect("bind in ns");
            for _ in 0..3 {
                s.send_to(&sent, SocketAddrV4::new(OUR_ADDR, 9999))
                    .expect("send in ns");
                std::thread::sleep(Duration::from_millis(50));
            }
        })
        .join()
        .expect("namespace sender");
        let mut rx = MbufBurst::<32>::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut ns_mac = None;
        while ns_mac.is_none() && Instant::now() < deadline {
            rx.clear();
            rxq.rx_burst(&mut rx);
            ns_mac = rx
                .as_slice()
                .iter()
                .find(|m| is_udp_with_payload(m.data(), &to_us))
                .map(|m| <[u8; 6]>::try_from(&m.data()[6..12]).expect("6 bytes"));
            std::thread::sleep(Duration::from_millis(5));
        }
        rx.clear();
        let ns_mac = ns_mac.expect("the namespace's datagram reached our port");

        // 2. We send a UDP datagram; the namespace's kernel delivers it to a socket.
        let to_ns = format!("from-dpdk-{}", std::process::id()).into_bytes();
        let expect = to_ns.clone();
        let receiver = lab.in_ns(move || {
            let s = UdpSocket::bind(SocketAddrV4::new(NS_ADDR, 9998)).expect("bind in ns");
            s.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let mut buf = [0u8; 256];
            s.recv_from(&mut buf)
                .map(|(n, from)| (buf[..n].to_vec(), from))
        });
        std::thread::sleep(Duration::from_millis(200)); // let the receiver bind
        let frame = common::udp_frame(
            our_mac,
            ns_mac,
            OUR_ADDR.octets(),
            NS_ADDR.octets(),
            12345,
            9998,
            &to_ns,
        );
        let mut tx = MbufBurst::<32>::new();
        for _ in 0..3 {
            let mut m = pool.alloc().expect("alloc");
            m.set_data(&frame).expect("fits");
            tx.push(m).expect("room");
        }
        let (sent, dropped) = txq.tx_burst_or_drop(&mut tx);
        assert_eq!((sent, dropped), (3, 0));
        let (got, from) = receiver
            .join()
            .expect("receiver thread")
            .expect("datagram delivered in the namespace");
        assert_eq!(got, expect);
        assert_eq!(from, SocketAddrV4::new(OUR_ADDR, 12345).into());
    }
    port.stop().expect("stop");
    drop(port);
    assert_eq!(pool.in_use(), start, "no mbuf leaked");
}
