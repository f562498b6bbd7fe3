//! The configuration file's schema: what the operator writes, with every
//! default. `config/reference.toml` documents the same fields for operators;
//! keep the two in step.
//!
//! These types are the file's shape only. Cross-field rules (overlaps,
//! references, ranges) live in `validate`, and the data plane never reads
//! these types: it reads `compiled::Compiled`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use serde::Deserialize;
use wire::geneve::OptionIds;

use crate::values::{Duration, MacAddr, PortSpec, Prefix, Vip};

/// The whole file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// This node's identity and place (`[node]`).
    pub node: Node,
    /// DPDK and worker settings (`[dataplane]`).
    #[serde(default)]
    pub dataplane: Dataplane,
    /// Network ports (`[[ports]]`).
    #[serde(default)]
    pub ports: Vec<Port>,
    /// Frontends (`[[forwarding_rules]]`).
    #[serde(default)]
    pub forwarding_rules: Vec<ForwardingRule>,
    /// Backends (`[[backend_services]]`).
    #[serde(default)]
    pub backend_services: Vec<BackendService>,
    /// Health checks (`[[health_checks]]`).
    #[serde(default)]
    pub health_checks: Vec<HealthCheck>,
    /// Composite health checks (`[[composite_health_checks]]`).
    #[serde(default)]
    pub composite_health_checks: Vec<CompositeHealthCheck>,
    /// Client-prefix → zone map for zonal affinity (`[[client_zones]]`).
    #[serde(default)]
    pub client_zones: Vec<ClientZone>,
    /// Route announcement through a BGP speaker (`[bgp]`); absent: none.
    #[serde(default)]
    pub bgp: Option<Bgp>,
    /// Flow-state sync between nodes (`[flow_sync]`); absent: off.
    #[serde(default)]
    pub flow_sync: Option<FlowSync>,
    /// Prometheus endpoint (`[metrics]`).
    #[serde(default)]
    pub metrics: Metrics,
    /// Control socket (`[control]`).
    #[serde(default)]
    pub control: Control,
    /// Tunnels to this node's own addresses (`[tunnel_ingress]`, M49);
    /// absent: the defaults of [`TunnelIngress`].
    #[serde(default)]
    pub tunnel_ingress: Option<TunnelIngress>,
    /// Neighbour resolution of next hops (`[neighbours]`, M47).
    #[serde(default)]
    pub neighbours: Neighbours,
    /// The availability groups' VIP pools (`[[availability_groups]]`, M5):
    /// rules that give no `vips` get theirs from these.
    #[serde(default)]
    pub availability_groups: Vec<AvailabilityGroup>,
    /// VRRP version 3 groups (`[[vrrp]]`): VIPs failed over on one L2
    /// segment without a router; absent: every VIP is served always.
    #[serde(default)]
    pub vrrp: Vec<Vrrp>,
}

/// `[[vrrp]]`: one VRRPv3 virtual router (RFC 5798).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vrrp {
    /// Virtual router ID, 1–255, the same on every node of the group.
    pub vrid: u8,
    /// The data port (by name) the group runs on.
    pub port: String,
    /// This node's priority, 1–254 (255 is the addresses' owner, which a
    /// load balancer never is); higher wins. Default 100.
    #[serde(default = "d_vrrp_priority")]
    pub priority: u8,
    /// Between two advertisements of the master: 100 ms to 40.95 s, in
    /// whole centiseconds (the field is 12 bits of centiseconds). Default
    /// `"1s"`.
    #[serde(default = "d_vrrp_interval")]
    pub advert_interval: Duration,
    /// Whether this node takes over from a master of lower priority.
    /// Default true.
    #[serde(default = "d_true")]
    pub preempt: bool,
    /// The group's VIPs: single-address VIPs of this file's rules, all of
    /// one IP version.
    pub vips: Vec<IpAddr>,
    /// The only addresses advertisements are taken from (the other nodes'
    /// addresses on the port); empty (default): any sender on the link.
    #[serde(default)]
    pub peers: Vec<IpAddr>,
}

fn d_vrrp_priority() -> u8 {
    100
}

fn d_vrrp_interval() -> Duration {
    Duration(std::time::Duration::from_secs(1))
}

/// `[[availability_groups]]`: what an availability group allocates from.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AvailabilityGroup {
    /// 0 or 1.
    pub group: u8,
    /// Prefixes (of either IP version, host bits clear) from which a rule
    /// without `vips` gets this group's VIP: one address each, chosen by
    /// the rule's name (the same on every node whatever the order of the
    /// file), skipping every address another rule names or was given.
    pub vip_pool: Vec<Prefix>,
}

/// A rule's IP version, for VIPs from a pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum IpVersion {
    /// An IPv4 VIP.
    #[default]
    #[serde(rename = "IPV4")]
    V4,
    /// An IPv6 VIP.
    #[serde(rename = "IPV6")]
    V6,
}

/// `[node]`: who this balancer is and where it stands.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// Node name (logs, metrics, flow sync).
    pub name: String,
    /// The node's region (M24).
    pub region: String,
    /// The node's zone.
    pub zone: String,
    /// `0` or `1`: serve and announce only that availability group's VIPs
    /// (M5). Absent: serve both.
    #[serde(default)]
    pub availability_group: Option<u8>,
    /// Regions nearest first (M24). Default: the node's own region only;
    /// regions not listed come after the listed ones, in name order.
    #[serde(default)]
    pub region_preference: Vec<String>,
    /// How long to keep forwarding after withdrawing routes on shutdown (M39).
    #[serde(default = "d_shutdown_drain")]
    pub shutdown_drain: Duration,
    /// This node's share (0–1] of every `RATE` capacity while it cannot
    /// count the cluster's rates: peers silent, or no `[flow_sync]`.
    /// Absent: 1 / (flow-sync peers + 1), so 1 for a lone node.
    #[serde(default)]
    pub capacity_share: Option<f64>,
}

fn d_shutdown_drain() -> Duration {
    Duration::secs(30)
}

/// `[dataplane]`: DPDK, cores, buffers, the flow table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dataplane {
    /// EAL arguments, as on a DPDK command line (`-l` is derived from the
    /// cores below when absent).
    #[serde(default)]
    pub eal_args: Vec<String>,
    /// Cores of the poll-mode workers, one queue pair per port each.
    #[serde(default = "d_worker_cores")]
    pub worker_cores: Vec<u32>,
    /// Core of the management thread (health, reload, metrics).
    #[serde(default)]
    pub management_core: u32,
    /// Packets per RX/TX burst.
    #[serde(default = "d_burst")]
    pub burst_size: u16,
    /// Mbufs in the packet pool.
    #[serde(default = "d_mbufs")]
    pub mbufs: u32,
    /// RX and TX descriptors per queue.
    #[serde(default = "d_descriptors")]
    pub queue_descriptors: u16,
    /// Flow-table capacity in entries (M15).
    #[serde(default = "d_flow_capacity")]
    pub flow_table_capacity: u32,
    /// New flow entries each worker may create per second (M15); beyond
    /// it, new flows are forwarded statelessly and counted. Absent: see
    /// [`Dataplane::new_flow_budget_per_worker`].
    #[serde(default)]
    pub new_flow_budget: Option<u32>,
    /// Flow idle timeouts (M10).
    #[serde(default)]
    pub timeouts: Timeouts,
    /// ICMP "fragmentation needed" / "packet too big" errors each worker may
    /// send per second for packets too big for the egress MTU once
    /// encapsulated (M48); beyond it such packets are dropped and counted.
    #[serde(default = "d_icmp_too_big_rate")]
    pub icmp_too_big_rate: u32,
    /// ICMP echo replies each worker may send per second for VIPs that
    /// answer ping themselves (a rule's `answer_ping`); beyond it echo
    /// requests are dropped and counted. 0: never answered.
    #[serde(default = "d_icmp_echo_rate")]
    pub icmp_echo_rate: u32,
    /// Returns each worker may refuse per second from one appliance (a
    /// cookie that is not its flow's, a flow it does not hold, a direction
    /// or an ICMP error it may not send, M53); beyond it that appliance's
    /// returns are dropped unread until the next second, so guessing
    /// cookies stays hopeless. At least 1.
    #[serde(default = "d_gateway_mismatch_rate")]
    pub gateway_mismatch_rate: u32,
    /// Source ports of the health probes sent through VIPs (`target =
    /// "vip"`, M52): each (endpoint, VIP) probed gets one, and the data
    /// plane steers the host's packets from it to that endpoint. Must lie
    /// outside the kernel's `net.ipv4.ip_local_port_range`; default
    /// `"61000-61999"`.
    #[serde(default = "d_vip_probe_ports")]
    pub vip_probe_ports: PortSpec,
}

fn d_icmp_too_big_rate() -> u32 {
    1000
}

fn d_icmp_echo_rate() -> u32 {
    1000
}

fn d_gateway_mismatch_rate() -> u32 {
    100
}

fn d_vip_probe_ports() -> PortSpec {
    PortSpec::Ranges(vec![crate::values::PortRange {
        lo: 61_000,
        hi: 61_999,
    }])
}

impl Dataplane {
    /// The new-entry budget of one worker per second, for each of the two
    /// kinds of new flow (opened by a TCP SYN, and all others):
    /// `new_flow_budget`, else `capacity / first_packet seconds / workers`,
    /// at least 1000 — a flood of one kind can turn the table over at most
    /// once per first-packet timeout, while a busy node's real connections
    /// (which a table sized for them holds for minutes) stay well within it.
    pub fn new_flow_budget_per_worker(&self) -> u32 {
        if let Some(b) = self.new_flow_budget {
            return b;
        }
        let secs = self.timeouts.first_packet.0.as_secs().max(1);
        let workers = self.worker_cores.len().max(1) as u64;
        let b = u64::from(self.flow_table_capacity) / secs / workers;
        u32::try_from(b.max(1000)).unwrap_or(u32::MAX)
    }
}

fn d_worker_cores() -> Vec<u32> {
    vec![1]
}
fn d_burst() -> u16 {
    32
}
fn d_mbufs() -> u32 {
    16_383
}
fn d_descriptors() -> u16 {
    1024
}
fn d_flow_capacity() -> u32 {
    1 << 20
}

impl Default for Dataplane {
    fn default() -> Self {
        Self {
            eal_args: Vec::new(),
            worker_cores: d_worker_cores(),
            management_core: 0,
            burst_size: d_burst(),
            mbufs: d_mbufs(),
            queue_descriptors: d_descriptors(),
            flow_table_capacity: d_flow_capacity(),
            new_flow_budget: None,
            timeouts: Timeouts::default(),
            icmp_too_big_rate: d_icmp_too_big_rate(),
            icmp_echo_rate: d_icmp_echo_rate(),
            gateway_mismatch_rate: d_gateway_mismatch_rate(),
            vip_probe_ports: d_vip_probe_ports(),
        }
    }
}

/// `[dataplane.timeouts]`: how long an idle flow keeps its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    /// TCP after the handshake.
    #[serde(default = "d_tcp_established")]
    pub tcp_established: Duration,
    /// TCP before the handshake completes (SYN floods age out fast).
    #[serde(default = "d_tcp_half_open")]
    pub tcp_half_open: Duration,
    /// TCP after a FIN or RST was seen (the shortening of M10).
    #[serde(default = "d_tcp_closing")]
    pub tcp_closing: Duration,
    /// UDP.
    #[serde(default = "d_udp")]
    pub udp: Duration,
    /// Everything else (ICMP, ESP, GRE, …).
    #[serde(default = "d_other")]
    pub other: Duration,
    /// An entry created by anything but a TCP SYN (a mid-stream segment, a
    /// UDP datagram, a fragment) until the flow's next packet arrives (M15).
    #[serde(default = "d_first_packet")]
    pub first_packet: Duration,
}

fn d_tcp_established() -> Duration {
    Duration::secs(600)
}
fn d_tcp_half_open() -> Duration {
    Duration::secs(10)
}
fn d_tcp_closing() -> Duration {
    Duration::secs(10)
}
fn d_udp() -> Duration {
    Duration::secs(30)
}
fn d_other() -> Duration {
    Duration::secs(30)
}
fn d_first_packet() -> Duration {
    Duration::secs(10)
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            tcp_established: d_tcp_established(),
            tcp_half_open: d_tcp_half_open(),
            tcp_closing: d_tcp_closing(),
            udp: d_udp(),
            other: d_other(),
            first_packet: d_first_packet(),
        }
    }
}

/// What a port is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PortRole {
    /// Faces clients and the fabric (VIP traffic arrives here).
    Uplink,
    /// Faces backends (encapsulated traffic leaves here).
    Backend,
    /// The TAP/virtio-user interface to the kernel.
    Exception,
}

/// `[[ports]]`: one DPDK port.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Port {
    /// Port name (logs, metrics).
    pub name: String,
    /// DPDK device: a PCI address (`0000:3b:00.0`) or a virtual device name
    /// given in `eal_args` (`net_tap0`).
    pub device: String,
    /// What the port is for.
    pub role: PortRole,
    /// The balancer's own addresses on this port, with prefix length.
    #[serde(default)]
    pub addresses: Vec<Prefix>,
    /// MAC address to use; default: the device's.
    #[serde(default)]
    pub mac: Option<MacAddr>,
    /// Next hop for traffic leaving this port; default: none (directly
    /// connected destinations only).
    #[serde(default)]
    pub gateway: Option<IpAddr>,
    /// The next hop's MAC, when it should not be resolved with ARP/NDP.
    #[serde(default)]
    pub gateway_mac: Option<MacAddr>,
    /// MTU in bytes.
    #[serde(default = "d_mtu")]
    pub mtu: u16,
    /// An exception port only: the data port (`uplink` or `backend`, by
    /// name) whose host traffic it carries (M47); default: the uplink.
    #[serde(default)]
    pub for_port: Option<String>,
}

/// The port packets to backends leave by: the `backend` port, else the
/// uplink (its index in `ports`).
pub fn egress_port(ports: &[Port]) -> Option<(usize, &Port)> {
    let first = |role: PortRole| ports.iter().enumerate().find(|(_, p)| p.role == role);
    first(PortRole::Backend).or_else(|| first(PortRole::Uplink))
}

fn d_mtu() -> u16 {
    1500
}

/// A rule's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
pub enum Protocol {
    /// TCP only.
    #[serde(rename = "TCP")]
    Tcp,
    /// UDP only.
    #[serde(rename = "UDP")]
    Udp,
    /// TCP, UDP, ESP, GRE, ICMP and ICMPv6 (M2).
    #[serde(rename = "L3_DEFAULT")]
    L3Default,
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::L3Default => "L3_DEFAULT",
        })
    }
}

/// A rule's mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleMode {
    /// L4 passthrough to the service's endpoints (M1–M15).
    #[default]
    Passthrough,
    /// Gateway load balancer (M30–M33).
    Gateway,
}

/// `[[forwarding_rules]]`: a frontend.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardingRule {
    /// Rule name; child rules are `<name>-ag0` and `<name>-ag1` (M5).
    pub name: String,
    /// The VIP of availability group 0 and, optionally, of group 1; both of
    /// one IP version. A VIP is one address, or an IPv6 prefix from /96 to
    /// /128 (`"2001:db8:1::/96"`, a cloud's external IPv6 forwarding rule)
    /// whose every address the rule takes alike: announced as that prefix,
    /// probed through its first address after the network one. Omitted:
    /// one VIP per availability group with a `vip_pool`
    /// (`[[availability_groups]]`), of `ip_version`.
    #[serde(default)]
    pub vips: Vec<Vip>,
    /// Rules without `vips`: the IP version of the VIPs allocated from the
    /// pools, `IPV4` (default) or `IPV6`.
    #[serde(default)]
    pub ip_version: Option<IpVersion>,
    /// Whether `vips` were allocated from the pools (not in the file).
    #[serde(skip)]
    pub vips_from_pool: bool,
    /// `TCP`, `UDP` or `L3_DEFAULT`.
    pub protocol: Protocol,
    /// Destination ports; default `"all"`.
    #[serde(default)]
    pub ports: PortSpec,
    /// The backend service that takes the traffic.
    pub backend_service: String,
    /// `passthrough` (default) or `gateway`.
    #[serde(default)]
    pub mode: RuleMode,
    /// Gateway mode: the gateway endpoints traffic comes from (M31).
    #[serde(default)]
    pub gateway_endpoints: Vec<GatewayEndpoint>,
    /// Whether the VIPs answer ICMP echo (ping) themselves, rate-limited
    /// and counted; default true for passthrough TCP/UDP rules (zone health
    /// services and operators ping VIPs), false otherwise. An `L3_DEFAULT`
    /// rule forwards ICMP to its backends instead. A VIP answers only if
    /// none of its rules says false.
    #[serde(default)]
    pub answer_ping: Option<bool>,
    /// Passthrough rules: the clients allowed to reach the rule, as
    /// prefixes of the VIPs' IP version (`loadBalancerSourceRanges`, a
    /// cloud firewall's source ranges). Absent: every client. Packets from
    /// elsewhere, fragments and ICMP errors about their flows included, are
    /// dropped and counted as `source_not_allowed`. Asked when a flow
    /// begins, as a stateful firewall does: a flow admitted then keeps
    /// going until it ends, also after a reload that changes the list.
    #[serde(default)]
    pub source_ranges: Option<Vec<Prefix>>,
}

/// A gateway endpoint of a gateway-mode rule.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayEndpoint {
    /// Source address of the traffic it sends: a neighbour on a data
    /// port's subnet, whose resolved MAC identifies its frames; with
    /// `tunnel`, the outer source address of its tunnel.
    pub address: IpAddr,
    /// The 64-bit ID carried in the Geneve option (M30).
    pub id: u64,
    /// A remote endpoint (M31), in another network: its traffic arrives
    /// in this tunnel, from `address` to an own address of the node (on
    /// the UDP port of the rule's service's Geneve delivery), and what its
    /// flows' appliances return goes back to it in the same tunnel, from
    /// the egress port's address of `address`'s family. The set of remote
    /// endpoints' addresses is the tunnel's allow-list: a tunnel from
    /// anywhere else is dropped. Absent: a neighbour, recognised by MAC.
    #[serde(default)]
    pub tunnel: Option<GatewayTunnel>,
}

/// The tunnel a remote gateway endpoint's traffic arrives in (M31).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GatewayTunnel {
    /// Geneve (RFC 8926) with no options needed: the endpoint's identity
    /// is its outer source address.
    Geneve,
}

impl std::fmt::Display for GatewayTunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GatewayTunnel::Geneve => "geneve",
        })
    }
}

/// How packets reach endpoints (M8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryMode {
    /// Rewrite the destination MAC only.
    L2dsr,
    /// IP-in-IP.
    Ipip,
    /// GRE (RFC 2784).
    Gre,
    /// GUE variant 1 over UDP.
    Gue,
    /// Geneve (RFC 8926).
    Geneve,
}

impl std::fmt::Display for DeliveryMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeliveryMode::L2dsr => "l2dsr",
            DeliveryMode::Ipip => "ipip",
            DeliveryMode::Gre => "gre",
            DeliveryMode::Gue => "gue",
            DeliveryMode::Geneve => "geneve",
        })
    }
}

/// `[backend_services.geneve]`: Geneve parameters (M30).
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneveOptions {
    /// Outer UDP destination port.
    #[serde(default = "d_geneve_port")]
    pub port: u16,
    /// Option class of both options.
    #[serde(default = "d_geneve_class")]
    pub option_class: u16,
    /// Option type of the 64-bit gateway endpoint ID.
    #[serde(default = "d_geneve_endpoint_type")]
    pub endpoint_id_type: u8,
    /// Option type of the 32-bit flow cookie.
    #[serde(default = "d_geneve_cookie_type")]
    pub flow_cookie_type: u8,
}

fn d_geneve_port() -> u16 {
    wire::geneve::PORT
}
fn d_geneve_class() -> u16 {
    OptionIds::DEFAULT.class
}
fn d_geneve_endpoint_type() -> u8 {
    OptionIds::DEFAULT.endpoint_type
}
fn d_geneve_cookie_type() -> u8 {
    OptionIds::DEFAULT.cookie_type
}

impl Default for GeneveOptions {
    fn default() -> Self {
        Self {
            port: d_geneve_port(),
            option_class: d_geneve_class(),
            endpoint_id_type: d_geneve_endpoint_type(),
            flow_cookie_type: d_geneve_cookie_type(),
        }
    }
}

/// Session affinity (M9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SessionAffinity {
    /// 5-tuple.
    #[default]
    None,
    /// Source, destination, protocol.
    ClientIpProto,
    /// Source and destination.
    ClientIp,
    /// Source address and port, destination, protocol.
    ClientIpPortProto,
}

/// Connection persistence on unhealthy backends (M11).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ConnectionPersistence {
    /// TCP flows stay, UDP and others move.
    #[default]
    DefaultForProtocol,
    /// Every flow moves.
    NeverPersist,
    /// Every flow stays.
    AlwaysPersist,
}

/// Selection algorithm (M12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LoadBalancing {
    /// Maglev with slots in proportion to endpoint weights.
    #[default]
    WeightedMaglev,
    /// Maglev, every eligible endpoint equal.
    Maglev,
}

/// The versioned hash algorithm: every node of a cluster must build
/// identical tables, so the algorithm is named in the config from day one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum HashAlgorithm {
    /// Maglev permutation fill, version 1.
    #[default]
    #[serde(rename = "maglev-v1")]
    MaglevV1,
    /// Exact quotas filled in lockstep: fewer slots move when an endpoint
    /// comes or goes (the `maglev` crate documents both).
    #[serde(rename = "maglev-v2")]
    MaglevV2,
}

/// What to do when a rule matches but no endpoint is eligible (M14).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NoBackendAction {
    /// Drop (and count).
    #[default]
    Drop,
    /// Answer TCP with RST; drop everything else.
    Reset,
}

/// Where new connections go when a service has no eligible endpoint,
/// before its [`NoBackendAction`] applies (M14).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NoBackendFallback {
    /// Nowhere: the `no_backend_action` applies at once.
    #[default]
    None,
    /// To the endpoints draining after they left the configuration while
    /// healthy, as long as their draining period lasts.
    Draining,
}

/// Capacity accounting (M25).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BalancingMode {
    /// Utilization reported by the endpoints' health checks.
    #[default]
    Utilization,
    /// Packets per second.
    Rate,
}

/// `[backend_services.aggregation]`: when a service (per region) counts as
/// healthy (M19).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Aggregation {
    /// Unhealthy below this percentage of healthy endpoints (0–100).
    #[serde(default = "d_min_percent")]
    pub min_healthy_percent: u8,
    /// Unhealthy below this many healthy endpoints.
    #[serde(default = "d_min_count")]
    pub min_healthy_count: u32,
}

fn d_min_percent() -> u8 {
    60
}
fn d_min_count() -> u32 {
    1
}

impl Default for Aggregation {
    fn default() -> Self {
        Self {
            min_healthy_percent: d_min_percent(),
            min_healthy_count: d_min_count(),
        }
    }
}

/// `[backend_services.locality]`: zones (M27, M28).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Locality {
    /// Prefer endpoints in the client's zone (zones from `[[client_zones]]`).
    #[serde(default)]
    pub zonal_affinity: bool,
    /// With zonal affinity: fraction of new connections allowed to leave the
    /// zone while it has healthy endpoints (0.0–1.0; 0 = stay in zone).
    #[serde(default)]
    pub zonal_spill_ratio: f64,
    /// Spread load evenly over all zones of a region (by weight).
    #[serde(default = "d_true")]
    pub cross_zone: bool,
}

fn d_true() -> bool {
    true
}

impl Default for Locality {
    fn default() -> Self {
        Self {
            zonal_affinity: false,
            zonal_spill_ratio: 0.0,
            cross_zone: true,
        }
    }
}

/// `[[backend_services]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendService {
    /// Service name.
    pub name: String,
    /// `l2dsr`, `ipip`, `gre`, `gue` or `geneve`.
    pub delivery: DeliveryMode,
    /// `gre`: the optional GRE key.
    #[serde(default)]
    pub gre_key: Option<u32>,
    /// `gue`: outer UDP destination port; default 6080.
    #[serde(default)]
    pub gue_port: Option<u16>,
    /// `geneve`: port and option classes/types (defaults of M30).
    #[serde(default)]
    pub geneve: Option<GeneveOptions>,
    /// Session affinity; default `NONE`.
    #[serde(default)]
    pub session_affinity: SessionAffinity,
    /// Default `DEFAULT_FOR_PROTOCOL`.
    #[serde(default)]
    pub connection_persistence: ConnectionPersistence,
    /// How long a removed or unhealthy endpoint keeps its flows; `"0s"`
    /// disables draining. Default `"300s"`.
    #[serde(default = "d_draining")]
    pub connection_draining_timeout: Duration,
    /// Default `WEIGHTED_MAGLEV`.
    #[serde(default)]
    pub load_balancing: LoadBalancing,
    /// Maglev lookup-table size, a prime; default 65537.
    #[serde(default = "d_table_size")]
    pub maglev_table_size: u32,
    /// Default `"maglev-v1"`.
    #[serde(default)]
    pub hash: HashAlgorithm,
    /// Name of the health check probing the endpoints; absent: endpoints
    /// are always healthy.
    #[serde(default)]
    pub health_check: Option<String>,
    /// Health aggregation policy.
    #[serde(default)]
    pub aggregation: Aggregation,
    /// Use every endpoint when all are unhealthy (M23); default false, but
    /// true for a service of gateway-mode rules (M31: traffic through
    /// appliances keeps flowing when every appliance fails its checks).
    #[serde(default)]
    pub fail_open: Option<bool>,
    /// `drop` (default) or `reset`.
    #[serde(default)]
    pub no_backend_action: NoBackendAction,
    /// Where new connections go when no configured endpoint is eligible,
    /// before `no_backend_action` applies: `none` (default) or `draining`,
    /// the endpoints that left the configuration while healthy and are
    /// still within their `connection_draining_timeout` (Kubernetes'
    /// terminating endpoints as the last resort, M14).
    #[serde(default)]
    pub no_backend_fallback: NoBackendFallback,
    /// What a group's capacity counts (M25). `UTILIZATION` (default): the
    /// utilization its endpoints report to an HTTP(S) health check, and
    /// also packets per second where `max_rate_per_endpoint` or the group's
    /// `max_rate` is set — the capacity is then reached when either is
    /// ("or both"). `RATE`: packets per second only.
    #[serde(default)]
    pub balancing_mode: BalancingMode,
    /// Packets per second per endpoint. `RATE` needs this or a `max_rate`
    /// on every group; `UTILIZATION` takes it as a second limit.
    #[serde(default)]
    pub max_rate_per_endpoint: Option<u64>,
    /// `UTILIZATION` only: target utilization (0 < x ≤ 1) of each group
    /// that sets none of its own; default 0.8.
    #[serde(default)]
    pub max_utilization: Option<f64>,
    /// Zonal affinity and cross-zone balancing.
    #[serde(default)]
    pub locality: Locality,
    /// Backend groups (at least one, all of one kind).
    pub groups: Vec<BackendGroup>,
}

fn d_draining() -> Duration {
    Duration::secs(300)
}
fn d_table_size() -> u32 {
    65_537
}

/// What a group holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKind {
    /// Endpoints listed in `endpoints`.
    #[default]
    Endpoints,
    /// Another Spillway's forwarding rule (M21), in `remote`.
    RemoteRule,
}

/// `[[backend_services.groups]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendGroup {
    /// Group name, unique within the service.
    pub name: String,
    /// Region of its endpoints.
    pub region: String,
    /// Zone of its endpoints.
    pub zone: String,
    /// `endpoints` (default) or `remote_rule`.
    #[serde(default)]
    pub kind: GroupKind,
    /// Share of the group's capacity in use, 0.0–1.0 (0 drains it); default 1.
    #[serde(default = "d_scaler")]
    pub capacity_scaler: f64,
    /// Packets per second for the whole group. `RATE`: needed unless the
    /// service sets `max_rate_per_endpoint`; `UTILIZATION`: a second limit
    /// besides utilization, whichever is reached first.
    #[serde(default)]
    pub max_rate: Option<u64>,
    /// `UTILIZATION` only: the group's target utilization (0 < x ≤ 1);
    /// default: the service's `max_utilization`.
    #[serde(default)]
    pub max_utilization: Option<f64>,
    /// `endpoints` groups: the endpoints.
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    /// `remote_rule` groups: the remote rule.
    #[serde(default)]
    pub remote: Option<RemoteRule>,
}

fn d_scaler() -> f64 {
    1.0
}

/// One endpoint.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// Address packets are delivered to.
    pub address: IpAddr,
    /// A dual-stack endpoint's IPv6 address (`address` is then its IPv4
    /// one): IPv6 packets are delivered here.
    #[serde(default)]
    pub address6: Option<IpAddr>,
    /// Port probed by the health check when it names none (traffic is never
    /// port-translated: M6).
    #[serde(default)]
    pub port: Option<u16>,
    /// Relative weight 0–1000 (0: no new flows); default 100.
    #[serde(default = "d_weight")]
    pub weight: u16,
    /// `l2dsr`: the endpoint's MAC when it should not be resolved.
    #[serde(default)]
    pub mac: Option<MacAddr>,
}

fn d_weight() -> u16 {
    100
}

/// A remote rule backing a `remote_rule` group (M21).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteRule {
    /// The remote Spillway's status URL (`http://host:port/status`).
    pub status_url: String,
    /// Name of the forwarding rule there whose exported state decides, or
    /// of one of its child rules (`web-ag0`: the state through that VIP).
    pub rule: String,
    /// The remote rule's VIP, where packets go.
    pub vip: IpAddr,
}

/// Health-check protocol (M16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum HealthCheckType {
    /// Connect succeeds.
    #[serde(rename = "TCP")]
    Tcp,
    /// Status 2xx or 3xx.
    #[serde(rename = "HTTP")]
    Http,
    /// Status 2xx or 3xx over TLS (host names not verified).
    #[serde(rename = "HTTPS")]
    Https,
}

/// Where a health check's probes go (M52).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthCheckTarget {
    /// The endpoint's own address.
    #[default]
    Endpoint,
    /// Each VIP of the service's rules that this node serves (M5),
    /// delivered to the endpoint through the service's delivery mode, as
    /// clients' packets are: health is kept per (endpoint, VIP).
    Vip,
}

/// `[[health_checks]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheck {
    /// Name.
    pub name: String,
    /// `TCP`, `HTTP` or `HTTPS`.
    #[serde(rename = "type")]
    pub kind: HealthCheckType,
    /// Port probed; default: each endpoint's `port`.
    #[serde(default)]
    pub port: Option<u16>,
    /// HTTP(S) path; default `"/"`.
    #[serde(default)]
    pub path: Option<String>,
    /// HTTP(S) Host header; default: the endpoint address.
    #[serde(default)]
    pub host: Option<String>,
    /// Time between probes; default `"5s"`.
    #[serde(default = "d_interval")]
    pub interval: Duration,
    /// Probe timeout, at most the interval; default `"3s"`.
    #[serde(default = "d_timeout")]
    pub timeout: Duration,
    /// Successes to become healthy; default 2.
    #[serde(default = "d_healthy")]
    pub healthy_threshold: u32,
    /// Failures to become unhealthy; default 3.
    #[serde(default = "d_unhealthy")]
    pub unhealthy_threshold: u32,
    /// HTTP(S): read `X-Load-Balancing-Endpoint-Weight` (M17); default false.
    #[serde(default)]
    pub weight_from_header: bool,
    /// Source address of probes, documented to backends (M22); default: the
    /// kernel's choice on the exception interface.
    #[serde(default)]
    pub source_address: Option<IpAddr>,
    /// `"endpoint"` (default): probe each endpoint's address; `"vip"`:
    /// probe through each VIP (M52).
    #[serde(default)]
    pub target: HealthCheckTarget,
}

fn d_interval() -> Duration {
    Duration::secs(5)
}
fn d_timeout() -> Duration {
    Duration::secs(3)
}
fn d_healthy() -> u32 {
    2
}
fn d_unhealthy() -> u32 {
    3
}

/// `[[composite_health_checks]]` (M20).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompositeHealthCheck {
    /// Name.
    pub name: String,
    /// 1–10 health sources.
    pub sources: Vec<HealthSource>,
    /// The forwarding rule whose exported state this decides.
    pub destination: String,
}

/// One source of a composite.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthSource {
    /// A backend service (never a composite).
    pub backend_service: String,
    /// Aggregation policy; default: the service's own.
    #[serde(default)]
    pub aggregation: Option<Aggregation>,
}

/// `[[client_zones]]`: clients from these prefixes are in this zone (M27).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientZone {
    /// Zone name (as in backend groups).
    pub zone: String,
    /// Source prefixes.
    pub prefixes: Vec<Prefix>,
}

/// Supported BGP speakers (M34): we drive a real one, never our own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BgpSpeaker {
    /// BIRD, through its control socket.
    Bird,
    /// GoBGP, through its gRPC API.
    Gobgp,
    /// ExaBGP, through its API pipe.
    Exabgp,
}

/// `[bgp]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bgp {
    /// `bird`, `gobgp` or `exabgp`.
    pub speaker: BgpSpeaker,
    /// How to reach the speaker: a socket/pipe path or `host:port`.
    pub control: String,
    /// Local AS number.
    pub local_asn: u32,
    /// Router ID; default: the speaker's.
    #[serde(default)]
    pub router_id: Option<Ipv4Addr>,
    /// Neighbours (for status output and speaker configuration checks).
    #[serde(default)]
    pub peers: Vec<BgpPeer>,
    /// Next hop announced; default: the speaker's.
    #[serde(default)]
    pub next_hop: Option<IpAddr>,
    /// When to announce a VIP: `when_healthy` (default: only while its rule
    /// is healthy and the node is not draining, M35) or `always` (static).
    #[serde(default)]
    pub announce: AnnouncePolicy,
    /// Keep announcing when every VIP would be withdrawn (M35); default true.
    #[serde(default = "d_true")]
    pub fail_open: bool,
    /// The file of BIRD `protocol static` blocks holding the announced VIPs,
    /// which the node's bird.conf includes (`speaker = "bird"`); default
    /// `/run/spillway/bird-vips.conf`.
    #[serde(default = "d_routes_file")]
    pub routes_file: PathBuf,
    /// BFD on every BGP session of the node's BIRD (`speaker = "bird"`):
    /// `{ interval = "100ms", multiplier = 3 }` (the default), or `{
    /// enabled = false }`.
    #[serde(default)]
    pub bfd: Bfd,
}

fn d_routes_file() -> PathBuf {
    PathBuf::from("/run/spillway/bird-vips.conf")
}

/// `[bgp] bfd`: Bidirectional Forwarding Detection (RFC 5880) on the BGP
/// sessions, which `spillway bird-config` writes into bird.conf. A peer
/// that stops hearing BFD control packets for `interval × multiplier`
/// takes the session down, and with it this node's routes, instead of
/// waiting for BGP's hold timer. On by default; a peer that runs no BFD
/// is not affected (the session is taken down only once BFD was up).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table: { interval = \"100ms\", multiplier = 3 }, or { enabled = false } for none"
)]
pub struct Bfd {
    /// Whether the sessions run BFD; default true.
    #[serde(default = "d_true")]
    pub enabled: bool,
    /// The interval this node asks to receive and offers to send BFD
    /// control packets at; default `"100ms"`, from 10 ms to 10 s.
    #[serde(default = "d_bfd_interval")]
    pub interval: Duration,
    /// How many intervals without a packet take the session down; default
    /// 3, from 1 to 255.
    #[serde(default = "d_bfd_multiplier")]
    pub multiplier: u32,
}

impl Default for Bfd {
    fn default() -> Self {
        Bfd {
            enabled: true,
            interval: d_bfd_interval(),
            multiplier: d_bfd_multiplier(),
        }
    }
}

fn d_bfd_interval() -> Duration {
    Duration::millis(100)
}
fn d_bfd_multiplier() -> u32 {
    3
}

/// When VIPs are announced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnnouncePolicy {
    /// While the rule's (composite or aggregated) health is HEALTHY and the
    /// node is neither draining nor shutting down.
    #[default]
    WhenHealthy,
    /// Always, until shutdown (health never withdraws).
    Always,
}

/// A BGP neighbour.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BgpPeer {
    /// Neighbour address.
    pub address: IpAddr,
    /// Neighbour AS number.
    pub asn: u32,
}

/// `[flow_sync]` (M36).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSync {
    /// UDP address to receive on.
    pub listen: SocketAddr,
    /// Peers to send to.
    pub peers: Vec<SocketAddr>,
    /// Flow entries per datagram; default 64.
    #[serde(default = "d_batch")]
    pub batch_size: u16,
    /// Longest wait before a partial batch is sent; default `"10ms"`.
    #[serde(default = "d_batch_interval")]
    pub batch_interval: Duration,
    /// The cluster's shared key (the sealing key is derived from it),
    /// `"hex:…"` or `"base64:…"`; this or `key_file` is required.
    #[serde(default)]
    pub key: Option<String>,
    /// A file holding the key in the same form (a trailing newline is fine).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

impl FlowSync {
    /// The shared key, from `key` or read from `key_file`.
    ///
    /// # Errors
    /// The field to blame and why: neither or both given, an unreadable
    /// file, or a key [`flowsync::SyncKey::parse`] refuses.
    pub fn resolve_key(&self) -> Result<flowsync::SyncKey, (&'static str, String)> {
        let text = match (&self.key, &self.key_file) {
            (Some(k), None) => k.clone(),
            (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
                (
                    "flow_sync.key_file",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?,
            (None, None) => {
                return Err((
                    "flow_sync",
                    "flow sync needs a shared key: set key or key_file".to_owned(),
                ));
            }
            (Some(_), Some(_)) => {
                return Err((
                    "flow_sync.key_file",
                    "give the key once: key or key_file, not both".to_owned(),
                ));
            }
        };
        let field = if self.key.is_some() {
            "flow_sync.key"
        } else {
            "flow_sync.key_file"
        };
        flowsync::SyncKey::parse(&text).map_err(|e| (field, e.to_string()))
    }
}

fn d_batch() -> u16 {
    64
}
fn d_batch_interval() -> Duration {
    Duration::millis(10)
}

/// `[metrics]` (M42, M50).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    /// HTTP listen address of the Prometheus endpoint; default
    /// `127.0.0.1:9469`.
    #[serde(default = "d_metrics")]
    pub listen: SocketAddr,
    /// Client addresses admitted; absent (default): every address. Others
    /// are closed at once.
    #[serde(default)]
    pub allow: Option<Vec<Prefix>>,
    /// Connections served at once; more are refused. Default 64.
    #[serde(default = "d_max_connections")]
    pub max_connections: u32,
    /// Connections served at once from one client (an IPv4 address, or an
    /// IPv6 /64); more are refused, so one client cannot hold every slot.
    /// Absent: 8, or `max_connections` if smaller; see
    /// [`Metrics::per_client`].
    #[serde(default)]
    pub max_connections_per_client: Option<u32>,
    /// Time a client has to send its request, and again to read the
    /// answer. Default 5 s.
    #[serde(default = "d_listener_timeout")]
    pub timeout: Duration,
}

/// `[metrics] max_connections_per_client` when absent.
pub use values::listener::DEFAULT_MAX_CONNECTIONS_PER_CLIENT;

impl Metrics {
    /// The per-client cap in effect: as set, else the default, never more
    /// than `max_connections` (validation refuses an explicit larger one).
    pub fn per_client(&self) -> u32 {
        self.max_connections_per_client
            .unwrap_or(DEFAULT_MAX_CONNECTIONS_PER_CLIENT)
            .min(self.max_connections)
    }
}

fn d_metrics() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9469))
}
fn d_max_connections() -> u32 {
    64
}
fn d_listener_timeout() -> Duration {
    Duration::secs(5)
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            listen: d_metrics(),
            allow: None,
            max_connections: d_max_connections(),
            max_connections_per_client: None,
            timeout: d_listener_timeout(),
        }
    }
}

/// `[control]` (M40, M50).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Control {
    /// Unix socket of `spillway status|stats|flows|reload|drain`; default
    /// `/run/spillway/control.sock`.
    #[serde(default = "d_socket")]
    pub socket: PathBuf,
    /// Group of the socket (mode 0660); absent (default): the daemon's own
    /// group. Its members may use the socket.
    #[serde(default)]
    pub socket_group: Option<String>,
    /// Connections served at once; more are refused. Default 64.
    #[serde(default = "d_max_connections")]
    pub max_connections: u32,
    /// Time a client has to send its command, and again to read the
    /// answer. Default 5 s.
    #[serde(default = "d_listener_timeout")]
    pub timeout: Duration,
    /// Reload when the configuration file changes (M38); default true.
    #[serde(default = "d_true")]
    pub watch_config: bool,
}

/// `[control] socket` when absent: where `spillway status` and the other
/// client commands look without `--socket` or `--config`.
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/spillway/control.sock";

fn d_socket() -> PathBuf {
    PathBuf::from(DEFAULT_CONTROL_SOCKET)
}

impl Default for Control {
    fn default() -> Self {
        Self {
            socket: d_socket(),
            socket_group: None,
            max_connections: d_max_connections(),
            timeout: d_listener_timeout(),
            watch_config: true,
        }
    }
}

/// A tunnel protocol of `[tunnel_ingress] protocols`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TunnelProtocol {
    /// IP-in-IP: IPv4 (protocol 4) or IPv6 (41) inside IPv4 or IPv6.
    Ipip,
    /// GRE (protocol 47), RFC 2784/2890.
    Gre,
    /// GUE over UDP to `gue_port`.
    Gue,
    /// GENEVE over UDP to `geneve_port` (RFC 8926).
    Geneve,
}

/// `[tunnel_ingress]` (M49): tunnel packets to the node's own addresses
/// whose inner packet goes to one of its VIPs are processed as if that
/// inner packet had arrived directly.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelIngress {
    /// Accept tunnels at all; default true.
    #[serde(default = "d_true")]
    pub enabled: bool,
    /// Outer sources accepted; absent: the addresses of this node's
    /// `remote_rule` peers (the `remote.vip` and the `status_url` host of
    /// every `remote_rule` group).
    #[serde(default)]
    pub allow: Option<Vec<Prefix>>,
    /// Tunnel protocols accepted; default all four.
    #[serde(default = "d_tunnel_protocols")]
    pub protocols: Vec<TunnelProtocol>,
    /// UDP destination port of GUE; default 6080.
    #[serde(default = "d_gue_port")]
    pub gue_port: u16,
    /// UDP destination port of GENEVE; default 6081.
    #[serde(default = "d_geneve_port")]
    pub geneve_port: u16,
}

fn d_tunnel_protocols() -> Vec<TunnelProtocol> {
    vec![
        TunnelProtocol::Ipip,
        TunnelProtocol::Gre,
        TunnelProtocol::Gue,
        TunnelProtocol::Geneve,
    ]
}
fn d_gue_port() -> u16 {
    wire::gue::PORT
}

impl Default for TunnelIngress {
    fn default() -> Self {
        Self {
            enabled: true,
            allow: None,
            protocols: d_tunnel_protocols(),
            gue_port: d_gue_port(),
            geneve_port: d_geneve_port(),
        }
    }
}

/// `[neighbours]`: how next hops are resolved with ARP / IPv6 neighbour
/// discovery and kept fresh (M47). The defaults are Linux's.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Neighbours {
    /// How long an answer is trusted before the next hop is asked again
    /// (Linux's `base_reachable_time`); default 30 s.
    #[serde(default = "d_reachable")]
    pub reachable: Duration,
    /// Interval between two requests while an answer is awaited (Linux's
    /// `retrans_time`); default 1 s.
    #[serde(default = "d_retransmit")]
    pub retransmit: Duration,
    /// Unanswered requests after which a next hop is failed (Linux's
    /// `mcast_solicit` / `ucast_solicit`); default 3.
    #[serde(default = "d_probes")]
    pub probes: u32,
    /// Longest interval between two requests to a failed next hop (the
    /// interval doubles from `retransmit` up to this); default 60 s.
    #[serde(default = "d_failed_retry")]
    pub failed_retry: Duration,
    /// Gratuitous ARP / unsolicited neighbour advertisements sent for each
    /// address when it starts being served (at start, on a reload that adds
    /// it); default 3, 0 sends none.
    #[serde(default = "d_announce_count")]
    pub announce_count: u32,
    /// Interval between two of those announcements; default 1 s.
    #[serde(default = "d_announce_interval")]
    pub announce_interval: Duration,
}

fn d_reachable() -> Duration {
    Duration::secs(30)
}

fn d_retransmit() -> Duration {
    Duration::secs(1)
}

fn d_probes() -> u32 {
    3
}

fn d_failed_retry() -> Duration {
    Duration::secs(60)
}

fn d_announce_count() -> u32 {
    3
}

fn d_announce_interval() -> Duration {
    Duration::secs(1)
}

impl Default for Neighbours {
    fn default() -> Self {
        Self {
            reachable: d_reachable(),
            retransmit: d_retransmit(),
            probes: d_probes(),
            failed_retry: d_failed_retry(),
            announce_count: d_announce_count(),
            announce_interval: d_announce_interval(),
        }
    }
}
