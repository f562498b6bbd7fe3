//! Per-worker counters: written by one worker only, read by the management
//! core after the fact. Every dropped packet has a reason.
//!
//! Each counter is declared once, below, with how it is shown: its part of
//! `spillway stats`, of `spillway replay`'s summary and its Prometheus
//! family. Summing, the texts and the metrics are derived from those tables
//! ([`WorkerCounters::TRAFFIC`], [`WorkerCounters::FLOWS`],
//! [`ChildCounters::ALL`], [`DropReason::ALL`]); the packet path increments
//! the plain fields and never looks at a table.

use std::fmt::Write as _;

/// How one counter of a `T` is shown (off the packet path).
#[derive(Debug)]
pub struct Counter<T> {
    /// The field's name.
    pub name: &'static str,
    /// Its part of `spillway stats`' line, `{}` standing for the value.
    pub stats: &'static str,
    /// Its part of `spillway replay`'s summary line, if it shows there.
    pub replay: Option<&'static str>,
    /// Its Prometheus family (after `spillway_`) and HELP text, if exported.
    pub metric: Option<(&'static str, &'static str)>,
    /// Reads it.
    pub get: fn(&T) -> u64,
}

/// Which text a line is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text {
    /// `spillway stats`.
    Stats,
    /// `spillway replay`'s summary.
    Replay,
}

impl<T> Counter<T> {
    /// Its part of `text`, if it shows there.
    pub const fn part(&self, text: Text) -> Option<&'static str> {
        match text {
            Text::Stats => Some(self.stats),
            Text::Replay => self.replay,
        }
    }
}

/// The parts of `table` that show in `text`, with `c`'s values, as one line.
pub fn line<T>(c: &T, table: &[Counter<T>], text: Text) -> String {
    let mut out = String::new();
    for k in table {
        if let Some(part) = k.part(text) {
            out += &part.replacen("{}", &(k.get)(c).to_string(), 1);
        }
    }
    out
}

macro_rules! some {
    () => {
        None
    };
    ($($x:tt)+) => {
        Some($($x)+)
    };
}

/// A counters struct whose `u64` counters are declared in tables (one
/// const table each, in declaration order), plus other `fields`; also
/// `add_counters`, which sums every table's counters.
macro_rules! counters {
    (
        $(#[$sattr:meta])*
        pub struct $S:ident {
            $(
                $(#[$tattr:meta])*
                const $table:ident = [
                    $(
                        $(#[$fattr:meta])*
                        $field:ident: stats $stats:literal
                        $(, replay $replay:literal)?
                        $(, metric $mname:literal $mhelp:literal)?;
                    )*
                ];
            )*
            fields {
                $(
                    $(#[$xattr:meta])*
                    pub $xfield:ident: $xty:ty,
                )*
            }
        }
    ) => {
        $(#[$sattr])*
        pub struct $S {
            $($(
                $(#[$fattr])*
                pub $field: u64,
            )*)*
            $(
                $(#[$xattr])*
                pub $xfield: $xty,
            )*
        }

        impl $S {
            $(
                $(#[$tattr])*
                pub const $table: &'static [Counter<$S>] = &[$(
                    Counter {
                        name: stringify!($field),
                        stats: $stats,
                        replay: some!($($replay)?),
                        metric: some!($(($mname, $mhelp))?),
                        get: |c| c.$field,
                    },
                )*];
            )*

            /// Adds `other`'s table counters to these.
            fn add_counters(&mut self, other: &$S) {
                $($(self.$field += other.$field;)*)*
            }
        }

        /// All zero (derived `Default` stops at arrays of 32).
        impl Default for $S {
            fn default() -> Self {
                $S {
                    $($($field: 0,)*)*
                    $($xfield: Zero::zero(),)*
                }
            }
        }
    };
}

/// The zero of a counters struct's other fields.
trait Zero {
    fn zero() -> Self;
}

impl<const N: usize> Zero for [u64; N] {
    fn zero() -> Self {
        [0; N]
    }
}

impl<T> Zero for Vec<T> {
    fn zero() -> Self {
        Vec::new()
    }
}

/// Declares [`DropReason`] with its metric labels, and [`DropReason::ALL`].
macro_rules! drop_reasons {
    ($($(#[$attr:meta])* $reason:ident => $name:literal,)*) => {
        /// Why a packet was dropped.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DropReason {
            $($(#[$attr])* $reason,)*
        }

        impl DropReason {
            /// Every reason, in counter order.
            pub const ALL: [DropReason; [$(DropReason::$reason),*].len()] =
                [$(DropReason::$reason),*];

            /// Metric label.
            pub const fn name(self) -> &'static str {
                match self {
                    $(DropReason::$reason => $name,)*
                }
            }
        }
    };
}

drop_reasons! {
    /// The frame could not be parsed (truncated, bad lengths, bad checksum of a header we rely on).
    Malformed => "malformed",
    /// Addressed to a VIP, but no forwarding rule matches its protocol and port (M3).
    NoRule => "no_rule",
    /// Addressed to neither a VIP nor the balancer itself: never relayed (M6).
    NotOurs => "not_ours",
    /// A rule matched but its service has no eligible backend (M14), and
    /// the packet was not answered with a reset (see `no_backend_resets`).
    NoBackend => "no_backend",
    /// An ICMP error addressed to a VIP quotes a packet that did not come from that VIP.
    IcmpMismatch => "icmp_mismatch",
    /// To a gateway rule's VIP itself (the address its gateway endpoints
    /// route through, M31): that address takes no traffic of its own.
    GatewayVip => "gateway_vip",
    /// Encapsulation failed (no headroom, or the inner frame was unusable), or a
    /// reply built in place found no headroom to grow into.
    EncapFailed => "encap_failed",
    /// The backend's address family has no tunnel source address on this node.
    NoTunnelSource => "no_tunnel_source",
    /// A real IP fragment (first or later) to a VIP that has no rule taking
    /// every port of the fragment's protocol: a fragment cannot prove its
    /// ports, so it only matches a TCP/UDP `all` rule or `L3_DEFAULT` (M13).
    FragmentNoRule => "fragment_no_rule",
    /// An IPv6 packet with an IPv4-mapped source or destination address
    /// (`::ffff:a.b.c.d`), which never appears on the wire.
    BadAddress => "bad_address",
    /// A tunnel packet to one of the node's own addresses from a source
    /// `[tunnel_ingress] allow` does not list (M49).
    TunnelSourceDenied => "tunnel_source_denied",
    /// A tunnel packet to an own address whose outer or tunnel headers are
    /// malformed (lengths, checksums, GRE version or flags, an inner packet
    /// that is not well-formed IP).
    TunnelMalformed => "tunnel_malformed",
    /// A well-formed tunnel packet to an own address carrying what tunnelled
    /// ingress does not take: a GENEVE OAM packet or an unknown critical
    /// option, an Ethernet or other non-IP payload, a GUE control message.
    TunnelUnsupported => "tunnel_unsupported",
    /// A tunnel packet to an own address whose inner destination is not
    /// one of this node's VIPs (never relayed, M6).
    TunnelNotVip => "tunnel_not_vip",
    /// A tunnel inside a tunnel: the inner packet is itself IP-in-IP, GRE,
    /// or UDP to the GUE or GENEVE port (no loops, no amplification).
    TunnelNested => "tunnel_nested",
    /// A fragment of a tunnel packet to an own address: tunnels are not
    /// reassembled.
    TunnelFragment => "tunnel_fragment",
    /// Too big for the egress port's MTU once encapsulated (M48), and not
    /// answerable with an ICMP error: itself an ICMP error, an IPv4 fragment
    /// other than the first, from or to a non-unicast address.
    TooBig => "too_big",
    /// Too big for the egress port's MTU once encapsulated (M48), over the
    /// worker's ICMP too-big budget (`icmp_too_big_rate`).
    TooBigRateLimited => "too_big_rate_limited",
    /// The backend's next hop (itself, or the gateway towards it) has no
    /// resolved MAC yet (M47): never sent to a zero MAC.
    NoNeighbour => "no_neighbour",
    /// A packet that arrived tunnelled (M49) whose flow goes to a
    /// `remote_rule` group: sending it on to another node could bounce it
    /// between two nodes spilling over to each other.
    TunnelLoop => "tunnel_loop",
    /// From a gateway endpoint (M31), of a protocol its gateway rule does
    /// not take.
    GatewayNoRule => "gateway_no_rule",
    /// Geneve to the node's appliance port from an address that is no
    /// appliance and no remote gateway endpoint of a gateway rule (M32,
    /// M31).
    GatewayUnknownSource => "gateway_unknown_source",
    /// Returned by an appliance, but its Geneve or inner packet is malformed,
    /// an OAM packet, a fragment, or has an unknown critical option (M32).
    GatewayMalformed => "gateway_malformed",
    /// Returned by an appliance without the endpoint-ID or the cookie
    /// option (M32).
    GatewayOptionsMissing => "gateway_options_missing",
    /// Returned by an appliance with an endpoint ID that is no gateway
    /// endpoint of its rule (an altered option, M32).
    GatewayEndpointUnknown => "gateway_endpoint_unknown",
    /// Returned by an appliance for a flow this node has no entry for and
    /// whose cookie is not the one a flow without entry carries (M32).
    GatewayNoFlow => "gateway_no_flow",
    /// Returned by an appliance with a cookie that is not its flow's (M32).
    GatewayCookieMismatch => "gateway_cookie_mismatch",
    /// Returned by an appliance that does not hold the flow: another one
    /// does, or it no longer takes the flow's packets (M32).
    GatewayWrongAppliance => "gateway_wrong_appliance",
    /// Returned and accepted, but the gateway endpoint it goes back to has
    /// no resolved MAC (M47).
    GatewayEndpointUnresolved => "gateway_endpoint_unresolved",
    /// An ICMP echo request to a VIP that answers ping, over the worker's
    /// budget (`icmp_echo_rate`).
    EchoRateLimited => "echo_rate_limited",
    /// An ICMP echo request to a VIP that answers ping, but not answerable
    /// in place: a fragment, bad checksums, IPv4 options, IPv6 extension
    /// headers, from or to a non-unicast address.
    EchoUnanswerable => "echo_unanswerable",
    /// Geneve from an appliance that arrived on another port than the one
    /// the balancer reaches it through (the client-facing uplink, say, M53).
    GatewayWrongPort => "gateway_return_wrong_port",
    /// Geneve from an appliance's address but not from its resolved MAC (or
    /// its next hop's): forged on the segment (M53).
    GatewayWrongMac => "gateway_return_wrong_mac",
    /// Geneve from an appliance, not to the address the balancer sends to it
    /// from (M53).
    GatewayWrongDestination => "gateway_return_wrong_destination",
    /// Returned by an appliance that is over its budget of refused returns
    /// this tick (`gateway_mismatch_rate`): dropped unread (M53).
    GatewayMismatchBudget => "gateway_mismatch_budget",
    /// Returned by an appliance with its flow's cookie, but travelling the
    /// way the balancer never sent the flow's packets to it (M53).
    GatewayWrongDirection => "gateway_wrong_direction",
    /// Returned by an appliance: an ICMP error not addressed to the sender of
    /// the packet it quotes (M53).
    GatewayIcmpWrongDestination => "gateway_icmp_wrong_destination",
    /// Returned by an appliance: an ICMP error the balancer did not forward,
    /// from a source that is not the quoted flow's other participant (M53).
    GatewayIcmpForeignSource => "gateway_icmp_foreign_source",
    /// Returned by an appliance: an ICMP error longer than an error may be
    /// (576 bytes over IPv4, 1280 over IPv6) or quoting more than its
    /// quoted packet's own length (M53).
    GatewayIcmpTooLong => "gateway_icmp_too_long",
    /// An IPv4 packet without DF too big for the egress MTU once
    /// encapsulated that could not be sent in fragments (M48): no buffer
    /// for a fragment, malformed IPv4 options, more than 16 fragments
    /// needed, or a fragment that could not be encapsulated.
    FragmentFailed => "fragment_failed",
    /// A frame to a destination MAC that is not the receiving port's
    /// (M55): another host's unicast, a broadcast that is not ARP, a
    /// multicast that is not IPv6 neighbour or listener discovery on a
    /// `33:33:…` address.
    L2ForeignDst => "l2_foreign_dst",
    /// A VLAN-tagged (802.1Q) or QinQ (802.1ad) frame: every port is
    /// untagged (M55).
    VlanUntaggedPort => "vlan_untagged_port",
    /// An IPv4 header whose checksum does not verify, by the NIC's verdict
    /// where it gives one (M55).
    Ipv4BadChecksum => "ipv4_bad_checksum",
    /// IPv4 TTL or IPv6 hop limit 0: no router sends one (M55).
    TtlZero => "ttl_zero",
    /// An IPv4 loose or strict source route option (RFC 7126), or an IPv6
    /// routing header of a type other than 0 and 4 with segments left
    /// (RFC 8200 §4.4) (M55).
    IpSourceRoute => "ip_source_route",
    /// An IPv6 type 0 routing header, deprecated by RFC 5095 (M55).
    Ipv6Rh0 => "ipv6_rh0",
    /// An IPv6 segment routing header (RFC 8754) with a segment left to
    /// visit that is not one of this node's VIPs (M55).
    Ipv6SrhForeign => "ipv6_srh_foreign",
    /// A source address that is never a packet's source: unspecified,
    /// loopback, multicast, reserved (IPv4 0/8, 127/8, 224/3; IPv6 `::`,
    /// `::1`, `ff00::/8`), or one of this node's own addresses or VIPs
    /// (M55).
    MartianSource => "martian_source",
    /// To a rule with `source_ranges` from a client outside them (a
    /// fragment, or an ICMP error about a flow of such a client, too).
    SourceNotAllowed => "source_not_allowed",
    /// To the Geneve port of a gateway rule's service from a remote gateway
    /// endpoint (M31), but not taken as its traffic: a fragment, a Geneve
    /// or inner packet that is malformed, an OAM packet, an unknown
    /// critical option, a payload that is not IP.
    GatewayTunnelMalformed => "gateway_tunnel_malformed",
    /// Tunnelled by a remote gateway endpoint (M31), but its inner packet
    /// is to one of this node's VIPs or own addresses: a gateway endpoint's
    /// traffic passes through the node, it never reaches it.
    GatewayTunnelToNode => "gateway_tunnel_to_node",
    /// To a VIP of a VRRP group this node is not master of: the master
    /// serves it; a client still sending here has a stale ARP or
    /// neighbour cache.
    VrrpBackup => "vrrp_backup",
}

counters! {
    /// Counters of one child rule (`<rule>-ag0`/`-ag1`, M5).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct ChildCounters {
        /// Every counter of a child rule.
        const ALL = [
            /// Packets matched.
            packets: stats " {} packets", replay " {} packets",
                metric "rule_packets_total" "Packets per child rule (M5).";
            /// Bytes matched (as received).
            bytes: stats " {} bytes", replay ", {} bytes",
                metric "rule_bytes_total" "Bytes per child rule.";
            /// Flows created.
            new_flows: stats " {} new flows", replay ", {} new flows",
                metric "rule_new_flows_total" "New flows per child rule.";
            /// Packets dropped after matching (no backend, encapsulation failures).
            drops: stats " {} drops", replay ", {} drops",
                metric "rule_dropped_packets_total" "Packets dropped after matching, per child rule.";
        ];
        fields {
            /// Its drops by reason, indexed by `DropReason as usize`
            /// (`no_backend` also when answered with a reset, `too_big`
            /// also when answered with ICMP).
            pub drop_reasons: [u64; DropReason::ALL.len()],
        }
    }
}

counters! {
    /// One worker's counters. Aligned to a cache line so that two workers'
    /// counters never share one.
    #[derive(Debug, Clone, PartialEq, Eq)]
    #[repr(align(64))]
    pub struct WorkerCounters {
        /// Packet outcomes: the first line of `stats` and of the replay summary.
        const TRAFFIC = [
            /// Packets seen.
            rx_packets: stats "rx {} packets",
                metric "rx_packets_total" "Packets received on data ports.";
            /// Bytes seen.
            rx_bytes: stats " {} bytes",
                metric "rx_bytes_total" "Bytes received on data ports.";
            /// Packets sent towards a backend.
            forwarded: stats "; forwarded {}", replay "forwarded {}",
                metric "forwarded_packets_total" "Packets sent towards backends.";
            /// ARP replies sent for the balancer's addresses.
            arp_replies: stats "; arp replies {}", replay ", ARP replies {}",
                metric "arp_replies_total" "ARP replies sent for the balancer's addresses.";
            /// Neighbor advertisements sent for the balancer's IPv6 addresses.
            nd_replies: stats "; nd replies {}", replay ", ND replies {}",
                metric "nd_replies_total" "IPv6 neighbor advertisements sent for the balancer's addresses.";
            /// TCP resets sent because a rule matched but its service had no eligible
            /// backend and answers with a reset (M14). Such a packet is counted
            /// here, not under `drops[NoBackend]`: every received packet has exactly one
            /// outcome counter. Its child rule counts it among its drops either way.
            no_backend_resets: stats "; no-backend resets {}", replay ", no-backend resets {}",
                metric "no_backend_resets_total" "TCP resets sent because the rule's service had no eligible backend (M14).";
            /// Packets handed to the host (exception path).
            to_host: stats "; to host {}", replay ", to host {}",
                metric "to_host_packets_total" "Packets handed to the exception port.";
            /// Packets for the host dropped because no exception port takes them
            /// (counted among `to_host` too).
            host_dropped: stats " (dropped without exception port {})",
                metric "to_host_dropped_packets_total" "Packets for the host dropped because no exception port takes them (also counted as to_host).";
            /// Packets the host's stack sent through an exception port (out its data port).
            from_host: stats "; from host {}",
                metric "from_host_packets_total" "Packets from the exception port.";
            /// Packets from an exception port that stands for no data port,
            /// dropped (counted among `from_host` too).
            from_host_dropped: stats " (dropped without data port {})",
                metric "from_host_dropped_packets_total" "Packets from an exception port that stands for no data port, dropped (also counted as from_host).";
            /// Health probes through a VIP from the host (M52), delivered
            /// to their endpoint (counted among `from_host` too).
            vip_probes: stats "; vip probes {}",
                metric "vip_probe_packets_total" "Packets of health probes through VIPs delivered to their endpoint (M52; also counted as from_host).";
            /// Such probe packets that could not be delivered (no resolved
            /// next hop, no tunnel source, no room to encapsulate).
            vip_probes_dropped: stats " (dropped {})",
                metric "vip_probe_dropped_packets_total" "Packets of health probes through VIPs that could not be delivered (also counted as from_host).";
            /// Packets the ports took for sending (forwarded, replies, to and
            /// from the host; not neighbour frames, counted apart).
            tx_packets: stats "; tx {}",
                metric "tx_packets_total" "Packets the data and exception ports took for sending.";
            /// Packets the device did not take at TX (freed).
            tx_dropped: stats "; tx dropped {}",
                metric "tx_dropped_packets_total" "Packets a port did not take.";
            /// IP-in-IP packets to an own address decapsulated (M49); each is
            /// then counted by its inner packet's outcome.
            decap_ipip: stats "; decapsulated ipip {}",
                metric "decap_ipip_packets_total" "IP-in-IP packets to the node's own addresses decapsulated (M49).";
            /// GRE packets to an own address decapsulated.
            decap_gre: stats " gre {}",
                metric "decap_gre_packets_total" "GRE packets to the node's own addresses decapsulated (M49).";
            /// GUE packets to an own address decapsulated.
            decap_gue: stats " gue {}",
                metric "decap_gue_packets_total" "GUE packets to the node's own addresses decapsulated (M49).";
            /// GENEVE packets to an own address decapsulated.
            decap_geneve: stats " geneve {}",
                metric "decap_geneve_packets_total" "GENEVE packets to the node's own addresses decapsulated (M49).";
            /// Packets too big for the egress MTU once encapsulated, answered
            /// with ICMP "fragmentation needed" / "packet too big" (M48). Their
            /// child rule counts a drop.
            icmp_too_big: stats "; icmp too big {}", replay ", ICMP too big {}",
                metric "icmp_too_big_total" "ICMP fragmentation-needed / packet-too-big errors sent for packets too big once encapsulated.";
            /// ICMP echo requests to VIPs answered by the balancer itself (a
            /// rule's `answer_ping`).
            echo_replies: stats "; echo replies {}", replay ", echo replies {}",
                metric "icmp_echo_replies_total" "ICMP echo requests to VIPs answered by the balancer itself.";
            /// IPv4 packets without DF too big for the egress MTU once
            /// encapsulated, split into fragments that fit, each encapsulated
            /// and sent (M48; also counted as forwarded, and each fragment in
            /// its backend's packets).
            /// Not in the replay summary's line, whose parts add up to the
            /// packets received.
            fragmented: stats "; fragmented {}",
                metric "fragmented_packets_total" "IPv4 packets without DF too big for the egress MTU once encapsulated, sent in fragments (M48; also counted as forwarded).";
            /// Packets an appliance returned (M32) that passed every check,
            /// decapsulated and sent back to their gateway endpoint. Counted
            /// here, not as forwarded.
            gateway_returned: stats "; gateway returned {}", replay ", gateway returned {}",
                metric "gateway_returned_packets_total" "Packets returned by appliances, checked and sent back to their gateway endpoint (M32).";
        ];
        /// The flow table's work: the `flows:` line of `stats` and of the
        /// replay summary.
        const FLOWS = [
            /// Flows created.
            new_flows: stats "{} new", replay "{} new",
                metric "flows_new_total" "Flow entries created.";
            /// Packets that followed an existing flow entry.
            flow_hits: stats ", {} hits", replay ", {} hits",
                metric "flow_hits_total" "Packets that followed an existing flow entry.";
            /// Another worker created the flow first; its entry was used.
            flow_races: stats ", {} races",
                metric "flow_races_total" "New flows another worker had created first (its entry was used).";
            /// Flows moved off a backend that no longer takes them (M11).
            flows_rescheduled: stats ", {} rescheduled", replay ", {} rescheduled",
                metric "flows_rescheduled_total" "Flows moved off a backend that no longer takes them (M11).";
            /// Packets of new flows forwarded without an entry because the table was
            /// full or contended (stateless Maglev fallback, M15): every packet
            /// of such a flow tries again, and counts again.
            stateless: stats ", {} stateless", replay ", {} stateless (table full)",
                metric "flows_stateless_total" "Packets of new flows forwarded without an entry because the table was full or contended.";
            /// Packets of new flows forwarded without an entry because the worker
            /// had spent its new-entry budget for the current second (M15: a
            /// flood of new flows cannot crowd the table). Not included in
            /// `stateless`.
            over_budget: stats ", {} over budget", replay ", {} over budget",
                metric "flows_over_budget_total" "Packets of new flows forwarded without an entry because their worker had spent its new-entry budget for the second.";
            /// New flow entries queued for flow-state sync to the peers (M36;
            /// 0 without `[flow_sync]`).
            sync_queued: stats ", {} queued for sync",
                metric "flow_sync_queued_total" "New flow entries queued for flow-state sync to the peers (M36).";
            /// New flow entries not synced because the queue to the management
            /// core was full.
            sync_lost: stats " (lost {})",
                metric "flow_sync_queue_overflow_total" "New flow entries not synced because the queue to the management core was full.";
        ];
        /// Neighbour resolution's traffic (M47): the `neighbours:` line of
        /// `stats`, after the rules.
        const NEIGHBOURS = [
            /// ARP/NDP frames whose (address, MAC) was passed to the management
            /// core for neighbour resolution (M47).
            nbr_sightings: stats "{} sightings",
                metric "neighbour_sightings_total" "ARP/NDP sightings passed to neighbour resolution.";
            /// Sightings lost because the queue to the management core was full.
            nbr_sightings_lost: stats " (lost {})",
                metric "neighbour_sightings_lost_total" "ARP/NDP sightings lost to a full queue.";
            /// Neighbour requests and announcements the management core asked for, sent.
            nbr_sent: stats "; {} frames sent",
                metric "neighbour_frames_sent_total" "ARP/NDP requests and announcements sent.";
            /// Those that could not be sent (no buffer, the port did not take
            /// them, or the outbox to the workers was full).
            nbr_send_failed: stats " (failed {})",
                metric "neighbour_frames_failed_total" "ARP/NDP requests and announcements that could not be sent.";
            /// VRRP advertisements on a VRRP port whose copy was handed to
            /// the management core (the frame itself goes to the host).
            vrrp_frames: stats "; {} vrrp advertisements",
                metric "vrrp_frames_total" "VRRP advertisements handed to the management core.";
            /// Those lost because the queue to the management core was full.
            vrrp_frames_lost: stats " (lost {})",
                metric "vrrp_frames_lost_total" "VRRP advertisements lost to a full queue.";
        ];
        /// The worker loop's own work (per-worker metrics; not in `stats`).
        const LOOP = [
            /// Passes over the worker's ports.
            polls: stats "{} polls",
                metric "polls_total" "Passes over the worker's receive queues.";
            /// Passes that received nothing.
            idle_polls: stats " ({} idle)",
                metric "idle_polls_total" "Passes over the worker's receive queues that received nothing.";
            /// Receive bursts that returned packets.
            rx_bursts: stats ", {} bursts",
                metric "rx_bursts_total" "Receive bursts that returned at least one packet (burst fill = rx packets / (bursts x burst size)).";
            /// Clock ticks (TSC cycles in the daemon) spent in passes that
            /// received packets.
            busy_cycles: stats ", {} busy cycles",
                metric "busy_cycles_total" "TSC cycles spent in passes that received packets (per packet: divide by rx packets).";
        ];
        fields {
            /// Drops by reason, indexed by `DropReason as usize`.
            pub drops: [u64; DropReason::ALL.len()],
            /// Per child rule, indexed by child rule id.
            pub children: Vec<ChildCounters>,
            /// What was forwarded to each backend slot (the management core
            /// derives measured rates from the packets: RATE capacity,
            /// spillover, M25/M26), indexed by slot.
            pub backends: Vec<BackendCounters>,
            /// New flows per service and client zone (M27), for the
            /// services whose rules look up their clients' zones
            /// (`ServicePlan::measures_zones`): row = service index,
            /// column 0 = clients in no zone, column `1 + z` = clients of
            /// zone `z` (`ZoneId` index). The management core turns their
            /// deltas into each zone's share of the demand; counted once
            /// per new flow, when it picks its backend, never per packet.
            pub zone_flows: Vec<Vec<u64>>,
        }
    }
}

/// What one worker forwarded to one backend slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendCounters {
    /// Packets.
    pub packets: u64,
    /// Bytes, as sent (outer headers included).
    pub bytes: u64,
    /// Flow entries created for it.
    pub new_flows: u64,
}

impl ChildCounters {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &ChildCounters) {
        self.add_counters(other);
        for (t, d) in self.drop_reasons.iter_mut().zip(&other.drop_reasons) {
            *t += d;
        }
    }
}

impl WorkerCounters {
    /// Counters for a snapshot with `children` child rules.
    pub fn new(children: usize) -> Self {
        WorkerCounters {
            children: vec![ChildCounters::default(); children],
            ..Default::default()
        }
    }

    /// Adds `other`'s counts to these (the management core sums the
    /// workers'), growing the per-child and per-backend counters to fit.
    pub fn add(&mut self, other: &WorkerCounters) {
        self.add_counters(other);
        for (t, d) in self.drops.iter_mut().zip(&other.drops) {
            *t += d;
        }
        self.resize_children(other.children.len());
        self.resize_backends(other.backends.len());
        for (t, n) in self.backends.iter_mut().zip(&other.backends) {
            t.packets += n.packets;
            t.bytes += n.bytes;
            t.new_flows += n.new_flows;
        }
        for (t, cc) in self.children.iter_mut().zip(&other.children) {
            t.add(cc);
        }
        let columns = other.zone_flows.iter().map(Vec::len).max().unwrap_or(0);
        self.resize_zone_flows(other.zone_flows.len(), columns);
        for (t, row) in self.zone_flows.iter_mut().zip(&other.zone_flows) {
            for (t, n) in t.iter_mut().zip(row) {
                *t += n;
            }
        }
    }

    /// Counts a new flow of service `svc` from a client in `zone` (`None`:
    /// in no zone). No allocation: a service or zone beyond the sizes of
    /// [`WorkerCounters::resize_zone_flows`] is not counted.
    #[inline]
    pub fn count_zone_flow(&mut self, svc: usize, zone: Option<config::compiled::ZoneId>) {
        let column = zone.map_or(0, |z| z.index() + 1);
        if let Some(c) = self
            .zone_flows
            .get_mut(svc)
            .and_then(|row| row.get_mut(column))
        {
            *c += 1;
        }
    }

    /// New flows of service `svc` from clients of zone `zone` (`None`: in
    /// no zone) counted so far.
    pub fn zone_flows_of(&self, svc: usize, zone: Option<config::compiled::ZoneId>) -> u64 {
        let column = zone.map_or(0, |z| z.index() + 1);
        self.zone_flows
            .get(svc)
            .and_then(|row| row.get(column))
            .copied()
            .unwrap_or(0)
    }

    /// Every exported scalar counter: its family (after `spillway_`), HELP
    /// text and value, in declaration order.
    pub fn metrics(&self) -> impl Iterator<Item = (&'static str, &'static str, u64)> + '_ {
        Self::TRAFFIC
            .iter()
            .chain(Self::FLOWS)
            .chain(Self::NEIGHBOURS)
            .filter_map(move |k| k.metric.map(|(name, help)| (name, help, (k.get)(self))))
    }

    /// The counters' part of `spillway stats`: traffic, flows (with
    /// `expired`, the entries the management core aged out), drops by
    /// reason, then one line per child rule, named by `children` in order.
    pub fn stats<'a>(&self, expired: usize, children: impl IntoIterator<Item = &'a str>) -> String {
        let mut out = line(self, Self::TRAFFIC, Text::Stats);
        let flows = line(self, Self::FLOWS, Text::Stats);
        let _ = write!(out, "\nflows: {flows}; {expired} expired by ageing\n");
        for r in DropReason::ALL {
            let _ = writeln!(out, "drop {}: {}", r.name(), self.dropped(r));
        }
        for (name, cc) in children.into_iter().zip(&self.children) {
            let _ = writeln!(
                out,
                "rule {name}:{}",
                line(cc, ChildCounters::ALL, Text::Stats)
            );
        }
        let nbr = line(self, Self::NEIGHBOURS, Text::Stats);
        let _ = writeln!(out, "neighbours: {nbr}");
        out
    }

    /// Drops for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    /// All drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Packets turned into replies to their sender (ARP, NDP, TCP resets,
    /// ICMP too big, echo replies).
    pub fn replies(&self) -> u64 {
        self.arp_replies
            + self.nd_replies
            + self.no_backend_resets
            + self.icmp_too_big
            + self.echo_replies
    }

    /// Rule matches without an eligible backend (M14): dropped or
    /// answered with a reset.
    pub fn no_backend(&self) -> u64 {
        self.dropped(DropReason::NoBackend) + self.no_backend_resets
    }

    /// Makes room for a snapshot with `children` child rules (off the packet
    /// path: call when a new snapshot is picked up).
    pub fn resize_children(&mut self, children: usize) {
        if self.children.len() < children {
            self.children.resize(children, ChildCounters::default());
        }
    }

    /// Makes room for `services` rows of `columns` per-client-zone
    /// counters ([`WorkerCounters::zone_flows`]; the snapshot's
    /// `Rules::zone_counters`). Off the packet path like
    /// [`WorkerCounters::resize_children`]; grows only, and costs a compare
    /// when nothing grows.
    pub fn resize_zone_flows(&mut self, services: usize, columns: usize) {
        if columns == 0 {
            return;
        }
        let narrow = self.zone_flows.first().is_none_or(|r| r.len() < columns);
        if self.zone_flows.len() < services || narrow {
            if self.zone_flows.len() < services {
                self.zone_flows.resize(services, Vec::new());
            }
            for row in &mut self.zone_flows {
                if row.len() < columns {
                    row.resize(columns, 0);
                }
            }
        }
    }

    /// Makes room for a snapshot with `backends` backend slots (off the
    /// packet path, like [`WorkerCounters::resize_children`]).
    pub fn resize_backends(&mut self, backends: usize) {
        if self.backends.len() < backends {
            self.backends.resize(backends, BackendCounters::default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every counter a different value.
    fn sample() -> WorkerCounters {
        WorkerCounters {
            rx_packets: 1,
            rx_bytes: 2,
            forwarded: 3,
            arp_replies: 4,
            nd_replies: 5,
            no_backend_resets: 6,
            to_host: 7,
            host_dropped: 8,
            from_host: 9,
            tx_dropped: 10,
            decap_ipip: 17,
            decap_gre: 18,
            decap_gue: 19,
            decap_geneve: 20,
            new_flows: 11,
            flow_hits: 12,
            flow_races: 13,
            flows_rescheduled: 14,
            stateless: 15,
            over_budget: 16,
            sync_queued: 48,
            sync_lost: 49,
            icmp_too_big: 41,
            echo_replies: 56,
            fragmented: 42,
            gateway_returned: 47,
            nbr_sightings: 43,
            nbr_sightings_lost: 44,
            nbr_sent: 45,
            nbr_send_failed: 46,
            vrrp_frames: 59,
            vrrp_frames_lost: 60,
            from_host_dropped: 50,
            vip_probes: 57,
            vip_probes_dropped: 58,
            tx_packets: 51,
            polls: 52,
            idle_polls: 53,
            rx_bursts: 54,
            busy_cycles: 55,
            drops: std::array::from_fn(|i| 100 + i as u64),
            children: vec![
                ChildCounters {
                    packets: 21,
                    bytes: 22,
                    new_flows: 23,
                    drops: 24,
                    drop_reasons: [0; DropReason::ALL.len()],
                },
                ChildCounters {
                    packets: 31,
                    bytes: 32,
                    new_flows: 33,
                    drops: 34,
                    drop_reasons: [0; DropReason::ALL.len()],
                },
            ],
            backends: (1..=3)
                .map(|i| BackendCounters {
                    packets: 40 + i,
                    bytes: 50 + i,
                    new_flows: 60 + i,
                })
                .collect(),
            zone_flows: vec![vec![70, 71, 72], Vec::new(), vec![73, 74, 75]],
        }
    }

    #[test]
    fn stats_text_is_unchanged() {
        let c = sample();
        // The text `spillway stats` printed before its lines were derived
        // from the tables (operators' scripts and perf/bench.py read it).
        let mut want = format!(
            "rx {} packets {} bytes; forwarded {}; arp replies {}; nd replies {}; no-backend resets {}; to host {} (dropped without exception port {}); from host {} (dropped without data port {}); vip probes {} (dropped {}); tx {}; tx dropped {}; decapsulated ipip {} gre {} gue {} geneve {}; icmp too big {}; echo replies {}; fragmented {}; gateway returned {}\n",
            c.rx_packets,
            c.rx_bytes,
            c.forwarded,
            c.arp_replies,
            c.nd_replies,
            c.no_backend_resets,
            c.to_host,
            c.host_dropped,
            c.from_host,
            c.from_host_dropped,
            c.vip_probes,
            c.vip_probes_dropped,
            c.tx_packets,
            c.tx_dropped,
            c.decap_ipip,
            c.decap_gre,
            c.decap_gue,
            c.decap_geneve,
            c.icmp_too_big,
            c.echo_replies,
            c.fragmented,
            c.gateway_returned
        );
        want += &format!(
            "flows: {} new, {} hits, {} races, {} rescheduled, {} stateless, {} over budget, {} queued for sync (lost {}); {} expired by ageing\n",
            c.new_flows,
            c.flow_hits,
            c.flow_races,
            c.flows_rescheduled,
            c.stateless,
            c.over_budget,
            c.sync_queued,
            c.sync_lost,
            99
        );
        for r in DropReason::ALL {
            want += &format!("drop {}: {}\n", r.name(), c.dropped(r));
        }
        for (name, cc) in ["a-ag0", "b-ag1"].iter().zip(&c.children) {
            want += &format!(
                "rule {}: {} packets {} bytes {} new flows {} drops\n",
                name, cc.packets, cc.bytes, cc.new_flows, cc.drops
            );
        }
        want += &format!(
            "neighbours: {} sightings (lost {}); {} frames sent (failed {}); {} vrrp advertisements (lost {})\n",
            c.nbr_sightings,
            c.nbr_sightings_lost,
            c.nbr_sent,
            c.nbr_send_failed,
            c.vrrp_frames,
            c.vrrp_frames_lost
        );
        assert_eq!(c.stats(99, ["a-ag0", "b-ag1"]), want);
    }

    #[test]
    fn replay_lines_are_unchanged() {
        let c = sample();
        assert_eq!(
            line(&c, WorkerCounters::TRAFFIC, Text::Replay),
            format!(
                "forwarded {}, ARP replies {}, ND replies {}, no-backend resets {}, to host {}, ICMP too big {}, echo replies {}, gateway returned {}",
                c.forwarded,
                c.arp_replies,
                c.nd_replies,
                c.no_backend_resets,
                c.to_host,
                c.icmp_too_big,
                c.echo_replies,
                c.gateway_returned,
            )
        );
        assert_eq!(
            line(&c, WorkerCounters::FLOWS, Text::Replay),
            format!(
                "{} new, {} hits, {} rescheduled, {} stateless (table full), {} over budget",
                c.new_flows, c.flow_hits, c.flows_rescheduled, c.stateless, c.over_budget
            )
        );
        let cc = &c.children[0];
        assert_eq!(
            line(cc, ChildCounters::ALL, Text::Replay),
            format!(
                " {} packets, {} bytes, {} new flows, {} drops",
                cc.packets, cc.bytes, cc.new_flows, cc.drops
            )
        );
    }

    #[test]
    fn metrics_are_the_exported_counters_in_order() {
        let c = sample();
        let got: Vec<_> = c.metrics().map(|(name, _, v)| (name, v)).collect();
        assert_eq!(
            got,
            [
                ("rx_packets_total", c.rx_packets),
                ("rx_bytes_total", c.rx_bytes),
                ("forwarded_packets_total", c.forwarded),
                ("arp_replies_total", c.arp_replies),
                ("nd_replies_total", c.nd_replies),
                ("no_backend_resets_total", c.no_backend_resets),
                ("to_host_packets_total", c.to_host),
                ("to_host_dropped_packets_total", c.host_dropped),
                ("from_host_packets_total", c.from_host),
                ("from_host_dropped_packets_total", c.from_host_dropped),
                ("vip_probe_packets_total", c.vip_probes),
                ("vip_probe_dropped_packets_total", c.vip_probes_dropped),
                ("tx_packets_total", c.tx_packets),
                ("tx_dropped_packets_total", c.tx_dropped),
                ("decap_ipip_packets_total", c.decap_ipip),
                ("decap_gre_packets_total", c.decap_gre),
                ("decap_gue_packets_total", c.decap_gue),
                ("decap_geneve_packets_total", c.decap_geneve),
                ("icmp_too_big_total", c.icmp_too_big),
                ("icmp_echo_replies_total", c.echo_replies),
                ("fragmented_packets_total", c.fragmented),
                ("gateway_returned_packets_total", c.gateway_returned),
                ("flows_new_total", c.new_flows),
                ("flow_hits_total", c.flow_hits),
                ("flow_races_total", c.flow_races),
                ("flows_rescheduled_total", c.flows_rescheduled),
                ("flows_stateless_total", c.stateless),
                ("flows_over_budget_total", c.over_budget),
                ("flow_sync_queued_total", c.sync_queued),
                ("flow_sync_queue_overflow_total", c.sync_lost),
                ("neighbour_sightings_total", c.nbr_sightings),
                ("neighbour_sightings_lost_total", c.nbr_sightings_lost),
                ("neighbour_frames_sent_total", c.nbr_sent),
                ("neighbour_frames_failed_total", c.nbr_send_failed),
                ("vrrp_frames_total", c.vrrp_frames),
                ("vrrp_frames_lost_total", c.vrrp_frames_lost),
            ]
        );
    }

    #[test]
    fn add_sums_every_counter() {
        let one = sample();
        let mut sum = WorkerCounters::new(1);
        sum.add(&one);
        sum.add(&one);
        for k in WorkerCounters::TRAFFIC
            .iter()
            .chain(WorkerCounters::FLOWS)
            .chain(WorkerCounters::NEIGHBOURS)
        {
            assert_eq!((k.get)(&sum), 2 * (k.get)(&one), "{}", k.name);
        }
        for (s, o) in sum.children.iter().zip(&one.children) {
            for k in ChildCounters::ALL {
                assert_eq!((k.get)(s), 2 * (k.get)(o), "{}", k.name);
            }
        }
        assert_eq!(sum.children.len(), 2);
        assert_eq!(sum.drops, one.drops.map(|d| 2 * d));
        let field = |f: fn(&BackendCounters) -> u64| sum.backends.iter().map(f).collect::<Vec<_>>();
        assert_eq!(field(|b| b.packets), [82, 84, 86]);
        assert_eq!(field(|b| b.bytes), [102, 104, 106]);
        assert_eq!(field(|b| b.new_flows), [122, 124, 126]);
        assert_eq!(
            sum.zone_flows,
            [vec![140, 142, 144], vec![0, 0, 0], vec![146, 148, 150]]
        );
    }

    #[test]
    fn zone_flows_count_per_service_and_client_zone() {
        use config::compiled::ZoneId;
        let mut c = WorkerCounters::new(0);
        // No service measures zones: nothing to size, nothing counted.
        c.resize_zone_flows(2, 0);
        c.count_zone_flow(0, Some(ZoneId(0)));
        assert!(c.zone_flows.is_empty());
        // Two services, zones 0 and 1 (columns: none, 0, 1).
        c.resize_zone_flows(2, 3);
        c.count_zone_flow(1, Some(ZoneId(1)));
        c.count_zone_flow(1, Some(ZoneId(1)));
        c.count_zone_flow(1, None);
        c.count_zone_flow(0, Some(ZoneId(0)));
        // Beyond the sizes: not counted, no panic, no growth.
        c.count_zone_flow(2, Some(ZoneId(0)));
        c.count_zone_flow(0, Some(ZoneId(2)));
        assert_eq!(c.zone_flows, [vec![0, 1, 0], vec![1, 0, 2]]);
        assert_eq!(c.zone_flows_of(1, Some(ZoneId(1))), 2);
        assert_eq!(c.zone_flows_of(1, None), 1);
        assert_eq!(c.zone_flows_of(5, None), 0);
        // A reload with more services and zones keeps the counts.
        c.resize_zone_flows(3, 4);
        c.resize_zone_flows(1, 2);
        assert_eq!(
            c.zone_flows,
            [vec![0, 1, 0, 0], vec![1, 0, 2, 0], vec![0; 4]]
        );
        // Workers' counters sum, narrower ones included.
        let mut total = WorkerCounters::default();
        total.add(&c);
        let mut other = WorkerCounters::new(0);
        other.resize_zone_flows(1, 2);
        other.count_zone_flow(0, Some(ZoneId(0)));
        total.add(&other);
        assert_eq!(total.zone_flows_of(0, Some(ZoneId(0))), 2);
        assert_eq!(total.zone_flows_of(1, Some(ZoneId(1))), 2);
    }

    #[test]
    fn every_counter_is_in_one_table_once() {
        let names: Vec<_> = WorkerCounters::TRAFFIC
            .iter()
            .chain(WorkerCounters::FLOWS)
            .chain(WorkerCounters::NEIGHBOURS)
            .map(|k| k.name)
            .collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        // Each reads its own field: the sample's values are all different.
        let c = sample();
        let mut values: Vec<_> = WorkerCounters::TRAFFIC
            .iter()
            .chain(WorkerCounters::FLOWS)
            .chain(WorkerCounters::NEIGHBOURS)
            .map(|k| (k.get)(&c))
            .collect();
        values.sort_unstable();
        values.dedup();
        assert_eq!(values.len(), names.len());
    }

    #[test]
    fn drop_reasons_index_their_counters() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{}", r.name());
        }
        assert_eq!(DropReason::ALL.len(), 52);
    }
}
