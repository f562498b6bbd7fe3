//! The reference appliance's decision on arbitrary UDP payloads, under every tamper mode and
//! a rule: an answer is the input but for what the mode changes, and stays well-formed GENEVE.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nva::{Config, DropReason, Tamper, answer};
use wire::geneve::{GatewayOptions, OptionIds, Packet};

fuzz_target!(|data: &[u8]| {
    let rules = vec!["tcp * -> *:22".parse().unwrap()];
    for tamper in [Tamper::None, Tamper::Cookie, Tamper::StripOptions] {
        let cfg = Config { tamper, rules: rules.clone(), ..Config::default() };
        match answer(&cfg, data) {
            Ok(a) => {
                let back = Packet::new_checked(&a.payload[..]).unwrap();
                let hdr = Packet::new_checked(data).unwrap().header_len();
                assert_eq!(back.payload(), &data[hdr..]);
                let opts = GatewayOptions::parse(&OptionIds::DEFAULT, back.options()).unwrap();
                match tamper {
                    Tamper::None => assert_eq!(a.payload, data),
                    Tamper::Cookie => assert_eq!(opts.cookie, a.flow.cookie.map(|c| !c)),
                    Tamper::StripOptions => assert_eq!(back.options_len(), 0),
                }
                assert!(a.flow.ports.is_none_or(|p| p.1 != 22) || a.flow.proto != 6);
            }
            Err((DropReason::Rule, flow)) => assert!(flow.is_some()),
            Err(_) => {}
        }
    }
});
