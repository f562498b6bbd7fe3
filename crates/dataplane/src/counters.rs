//! Per-worker counters: written by one worker only, read by the management
//! core after the fact. Every dropped packet has a reason.

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// The frame could not be parsed (truncated, bad lengths, bad checksum of a header we rely on).
    Malformed,
    /// Addressed to a VIP, but no forwarding rule matches its protocol and port (SPEC M3).
    NoRule,
    /// Addressed to neither a VIP nor the balancer itself: never relayed (SPEC M6).
    NotOurs,
    /// A rule matched but its service has no eligible backend (SPEC M14), and
    /// the packet was not answered with a reset (see `no_backend_resets`).
    NoBackend,
    /// An ICMP error addressed to a VIP quotes a packet that did not come from that VIP.
    IcmpMismatch,
    /// The rule is a gateway rule, which this pipeline does not serve yet.
    GatewayUnsupported,
    /// Encapsulation failed (no headroom, or the inner frame was unusable), or a
    /// reply built in place found no headroom to grow into.
    EncapFailed,
    /// The backend's address family has no tunnel source address on this node.
    NoTunnelSource,
    /// A real IP fragment (first or later) to a VIP that has no rule taking
    /// every port of the fragment's protocol: a fragment cannot prove its
    /// ports, so it only matches a TCP/UDP `all` rule or `L3_DEFAULT` (M13).
    FragmentNoRule,
    /// An IPv6 packet with an IPv4-mapped source or destination address
    /// (`::ffff:a.b.c.d`), which never appears on the wire.
    BadAddress,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 10] = [
        DropReason::Malformed,
        DropReason::NoRule,
        DropReason::NotOurs,
        DropReason::NoBackend,
        DropReason::IcmpMismatch,
        DropReason::GatewayUnsupported,
        DropReason::EncapFailed,
        DropReason::NoTunnelSource,
        DropReason::FragmentNoRule,
        DropReason::BadAddress,
    ];

    /// Metric label.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::NoRule => "no_rule",
            DropReason::NotOurs => "not_ours",
            DropReason::NoBackend => "no_backend",
            DropReason::IcmpMismatch => "icmp_mismatch",
            DropReason::GatewayUnsupported => "gateway_unsupported",
            DropReason::EncapFailed => "encap_failed",
            DropReason::NoTunnelSource => "no_tunnel_source",
            DropReason::FragmentNoRule => "fragment_no_rule",
            DropReason::BadAddress => "bad_address",
        }
    }
}

/// Counters of one child rule (`<rule>-ag0`/`-ag1`, SPEC M5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChildCounters {
    /// Packets matched.
    pub packets: u64,
    /// Bytes matched (as received).
    pub bytes: u64,
    /// Flows created.
    pub new_flows: u64,
    /// Packets dropped after matching (no backend, encapsulation failures).
    pub drops: u64,
}

/// One worker's counters. Aligned to a cache line so that two workers'
/// counters never share one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[repr(align(64))]
pub struct WorkerCounters {
    /// Packets seen.
    pub rx_packets: u64,
    /// Bytes seen.
    pub rx_bytes: u64,
    /// Packets sent towards a backend.
    pub forwarded: u64,
    /// ARP replies sent for the balancer's addresses.
    pub arp_replies: u64,
    /// Neighbor advertisements sent for the balancer's IPv6 addresses.
    pub nd_replies: u64,
    /// TCP resets sent because a rule matched but its service had no eligible
    /// backend and answers with a reset (SPEC M14). Such a packet is counted
    /// here, not under `drops[NoBackend]`: every received packet has exactly one
    /// outcome counter. Its child rule counts it among its drops either way.
    pub no_backend_resets: u64,
    /// Packets handed to the host (exception path).
    pub to_host: u64,
    /// Packets that followed an existing flow entry.
    pub flow_hits: u64,
    /// Flows created.
    pub new_flows: u64,
    /// Another worker created the flow first; its entry was used.
    pub flow_races: u64,
    /// Flows moved off a backend that no longer takes them (SPEC M11).
    pub flows_rescheduled: u64,
    /// Packets of new flows forwarded without an entry because the table was
    /// full or contended (stateless Maglev fallback, SPEC M15): every packet
    /// of such a flow tries again, and counts again.
    pub stateless: u64,
    /// Packets of new flows forwarded without an entry because the worker
    /// had spent its new-entry budget for the current second (SPEC M15: a
    /// flood of new flows cannot crowd the table). Not included in
    /// `stateless`.
    pub over_budget: u64,
    /// Packets the device did not take at TX (freed).
    pub tx_dropped: u64,
    /// Packets for the host dropped because no exception port is configured
    /// (or, from the host, because no uplink is).
    pub host_dropped: u64,
    /// Packets the host's stack sent through the exception port (out the uplink).
    pub from_host: u64,
    /// Drops by reason, indexed by `DropReason as usize`.
    pub drops: [u64; DropReason::ALL.len()],
    /// Per child rule, indexed by child rule id.
    pub children: Vec<ChildCounters>,
    /// Packets forwarded to each backend slot (the management core derives
    /// measured rates from them: RATE capacity, spillover, M25/M26).
    pub backend_packets: Vec<u64>,
}

impl WorkerCounters {
    /// Counters for a snapshot with `children` child rules.
    pub fn new(children: usize) -> Self {
        WorkerCounters {
            children: vec![ChildCounters::default(); children],
            ..Default::default()
        }
    }

    /// Drops for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    /// All drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Packets turned into replies to their sender (ARP, NDP, TCP resets).
    pub fn replies(&self) -> u64 {
        self.arp_replies + self.nd_replies + self.no_backend_resets
    }

    /// Rule matches without an eligible backend (SPEC M14): dropped or
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

    /// Makes room for a snapshot with `backends` backend slots (off the
    /// packet path, like [`WorkerCounters::resize_children`]).
    pub fn resize_backends(&mut self, backends: usize) {
        if self.backend_packets.len() < backends {
            self.backend_packets.resize(backends, 0);
        }
    }
}
