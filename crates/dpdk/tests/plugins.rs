//! Every virtual-device driver Spillway supports is loaded from Debian's PMD
//! plugin directory and can be created, configured and started at runtime.
//! Needs root (tap and veth devices).

mod common;

use std::process::Command;

use dpdk::{Port, PortConfig, create_vdev};

struct Veth(String);

impl Veth {
    fn new(name: String) -> Veth {
        let peer = format!("{name}p");
        common::ip(&["link", "add", &name, "type", "veth", "peer", "name", &peer]);
        for dev in [&name, &peer] {
            let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"), "1");
            common::ip(&["link", "set", dev, "up"]);
        }
        Veth(name)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).status();
    }
}

#[test]
fn every_supported_virtual_driver_loads_and_starts() {
    let eal = common::eal(common::best_args());
    let pool = common::pool(eal, 4095);
    let tag = format!("{:x}", std::process::id() % 0xfffff);
    let dir = std::env::temp_dir().join(format!("spw-plugins-{tag}"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pcap_in = dir.join("in.pcap");
    // An empty pcap file (global header only) is a valid RX source.
    let mut hdr = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 1] {
        hdr.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(&pcap_in, hdr).expect("write pcap");
    let veth_pkt = Veth::new(format!("spwk{tag}"));
    let veth_xdp = Veth::new(format!("spwx{tag}"));
    let tap = format!("spwt{tag}");

    let devices = [
        ("net_null", "net_null_p".to_string(), String::new()),
        ("net_ring", "net_ring_p".to_string(), String::new()),
        (
            "net_pcap",
            "net_pcap_p".to_string(),
            format!(
                "rx_pcap={},tx_pcap={}",
                pcap_in.display(),
                dir.join("out.pcap").display()
            ),
        ),
        (
            "net_memif",
            "net_memif_p".to_string(),
            format!(
                "role=server,socket={},socket-abstract=no",
                dir.join("memif.sock").display()
            ),
        ),
        ("net_tap", "net_tap_p".to_string(), format!("iface={tap}")),
        (
            "net_af_packet",
            "net_af_packet_p".to_string(),
            format!("iface={}", veth_pkt.0),
        ),
        (
            "net_af_xdp",
            "net_af_xdp_p".to_string(),
            format!("iface={},start_queue=0,queue_count=1", veth_xdp.0),
        ),
    ];
    let mut started = Vec::new();
    for (driver, name, args) in &devices {
        let id = create_vdev(eal, name, args).unwrap_or_else(|e| panic!("{driver}: {e}"));
        let mut port = Port::configure(eal, id, &PortConfig::default(), &pool)
            .unwrap_or_else(|e| panic!("{driver}: {e}"));
        assert_eq!(
            port.driver(),
            *driver,
            "device {name} is driven by {driver}"
        );
        port.start().unwrap_or_else(|e| panic!("{driver}: {e}"));
        port.stats().unwrap_or_else(|e| panic!("{driver}: {e}"));
        started.push(port);
    }
    assert_eq!(started.len(), devices.len());
    drop(started);
    let _ = std::fs::remove_dir_all(&dir);
}
