//! VRRPv3 advertisements: any frame through `vrrp::parse_frame`; one it takes must rebuild,
//! with `advert_frame`, into a frame that parses to the same advertisement, and the data
//! plane's first test (`looks_like`) must have let it through.
#![no_main]
use core::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use wire::vrrp;

fuzz_target!(|data: &[u8]| {
    let Ok(a) = vrrp::parse_frame(data) else {
        return;
    };
    assert!(vrrp::looks_like(data));
    let addrs: Vec<IpAddr> = a.addrs().collect();
    assert_eq!(addrs.len(), a.count());
    assert!(addrs.iter().all(|x| x.is_ipv4() == a.src.is_ipv4()));
    let repr = vrrp::AdvertRepr {
        mac: a.mac,
        src: a.src,
        vrid: a.vrid,
        priority: a.priority,
        interval_cs: a.interval_cs,
        addrs: &addrs,
    };
    let mut b = vec![0u8; repr.frame_len()];
    let n = vrrp::advert_frame(&mut b, &repr).unwrap();
    let back = vrrp::parse_frame(&b[..n]).unwrap();
    assert_eq!(
        (
            back.src,
            back.mac,
            back.vrid,
            back.priority,
            back.interval_cs
        ),
        (a.src, a.mac, a.vrid, a.priority, a.interval_cs)
    );
    assert_eq!(back.addrs().collect::<Vec<_>>(), addrs);
});
