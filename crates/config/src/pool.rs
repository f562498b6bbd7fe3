//! VIPs from the availability groups' pools (M5): a rule that gives no
//! `vips` gets one address per availability group with a `vip_pool` of its
//! `ip_version`, before validation sees the file.
//!
//! The allocation is a function of the configuration alone, never of the
//! order of its rules, so every node of a cluster allocates alike: the rules
//! are visited by name, and each starts at an address chosen by a hash of
//! its name and group, stepping past addresses taken (by any rule's own
//! `vips`, or a rule allocated before it). Nothing of one node's own enters
//! into it: a pool holding the node's own address is refused instead, or
//! nodes would step past different addresses. A later
//! edit can still move an allocated VIP (a new rule whose name sorts first
//! may take a contested address); the daemon refuses such a reload unless
//! forced, and writing the VIP into the rule pins it.

use std::net::IpAddr;

use crate::schema::{Config, IpVersion};
use crate::values::{Prefix, Vip};

/// Why allocation failed: (field path, reason), like validation's errors.
pub type PoolError = (String, String);

/// Fills the `vips` of every rule that does not write them (`written`
/// answers whether the file writes a field path: `vips = []` is written,
/// and validation refuses it), from the pools.
///
/// # Errors
/// Each pool that cannot be used (a prefix with host bits, a group other
/// than 0 or 1, a group listed twice, pools of the two groups sharing an
/// address) and each rule whose VIPs cannot be allocated (no pool of its IP
/// version for group 0, a pool with no address left, `ip_version` beside
/// explicit `vips`).
pub fn allocate(cfg: &mut Config, written: impl Fn(&str) -> bool) -> Result<(), Vec<PoolError>> {
    let mut errors = check_pools(cfg);
    for (i, r) in cfg.forwarding_rules.iter().enumerate() {
        if r.ip_version.is_some() && !r.vips.is_empty() {
            errors.push((
                format!("forwarding_rules[{i}].ip_version"),
                "ip_version applies to VIPs allocated from a pool: this rule gives its vips".into(),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // Taken: every VIP written in the file.
    let mut taken: Vec<Vip> = cfg
        .forwarding_rules
        .iter()
        .flat_map(|r| r.vips.iter().copied())
        .collect();
    let mut order: Vec<usize> = (0..cfg.forwarding_rules.len())
        .filter(|&i| !written(&format!("forwarding_rules[{i}].vips")))
        .collect();
    order.sort_by(|&a, &b| {
        cfg.forwarding_rules[a]
            .name
            .cmp(&cfg.forwarding_rules[b].name)
    });
    for i in order {
        let (name, version) = {
            let r = &cfg.forwarding_rules[i];
            (r.name.clone(), r.ip_version.unwrap_or_default())
        };
        let mut vips = Vec::new();
        for group in 0..=1u8 {
            let spans = pool_spans(cfg, group, version);
            if spans.is_empty() {
                if group == 0 {
                    errors.push((
                        format!("forwarding_rules[{i}].vips"),
                        format!(
                            "no vips, and availability group 0 has no vip_pool of {} addresses to allocate one from",
                            version_name(version)
                        ),
                    ));
                }
                break;
            }
            match pick(&name, group, &spans, &taken) {
                Some(a) => {
                    let v = Vip::host(a);
                    taken.push(v);
                    vips.push(v);
                }
                None => {
                    errors.push((
                        format!("forwarding_rules[{i}].vips"),
                        format!(
                            "no vips, and availability group {group}'s vip_pool has no {} address left",
                            version_name(version)
                        ),
                    ));
                    break;
                }
            }
        }
        let r = &mut cfg.forwarding_rules[i];
        r.vips = vips;
        r.vips_from_pool = true;
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn version_name(v: IpVersion) -> &'static str {
    match v {
        IpVersion::V4 => "IPv4",
        IpVersion::V6 => "IPv6",
    }
}

/// The pools' own errors.
fn check_pools(cfg: &Config) -> Vec<PoolError> {
    let mut errors = Vec::new();
    for (i, g) in cfg.availability_groups.iter().enumerate() {
        let at = format!("availability_groups[{i}]");
        if g.group > 1 {
            errors.push((
                format!("{at}.group"),
                format!(
                    "availability group {} does not exist: groups are 0 and 1",
                    g.group
                ),
            ));
        }
        if cfg.availability_groups[..i]
            .iter()
            .any(|o| o.group == g.group)
        {
            errors.push((
                format!("{at}.group"),
                format!("availability group {} is listed twice", g.group),
            ));
        }
        if g.vip_pool.is_empty() {
            errors.push((
                format!("{at}.vip_pool"),
                "an empty pool allocates nothing: omit the group".into(),
            ));
        }
        for (k, p) in g.vip_pool.iter().enumerate() {
            if p.has_host_bits() {
                errors.push((
                    format!("{at}.vip_pool[{k}]"),
                    format!(
                        "{p} has host bits set beyond /{}: write the network, {}",
                        p.len,
                        p.network()
                    ),
                ));
            }
            let own = cfg.ports.iter().enumerate().find_map(|(n, port)| {
                let a = port.addresses.iter().find(|a| p.contains(a.addr))?;
                Some((n, a.addr))
            });
            if let Some((n, a)) = own {
                errors.push((
                    format!("{at}.vip_pool[{k}]"),
                    format!("{p} holds this node's own address {a} (ports[{n}]): a VIP allocated there would be load-balanced host traffic"),
                ));
            }
            let clash = cfg.availability_groups[..i]
                .iter()
                .flat_map(|o| o.vip_pool.iter())
                .chain(g.vip_pool[..k].iter())
                .find(|o| o.overlaps(p));
            if let Some(o) = clash {
                errors.push((
                    format!("{at}.vip_pool[{k}]"),
                    format!("{p} overlaps {o}, already in a pool: an address belongs to one availability group"),
                ));
            }
        }
    }
    errors
}

/// Group `group`'s pool prefixes of IP version `version`: (first address as
/// an integer, number of addresses), in the file's order.
fn pool_spans(cfg: &Config, group: u8, version: IpVersion) -> Vec<(u128, u128, bool)> {
    let v6 = version == IpVersion::V6;
    cfg.availability_groups
        .iter()
        .filter(|g| g.group == group)
        .flat_map(|g| g.vip_pool.iter())
        .filter(|p| p.addr.is_ipv6() == v6)
        .map(|p| {
            let (first, last) = p.span();
            (first, (last - first).saturating_add(1), v6)
        })
        .collect()
}

/// The address at `index` of the concatenated `spans`.
fn address_at(spans: &[(u128, u128, bool)], mut index: u128) -> Option<IpAddr> {
    for &(first, size, v6) in spans {
        if index < size {
            let a = first + index;
            return Some(if v6 {
                IpAddr::V6(a.into())
            } else {
                IpAddr::V4(u32::try_from(a).ok()?.into())
            });
        }
        index -= size;
    }
    None
}

/// `name`'s address in group `group`'s pool `spans`: from where the hash of
/// both points, the first address none of `taken` holds.
fn pick(name: &str, group: u8, spans: &[(u128, u128, bool)], taken: &[Vip]) -> Option<IpAddr> {
    let total = spans
        .iter()
        .fold(0u128, |n, &(_, size, _)| n.saturating_add(size));
    if total == 0 {
        return None;
    }
    let key = maglev::EndpointId::from_bytes(format!("{name}/ag{group}").as_bytes()).0;
    let start = u128::from(key) % total;
    // Steps past taken addresses: a taken prefix is passed in one jump,
    // so the steps are bounded by the taken VIPs, not the pool's size.
    let mut i = 0u128;
    while i < total {
        // (start + i) mod total, without overflowing (start, i < total).
        let index = if start >= total - i {
            start - (total - i)
        } else {
            start + i
        };
        let a = address_at(spans, index)?;
        match taken.iter().find(|t| t.contains(a)) {
            None if !a.is_unspecified() => return Some(a),
            None => i += 1,
            Some(t) => {
                let (_, last) = t.prefix().span();
                let here = Prefix::host(a).span().0;
                i = i
                    .saturating_add(last.saturating_sub(here))
                    .saturating_add(1);
            }
        }
    }
    None
}
