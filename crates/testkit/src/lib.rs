//! Spillway's test kit: one place for what tests build by hand.
//!
//! A dev-only crate (`publish = false`, used only as a dev-dependency):
//! its functions panic with a message on misuse or I/O errors instead of
//! returning errors, as tests want.
//!
//! * [`packet`]: Ethernet → IPv4/IPv6 → TCP/UDP/ICMP/raw frames with right
//!   checksums, options, VLAN tags, padding, fragments; tunnels through
//!   `wire`'s own encapsulation.
//! * [`config`]: configuration text (TOML) for the common shapes.
//! * [`pcap`]: classic pcap files, written and read.
//! * [`mutate`]: a seeded frame mutator for robustness tests.
//! * [`testpmd`]: a `dpdk-testpmd` memif client, the peer of memif tests.
//!
//! # Packets
//!
//! ```
//! use testkit::packet::{ACK, PSH, Packet, SYN, v4, v6};
//!
//! let (client, vip) = (v4("192.0.2.1"), v4("10.0.0.10"));
//! // Ethernet/IPv4/TCP SYN; defaults: MACs 02:..:01 -> 02:..:02, TTL 64,
//! // IPv4 id 1 with DF, seq 1, window 65535.
//! let syn: Vec<u8> = Packet::tcp(client, vip, 40000, 80, SYN).frame();
//! // Every field has a setter: same bytes as any hand-built frame.
//! let data = Packet::tcp(client, vip, 40000, 80, ACK | PSH)
//!     .seq(1001).ack(2001).ttl(61).ident(0x1234).payload(b"GET /")
//!     .macs([2, 0, 0, 0, 0, 0x77], [2, 0, 0, 0, 0, 1])
//!     .frame();
//! let dns = Packet::udp(client, vip, 5353, 53).payload(b"q").udp_checksum(false).frame();
//! let ping6 = Packet::echo(v6("2001:db8::1"), v6("2001:db8::10"), 7, 1).frame();
//! // ICMP errors quote a packet: `ip()` is the IP packet without Ethernet.
//! let quoted = Packet::tcp(vip, client, 80, 40000, ACK).ip();
//! let frag_needed = Packet::icmp(v4("203.0.113.1"), vip, 3, 4, 1400)
//!     .payload(&quoted[..28]).frame();
//! // Fragments of the datagram (checksum over the whole), 16 bytes each.
//! let pieces: Vec<Vec<u8>> = Packet::udp(client, vip, 1, 53).payload(&[0x55; 64])
//!     .ident(7).fragments(16);
//! // Anything else: `Packet::raw(src, dst, proto).payload(..)`, VLAN tags
//! // with `.vlan(0x8100, vid)`, Ethernet padding with `.min_frame(60)`,
//! // options with `.ip_options(..)` / `.tcp_options(..)`.
//! # let _ = (syn, data, dns, ping6, frag_needed, pieces);
//! ```
//!
//! Tunnels are built by `wire` as the balancer builds them:
//! `packet::encap(&frame, &packet::outer(src, dst), &Tunnel::Gue { port: 6080 })`
//! (adjust the returned `Outer`'s fields first if needed).
//!
//! # Configurations
//!
//! ```
//! use testkit::config::{Config, addrs, port, rule, service};
//!
//! let text = Config::new() // [node] name "t", region "r", zone "z"
//!     .dataplane("worker_cores", "[1]")
//!     .port(port("up", "net_pcap0", "uplink").strs("addresses", &["10.0.0.2/24"])
//!         .str("mac", "02:00:00:00:00:01"))
//!     .rule(rule("web", &["10.0.0.10"], "TCP", "80", "web"))
//!     .service(service("web", "ipip").set("gre_key", 7).endpoints(&addrs("10.0.1.", 3)))
//!     .raw("[[client_zones]]\nzone = \"z\"\nprefixes = [\"192.0.2.0/24\"]\n")
//!     .build();
//! assert!(text.contains("[[backend_services.groups]]"));
//! ```
//!
//! `str` quotes a value, `set` writes raw TOML (replacing an earlier value
//! of the key), `strs` writes a list of strings; `group(..)` and
//! `health_check(..)` build the other tables, `Table::child` nests them.
//!
//! # Captures
//!
//! ```no_run
//! use std::path::Path;
//! use testkit::pcap;
//!
//! let frames: Vec<Vec<u8>> = vec![];
//! pcap::write(Path::new("in.pcap"), &frames); // 1000 s on, 10 ms apart
//! let out: Vec<Vec<u8>> = pcap::read(Path::new("out.pcap")); // any magic or byte order
//! // Full control: nanoseconds, big-endian, snaplen, records cut short.
//! let format = pcap::Format { snaplen: 96, nanos: true, ..pcap::Format::default() };
//! let records = vec![pcap::Record { ts: pcap::default_ts(0), orig_len: 1514, data: vec![0; 96] }];
//! pcap::write_records(Path::new("cut.pcap"), &format, &records);
//! # let _ = out;
//! ```
//!
//! # Mutated frames
//!
//! ```
//! use testkit::mutate::Mutator;
//!
//! let mut m = Mutator::new(0x5eed);
//! let base = vec![vec![0u8; 60]];
//! let fuzzed: Vec<Vec<u8>> = m.mutants(&base, 1000); // one mutation each
//! // Or one at a time: m.flip_bits, m.truncate, m.overwrite, m.set_ethertype,
//! // m.set_ip_protocol, m.lie_about_length, m.noise, m.append_tail, m.grow.
//! # assert_eq!(fuzzed.len(), 1000);
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // dev-only: panics, as tests want

pub mod config;
pub mod mutate;
pub mod packet;
pub mod pcap;
pub mod testpmd;
pub mod tmp;
