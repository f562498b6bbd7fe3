-- Pktgen-DPDK script: traffic to a Spillway VIP for the bare-metal benchmarks
-- (perf/BARE-METAL.md). The same cases as perf/trex/spillway_bench.py: TCP ACKs (established
-- flows), TCP SYNs (new flows), UDP and IPv6 to the VIP, from 1 to millions of client flows.
--
-- pktgen passes no arguments to a -f script, so the case comes from the environment:
--
--   SPW_DST_MAC   MAC of Spillway's uplink port (required)
--   SPW_KIND      ack | syn | udp | ipv6 | ipv6-syn | ipv6-udp            (default ack)
--   SPW_FLOWS     distinct client flows, 1 .. 8388608; in range mode at most SPW_MBUFS
--                 (default 4096)
--   SPW_MBUFS     mbufs in each TX queue's range pool: range mode builds one packet per mbuf,
--                 once, so it sends at most that many distinct flows. pktgen makes
--                 (RX + TX descriptors) x 8 of them, 24576 with its defaults (1024 + 2048),
--                 and prints the figure only when started with -v ("mbufs/port 24576")
--                 (default 24576)
--   SPW_PCAP      pcap mode: the file given to pktgen as `-s <tx port>:FILE`, written
--                 beforehand by this script run outside pktgen (SPW_WRITE_PCAP below); the
--                 script checks that pktgen loaded exactly that file for the TX port and that
--                 it holds this case's flows, then sends it instead of ranges
--   SPW_VIP       default 198.18.10.10, or 2001:db8::10 for the ipv6 kinds
--   SPW_PORT      VIP port; default 80 for TCP, 53 for UDP
--   SPW_SIZE      frame length without FCS (default 60; 74 for the ipv6 kinds: pktgen
--                 pads IPv6 frames to 74 bytes, 78 with the FCS)
--   SPW_MODE      l2dsr | ipip | gre | gre-key | gue | geneve: the DUT's delivery mode, for the
--                 expected egress frame length in the report                (default gue)
--   SPW_TX_PORT   pktgen port cabled to Spillway's uplink                   (default 0)
--   SPW_RX_PORT   pktgen port cabled to Spillway's backend port             (default 1)
--   SPW_RATE      transmit rate, percent of line rate                       (default 100)
--   SPW_WARMUP    seconds of traffic before the measurement                 (default 2)
--   SPW_DURATION  seconds measured, then traffic stops and a report is printed; 0 starts the
--                 traffic and leaves it running; -1 only configures       (default 30)
--   SPW_FIRST_PACKET  seconds Spillway keeps a flow's first-packet (and half-open SYN) entry
--                 before the flow's next packet: its [dataplane.timeouts] first_packet and
--                 tcp_half_open, for the new-flow line of the report      (default 10)
--   SPW_CMDFILE   where to write the pktgen CLI commands that the Lua binding lacks
--                 (default /tmp/spillway-pktgen.pkt)
--
--   sudo env SPW_DST_MAC=3c:fd:fe:aa:bb:cc SPW_KIND=syn SPW_FLOWS=16384 \
--       pktgen -l 0-7 -n 4 -a 0000:af:00.0 -a 0000:af:00.1 -- -v -m "[1:2-5].0, [6:7].1" \
--       -f perf/pktgen/spillway.lua
--
-- More flows than range mode can send: write them to a pcap with plain Lua first, then give
-- it to pktgen (same variables both times):
--
--   env SPW_DST_MAC=... SPW_KIND=syn SPW_FLOWS=1048576 SPW_WRITE_PCAP=/tmp/syn-1m.pcap \
--       lua5.4 perf/pktgen/spillway.lua
--   sudo env SPW_DST_MAC=... SPW_KIND=syn SPW_FLOWS=1048576 SPW_PCAP=/tmp/syn-1m.pcap \
--       pktgen ... -- -v -m "[1:2-5].0, [6:7].1" -s 0:/tmp/syn-1m.pcap -f perf/pktgen/spillway.lua
--
-- Needs pktgen 24.03.1 or later (pktgen.info.Pktgen_Version): before it, pktgen.portStats
-- read 0 in Lua scripts while traffic flowed, so the script refuses older ones.
--
-- Flow layout (as the TRex profile; M.flow below is its one definition here): flow i,
-- 0 <= i < flows, has client address 10.0.0.1 + i (IPv6: 2001:db8:c::1 + i) and source port
-- 1235 + (i mod P), P = gcd(flows, 4096). Range mode builds packet k as flow k: pktgen steps
-- its range template before building each packet (value + inc, wrapping from past max to min),
-- and the template starts at pktgen's defaults, source port 1234 and client 192.168.<port>.1
-- (IPv6 ::), so the first step lands on 1235 and, past the client range, on its start. P
-- divides flows, so the (address, port) pairs repeat after exactly `flows` packets. The script
-- resets the TX port (pktgen.reset) first, so an earlier run leaves no template behind.
--
-- TCP flags and IPv6 ranges have no Lua call in pktgen (only the CLI commands `range <port> tcp
-- flag set|clr <flag>` and `range <port> type ipv6`, pktgen 21.x and later): the script writes
-- them to SPW_CMDFILE and runs that file through pktgen.run("cmd", ...) where the binding has
-- it; otherwise it stops before starting traffic and says to `load` the file by hand.

local M = {}

M.KINDS = { "ack", "syn", "udp", "ipv6", "ipv6-syn", "ipv6-udp" }
M.MODES = { "l2dsr", "ipip", "gre", "gre-key", "gue", "geneve" }
M.FLOW_COUNTS = { 1, 4096, 65536, 1048576 }
M.MAX_FLOWS = 8388608
M.CLIENT4_FIRST = (10 << 24) | 1 -- 10.0.0.1
M.CLIENT6_PREFIX = "2001:db8:c::"
-- pktgen's default source port: its range template starts there, so one step of 1 makes the
-- first range packet's port 1235, the layout's first port (see the flow layout above).
M.PKTGEN_SPORT = 1234
M.CLIENT_PORT_FIRST = 1235
M.PORT_CYCLE = 4096
M.FCS = 4
-- pktgen enlarges IPv6 frames to 78 bytes with the FCS (its MIN_v6_PKT_SIZE).
M.PKTGEN_MIN_V6 = 74
-- pktgen's default descriptors and its mbufs per pool: each TX queue gets a range pool of
-- (rxd + txd) x 8 mbufs (MAX_MBUFS_PER_PORT), printed with -v as "mbufs/port".
M.PKTGEN_RXD, M.PKTGEN_TXD, M.PKTGEN_MBUFS_PER_DESC = 1024, 2048, 8
-- What a pcap mbuf costs: the rte_mbuf header and the headroom before the frame, and DPDK's
-- mempool object header, cache line and default memory channels (EAL -n).
M.MBUF_HEADER, M.MBUF_HEADROOM, M.CACHE_LINE, M.CHANNELS = 128, 128, 64, 4
-- The first pktgen whose Lua portStats are updated while a script runs.
M.MIN_VERSION = { 24, 3, 1 }
M.MIN_VERSION_TEXT = "24.03.1"

-- The mbufs of one TX queue's range pool for pktgen's --rxd and --txd.
function M.range_mbufs(rxd, txd)
  return (rxd + txd) * M.PKTGEN_MBUFS_PER_DESC
end

-- range mode's flow limit with pktgen's default descriptors.
M.RANGE_MBUFS = M.range_mbufs(M.PKTGEN_RXD, M.PKTGEN_TXD)

local ETH, IPV4, IPV6, TCP_HDR, UDP_HDR = 14, 20, 40, 20, 8
-- Bytes between the outer IP header and the inner packet, per delivery mode (M8, M30).
M.TUNNEL_HEADER = { ipip = 0, gre = 4, ["gre-key"] = 8, gue = 8, geneve = 8 + 8 + 8 }

local function member(list, x)
  for _, v in ipairs(list) do
    if v == x then return true end
  end
  return false
end

function M.is_ipv6(kind) return kind:sub(1, 4) == "ipv6" end
function M.is_udp(kind) return kind == "udp" or kind == "ipv6-udp" end
function M.is_syn(kind) return kind == "syn" or kind == "ipv6-syn" end

-- The smallest frame pktgen sends for a kind: 60, or 74 for IPv6 (pktgen pads IPv6 frames
-- to that size, so a 62-byte IPv6 UDP frame is not possible).
function M.min_size(kind)
  local hdr = ETH + (M.is_ipv6(kind) and IPV6 or IPV4) + (M.is_udp(kind) and UDP_HDR or TCP_HDR)
  return math.max(60, hdr, M.is_ipv6(kind) and M.PKTGEN_MIN_V6 or 0)
end

-- pktgen makes the IP packet cover the whole frame (no Ethernet padding: a 60-byte TCP frame
-- carries 6 bytes of data), so the inner IP packet is the frame less its Ethernet header.
function M.expected_egress(mode, kind, size)
  if mode == "l2dsr" then return size end
  local outer = M.is_ipv6(kind) and IPV6 or IPV4
  return ETH + outer + M.TUNNEL_HEADER[mode] + (size - ETH)
end

local function gcd(a, b)
  while b ~= 0 do a, b = b, a % b end
  return a
end

function M.flow_layout(flows)
  return flows, gcd(flows, M.PORT_CYCLE)
end

function M.ipv4(n)
  return string.format("%d.%d.%d.%d", (n >> 24) & 255, (n >> 16) & 255, (n >> 8) & 255, n & 255)
end

-- 2001:db8:c::1 + index (the low 32 bits).
function M.ipv6_client(index)
  local low = index + 1
  if low > 0xffff then
    return string.format("%s%x:%x", M.CLIENT6_PREFIX, low >> 16, low & 0xffff)
  end
  return string.format("%s%x", M.CLIENT6_PREFIX, low)
end

-- Flow i (0 <= i < p.flows) of a case: its client, an IPv4 address as an integer or an IPv6
-- address as text, and its source port. Range mode's settings, the pcap frames and the report
-- all come from here; the TRex profile lays its flows out the same way (checked by
-- perf/trex/check_profiles.py against what this script makes pktgen send).
function M.flow(p, i)
  local _, ports = M.flow_layout(p.flows)
  local port = M.CLIENT_PORT_FIRST + i % ports
  if M.is_ipv6(p.kind) then return M.ipv6_client(i), port end
  return M.CLIENT4_FIRST + i, port
end

-- What `-s <port>:FILE` costs pktgen 24.03 (pktgen_pcap_parse, once for every TX queue of the
-- port): a mempool of the file's `frames`, repeated up to the range pool's `mbufs` when fewer
-- (frames x floor(mbufs / frames)); each element is the largest frame (60..1514 bytes) + the
-- rte_mbuf header (128) + headroom (128), and pktgen prints frames x element as "= N KB".
-- DPDK's mempool puts a 64-byte object header before each element, rounds the object up to
-- whole cache lines and, on x86, to a number of lines coprime with the memory channels (EAL
-- -n, 4 when not given): those objects are the hugepages the pool takes.
function M.pcap_memory(frames, largest, mbufs, channels)
  local len = math.min(math.max(largest, 60), 1514)
  local count = frames
  if frames < mbufs then count = (mbufs // frames) * frames end
  local element = len + M.MBUF_HEADER + M.MBUF_HEADROOM
  local lines = (M.CACHE_LINE + (element + 7) // 8 * 8 + M.CACHE_LINE - 1) // M.CACHE_LINE
  while gcd(lines, channels or M.CHANNELS) ~= 1 do lines = lines + 1 end
  local object = lines * M.CACHE_LINE
  return {
    mbufs = count,
    element = element,
    printed_kb = (frames * element + 1023) // 1024,
    object = object,
    bytes = count * object,
  }
end

-- The memory line for SPW_WRITE_PCAP: what pktgen will print and take per TX queue.
function M.pcap_memory_text(p)
  local m = M.pcap_memory(p.flows, p.size, p.mbufs)
  return string.format("pktgen -s takes %d mbufs of %d bytes for each TX queue of the port " ..
    "(it prints = %d KB), %.1f MiB of hugepages per TX queue with DPDK's %d-byte mempool " ..
    "objects (-n %d); times the TX cores -m gives the port", m.mbufs, m.element, m.printed_kb,
    m.bytes / 1048576, m.object, M.CHANNELS)
end

-- Reads the parameters through `getenv` (os.getenv by default); returns a table or nil, error.
function M.params(getenv)
  getenv = getenv or os.getenv
  local function num(name, default)
    local v = getenv(name)
    if v == nil or v == "" then return default end
    local n = tonumber(v)
    if n == nil or n ~= math.floor(n) then return nil, name .. " must be an integer, not " .. v end
    return math.tointeger(n)
  end
  local p, err = {}, nil
  p.kind = getenv("SPW_KIND") or "ack"
  if not member(M.KINDS, p.kind) then
    return nil, "SPW_KIND must be one of " .. table.concat(M.KINDS, ", ") .. ", not " .. p.kind
  end
  p.mode = getenv("SPW_MODE") or "gue"
  if not member(M.MODES, p.mode) then
    return nil, "SPW_MODE must be one of " .. table.concat(M.MODES, ", ") .. ", not " .. p.mode
  end
  p.flows, err = num("SPW_FLOWS", 4096)
  if err then return nil, err end
  if p.flows < 1 or p.flows > M.MAX_FLOWS then
    return nil, "SPW_FLOWS must be 1.." .. M.MAX_FLOWS
  end
  p.mbufs, err = num("SPW_MBUFS", M.RANGE_MBUFS)
  if err then return nil, err end
  if p.mbufs < 1 then return nil, "SPW_MBUFS must be at least 1" end
  p.pcap = getenv("SPW_PCAP")
  if p.pcap == "" then p.pcap = nil end
  p.write_pcap = getenv("SPW_WRITE_PCAP")
  if p.write_pcap == "" then p.write_pcap = nil end
  if p.pcap == nil and p.write_pcap == nil and p.flows > p.mbufs then
    return nil, string.format("SPW_FLOWS=%d: range mode sends at most %d distinct flows " ..
      "(pktgen builds one packet per mbuf of a TX queue's range pool, once; SPW_MBUFS=%d); " ..
      "use pcap mode (SPW_WRITE_PCAP, then SPW_PCAP and pktgen -s %s:FILE), or give pktgen " ..
      "more descriptors (--rxd=R --txd=T make (R + T) x %d mbufs) and set SPW_MBUFS to the " ..
      "mbufs/port pktgen prints when started with -v", p.flows, p.mbufs, p.mbufs,
      getenv("SPW_TX_PORT") or "0", M.PKTGEN_MBUFS_PER_DESC)
  end
  local v6 = M.is_ipv6(p.kind)
  p.vip = getenv("SPW_VIP") or (v6 and "2001:db8::10" or "198.18.10.10")
  if (p.vip:find(":", 1, true) ~= nil) ~= v6 then
    return nil, "SPW_VIP " .. p.vip .. " does not match SPW_KIND " .. p.kind
  end
  p.port, err = num("SPW_PORT", M.is_udp(p.kind) and 53 or 80)
  if err then return nil, err end
  if p.port < 1 or p.port > 65535 then return nil, "SPW_PORT must be 1..65535" end
  p.size, err = num("SPW_SIZE", M.min_size(p.kind))
  if err then return nil, err end
  if p.size < M.min_size(p.kind) or p.size > 9600 then
    return nil, string.format("SPW_SIZE must be %d..9600 for %s", M.min_size(p.kind), p.kind)
  end
  p.tx = getenv("SPW_TX_PORT") or "0"
  p.rx = getenv("SPW_RX_PORT") or "1"
  p.rate, err = num("SPW_RATE", 100)
  if err then return nil, err end
  p.warmup, err = num("SPW_WARMUP", 2)
  if err then return nil, err end
  p.duration, err = num("SPW_DURATION", 30)
  if err then return nil, err end
  p.first_packet, err = num("SPW_FIRST_PACKET", 10)
  if err then return nil, err end
  if p.first_packet < 1 then return nil, "SPW_FIRST_PACKET must be at least 1 (seconds)" end
  p.cmdfile = getenv("SPW_CMDFILE") or "/tmp/spillway-pktgen.pkt"
  p.dst_mac = getenv("SPW_DST_MAC")
  if p.dst_mac == nil or not p.dst_mac:match("^%x%x:%x%x:%x%x:%x%x:%x%x:%x%x$") then
    return nil, "SPW_DST_MAC must be the MAC of Spillway's uplink port (aa:bb:cc:dd:ee:ff)"
  end
  return p
end

-- Sets start/inc/min/max of one range field.
local function range4(fn, port, start, inc, min, max)
  fn(port, "start", start)
  fn(port, "inc", inc)
  fn(port, "min", min)
  fn(port, "max", max)
end

-- The pktgen CLI lines for what Lua cannot set: TCP flags, and IPv6 range addresses. The
-- second result says whether the case needs them: pktgen's TCP packets are ACKs by default,
-- so IPv4 ACK runs do without; SYN and IPv6 runs do not.
function M.cli_commands(p)
  local t, cmds = p.tx, {}
  local function add(fmt, ...) cmds[#cmds + 1] = string.format(fmt, ...) end
  if M.is_ipv6(p.kind) then
    local addresses = M.flow_layout(p.flows)
    local first, last = M.flow(p, 0), M.flow(p, p.flows - 1)
    add("range %s type ipv6", t)
    add("range %s proto %s", t, M.is_udp(p.kind) and "udp" or "tcp")
    add("range %s dst ip start %s", t, p.vip)
    add("range %s dst ip min %s", t, p.vip)
    add("range %s dst ip max %s", t, p.vip)
    add("range %s dst ip inc ::", t)
    add("range %s src ip start %s", t, first)
    add("range %s src ip min %s", t, first)
    add("range %s src ip max %s", t, last)
    add("range %s src ip inc %s", t, addresses > 1 and "::1" or "::")
  end
  if not M.is_udp(p.kind) then
    if M.is_syn(p.kind) then
      add("range %s tcp flag clr ack", t)
      add("range %s tcp flag set syn", t)
    else
      add("range %s tcp flag clr syn", t)
      add("range %s tcp flag set ack", t)
    end
  end
  return cmds, M.is_ipv6(p.kind) or M.is_syn(p.kind)
end

-- Configures port p.tx through the Lua binding (pktgen.range.* since pktgen 3.x, the flat
-- pktgen.* range calls before) and returns the CLI lines still to apply (see cli_commands).
-- pktgen builds range packet k by stepping its template k + 1 times from pktgen's defaults
-- (M.PKTGEN_SPORT, a client outside the range): with the ranges below, packet k is flow k.
function M.configure(pg, p)
  local R = (type(pg.range) == "table") and pg.range or pg
  local t = p.tx
  local addresses, ports = M.flow_layout(p.flows)
  local proto = M.is_udp(p.kind) and "udp" or "tcp"
  local frame = p.size + M.FCS -- pktgen sizes count the FCS
  local first, first_port = M.flow(p, 0)
  local last = M.flow(p, p.flows - 1)
  local _, last_port = M.flow(p, ports - 1)

  pg.stop(t)
  -- The range template keeps stepping from run to run: back to pktgen's defaults.
  if type(pg.reset) == "function" then
    pg.reset(t)
  else
    print("spillway.lua: this pktgen's Lua has no pktgen.reset: range mode starts at flow 0 " ..
      "only on a freshly started pktgen")
  end
  pg.set_type(t, M.is_ipv6(p.kind) and "ipv6" or "ipv4")
  pg.set_proto(t, proto)
  pg.set(t, "size", frame)
  pg.set(t, "rate", p.rate)
  pg.set(t, "count", 0) -- forever

  R.dst_mac(t, "start", p.dst_mac)
  if R.ip_proto then R.ip_proto(t, proto) end
  if not M.is_ipv6(p.kind) then
    range4(R.dst_ip, t, p.vip, "0.0.0.0", p.vip, p.vip)
    range4(R.src_ip, t, M.ipv4(first), addresses > 1 and "0.0.0.1" or "0.0.0.0",
      M.ipv4(first), M.ipv4(last))
  end
  range4(R.dst_port, t, p.port, 0, p.port, p.port)
  range4(R.src_port, t, first_port, ports > 1 and 1 or 0, first_port, last_port)
  range4(R.pkt_size, t, frame, 0, frame, frame)
  if R.ttl then range4(R.ttl, t, 64, 0, 64, 64) end

  if type(pg.set_range) == "function" then
    pg.set_range(t, "on")
  elseif type(pg.range) == "function" then
    pg.range(t, "on")
  end
  return M.cli_commands(p)
end

-- Writes the CLI lines to p.cmdfile and tries to run them; true when pktgen took them.
function M.apply_cli(pg, p, cmds)
  if #cmds == 0 then return true end
  local f, err = io.open(p.cmdfile, "w")
  if not f then
    print("spillway.lua: cannot write " .. p.cmdfile .. ": " .. tostring(err))
    return false
  end
  f:write("# pktgen CLI commands written by perf/pktgen/spillway.lua\n")
  for _, c in ipairs(cmds) do f:write(c, "\n") end
  f:close()
  if type(pg.run) == "function" then
    -- pktgen.run("cmd", file) runs a command file; some versions check for a third argument.
    if pcall(pg.run, "cmd", p.cmdfile) or pcall(pg.run, "cmd", p.cmdfile, "") then
      print("spillway.lua: applied " .. #cmds .. " CLI commands from " .. p.cmdfile)
      return true
    end
  end
  return false
end

local function counters(pg, port)
  local ok, t = pcall(pg.portStats, port, "port")
  if not ok or type(t) ~= "table" then ok, t = pcall(pg.portStats, port) end
  if not ok or type(t) ~= "table" then return nil end
  local e = t[tonumber(port)] or t[port]
  if type(e) ~= "table" then return nil end
  return e.curr or e -- pktgen 24.x nests the counters in `curr`
end

-- pktgen's version from pktgen.info.Pktgen_Version ("Pktgen 24.03.1"): {major, minor, patch}
-- and the string, or nil.
function M.version(pg)
  local info = type(pg.info) == "table" and pg.info or nil
  local s = info and info.Pktgen_Version
  if type(s) ~= "string" then return nil end
  local a, b, c = s:match("(%d+)%.(%d+)%.(%d+)")
  if not a then return nil end
  return { tonumber(a), tonumber(b), tonumber(c) }, s
end

-- Refuses a pktgen older than M.MIN_VERSION, or one that does not say its version: before
-- 24.03.1 the counters this script reads stay at 0 while traffic flows.
function M.check_version(pg)
  local v, s = M.version(pg)
  local need = M.MIN_VERSION_TEXT
  if not v then
    return nil, "cannot read pktgen's version (pktgen.info.Pktgen_Version); this script " ..
      "needs pktgen " .. need .. " or later"
  end
  for i = 1, 3 do
    if v[i] > M.MIN_VERSION[i] then return v end
    if v[i] < M.MIN_VERSION[i] then
      return nil, s .. " is too old: its Lua pktgen.portStats read 0 while traffic flows " ..
        "(fixed in " .. need .. "); use pktgen " .. need .. " or later"
    end
  end
  return v
end

-- The loss report, or nil and why there is none: a counter that read 0 over a run that
-- lasted means no traffic or a pktgen whose Lua counters are not updated, not "0 lost".
function M.report(p, sent, got, bytes)
  if sent <= 0 or got <= 0 then
    return nil, string.format("pktgen's counters read %d sent and %d received over %d s: " ..
      "no loss figure (nothing sent or nothing came back, or this pktgen does not update " ..
      "the counters Lua reads; compare its main page and Spillway's counters)",
      sent, got, p.duration)
  end
  local want = M.expected_egress(p.mode, p.kind, p.size)
  return {
    string.format("sent %d packets (%.3f Mpps), received %d (%.3f Mpps) in %d s; lost %d (%.4f%%)",
      sent, sent / p.duration / 1e6, got, got / p.duration / 1e6, p.duration, sent - got,
      100 * (sent - got) / sent),
    string.format("received frames average %.1f bytes; expected %d (%s), or %d if the NIC counts the FCS",
      bytes / got, want, p.mode, want + M.FCS),
    M.new_flows_text(p, sent),
  }
end

-- A packet rate as the report prints it.
local function rate_text(pps)
  if pps >= 10000 then return string.format("%.3f Mpps", pps / 1e6) end
  return string.format("%d pps", math.ceil(pps))
end

-- What `spillway stats` can show as `new` flows after this run on a freshly started Spillway.
-- Spillway keeps the entry a flow's first packet makes (a SYN's, half-open, alike) for
-- p.first_packet seconds unless the flow's next packet comes; pktgen sends the flows in turn,
-- so each comes back every flows / rate seconds. Within the lifetime, each flow makes one entry
-- and keeps it: `new` = flows. Past it, the entry has aged out before the flow's next packet,
-- which makes a new one: `new` counts packets, not flows (at least `flows`, at most every
-- packet sent; the new-flow budget, flow_table_capacity / first_packet per second, is above
-- that rate while the table holds every flow), and only a bound can be given.
function M.new_flows_text(p, sent)
  local rate = sent / p.duration
  local every = p.flows / rate
  local need = p.flows / p.first_packet
  if every <= p.first_packet and sent >= p.flows then
    return string.format("Spillway's `spillway stats` must show %d new flows for a fresh start: " ..
      "each flow came back every %s, within its %d-s first-packet entry", p.flows,
      every < 1 and string.format("%.1f ms", every * 1000) or string.format("%.1f s", every),
      p.first_packet)
  elseif every <= p.first_packet then
    return string.format("Spillway's `spillway stats` shows %d new flows for a fresh start only " ..
      "if the warm-up sent the flows the measured %d packets did not: `new` is at most %d",
      p.flows, sent, p.flows)
  end
  return string.format("Spillway's `spillway stats` cannot show %d new flows: at %s each " ..
    "flow comes back every %.1f s, after its %d-s first-packet entry has aged out, so each of " ..
    "its packets makes a new entry: expect `new` of at least %d (if every flow was sent) and up " ..
    "to the packets sent (%d in the measured %d s, plus the warm-up), and `expired by ageing` " ..
    "growing; send at least %s (%d flows / %d s) to see exactly %d",
    p.flows, rate_text(rate), every, p.first_packet, p.flows, sent, p.duration, rate_text(need),
    p.flows, p.first_packet, p.flows)
end

-- pcap mode ------------------------------------------------------------------------------

local function mac_bytes(mac)
  local out = {}
  for h in mac:gmatch("%x%x") do out[#out + 1] = string.char(tonumber(h, 16)) end
  return table.concat(out)
end

local function csum_add(acc, data)
  for i = 1, #data - 1, 2 do
    acc = acc + (data:byte(i) << 8) + data:byte(i + 1)
  end
  if #data % 2 == 1 then acc = acc + (data:byte(#data) << 8) end
  return acc
end

local function csum_fold(acc)
  while acc > 0xffff do acc = (acc & 0xffff) + (acc >> 16) end
  return (~acc) & 0xffff
end

local function ipv6_bytes(addr)
  -- Only the forms this script writes: "a:b:c::x[:y]" and "a:b::x".
  local head, tail = addr:match("^(.-)::(.*)$")
  local h, t = {}, {}
  if head then
    for g in head:gmatch("[^:]+") do h[#h + 1] = tonumber(g, 16) end
    for g in tail:gmatch("[^:]+") do t[#t + 1] = tonumber(g, 16) end
  else
    for g in addr:gmatch("[^:]+") do h[#h + 1] = tonumber(g, 16) end
  end
  local groups = {}
  for _, g in ipairs(h) do groups[#groups + 1] = g end
  for _ = 1, 8 - #h - #t do groups[#groups + 1] = 0 end
  for _, g in ipairs(t) do groups[#groups + 1] = g end
  local out = {}
  for _, g in ipairs(groups) do out[#out + 1] = string.pack(">I2", g) end
  return table.concat(out)
end

local SRC_MAC = "02:00:00:00:00:fe"

-- Flow i's frame as pktgen's range mode builds it: the IP packet fills the frame (no Ethernet
-- padding, TCP and UDP carry zero bytes of data), TTL/hop limit 64, checksums set.
function M.frame(p, i)
  local v6, udp = M.is_ipv6(p.kind), M.is_udp(p.kind)
  local client, sport = M.flow(p, i)
  local l4_len = p.size - ETH - (v6 and IPV6 or IPV4)
  local proto = udp and 17 or 6
  local src, dst, ip
  if v6 then
    src, dst = ipv6_bytes(client), ipv6_bytes(p.vip)
  else
    src = string.pack(">I4", client)
    local a, b, c, d = p.vip:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
    dst = string.char(tonumber(a), tonumber(b), tonumber(c), tonumber(d))
  end
  local l4
  if udp then
    l4 = string.pack(">I2I2I2I2", sport, p.port, l4_len, 0) .. string.rep("\0", l4_len - UDP_HDR)
  else
    local syn = M.is_syn(p.kind)
    l4 = string.pack(">I2I2I4I4BBI2I2I2", sport, p.port, 1000, syn and 0 or 2000, 5 << 4,
      syn and 0x02 or 0x10, 65535, 0, 0) .. string.rep("\0", l4_len - TCP_HDR)
  end
  local pseudo = src .. dst .. (v6 and string.pack(">I4I3B", l4_len, 0, proto)
    or string.pack(">BBI2", 0, proto, l4_len))
  local c = csum_fold(csum_add(csum_add(0, pseudo), l4))
  if udp and c == 0 then c = 0xffff end
  local at = udp and 6 or 16
  l4 = l4:sub(1, at) .. string.pack(">I2", c) .. l4:sub(at + 3)
  if v6 then
    ip = string.pack(">I4I2BB", 6 << 28, l4_len, proto, 64) .. src .. dst
  else
    local hdr = string.pack(">BBI2I2I2BBI2", 0x45, 0, IPV4 + l4_len, 0, 0, 64, proto, 0) .. src .. dst
    ip = hdr:sub(1, 10) .. string.pack(">I2", csum_fold(csum_add(0, hdr))) .. hdr:sub(13)
  end
  return mac_bytes(p.dst_mac) .. mac_bytes(SRC_MAC) .. string.pack(">I2", v6 and 0x86dd or 0x0800)
    .. ip .. l4
end

-- Writes the case's `flows` frames, flow 0 first, to `path` (classic pcap, Ethernet).
function M.write_pcap(p, path)
  local f, err = io.open(path, "wb")
  if not f then return nil, "cannot write " .. path .. ": " .. tostring(err) end
  f:write(string.pack("<I4I2I2i4I4I4I4", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
  local buf = {}
  for i = 0, p.flows - 1 do
    local fr = M.frame(p, i)
    buf[#buf + 1] = string.pack("<I4I4I4I4", 0, 0, #fr, #fr) .. fr
    if #buf == 4096 then f:write(table.concat(buf)); buf = {} end
  end
  f:write(table.concat(buf))
  f:close()
  return p.flows
end

-- Checks that `path` holds exactly this case's frames (every flow once, in order, of the
-- case's size and to SPW_DST_MAC): true, or nil and what differs.
function M.check_pcap(p, path)
  local f, err = io.open(path, "rb")
  if not f then return nil, "cannot read " .. path .. ": " .. tostring(err) end
  local hdr = f:read(24)
  if not hdr or #hdr < 24 or string.unpack("<I4", hdr) ~= 0xa1b2c3d4 then
    f:close()
    return nil, path .. " is not a little-endian microsecond pcap (write it with SPW_WRITE_PCAP)"
  end
  local n = 0
  while true do
    local rec = f:read(16)
    if rec == nil then break end
    local _, _, caplen = string.unpack("<I4I4I4", rec)
    local fr = f:read(caplen)
    if fr == nil or #fr < caplen or rec:len() < 16 then f:close(); return nil, path .. ": truncated" end
    if n >= p.flows then f:close(); return nil, path .. ": more than " .. p.flows .. " frames" end
    if fr ~= M.frame(p, n) then
      f:close()
      return nil, string.format("%s: frame %d is not flow %d of this case (SPW_KIND, " ..
        "SPW_FLOWS, SPW_SIZE, SPW_VIP, SPW_PORT and SPW_DST_MAC must be those it was written with)",
        path, n + 1, n)
    end
    n = n + 1
  end
  f:close()
  if n ~= p.flows then return nil, string.format("%s: %d frames for %d flows", path, n, p.flows) end
  return true
end

-- The pcap pktgen loaded for port p.tx (`-s <port>:FILE`): pktgen.save writes the running
-- configuration with a "# PCAP port N" block (the file's name as given to -s and the frames
-- pktgen read from it). Without -s, `pcap on` changes nothing and pktgen sends its default
-- packet, so pcap mode needs this block, for SPW_PCAP and all of its frames: true, or nil and
-- why not; "manual" when this pktgen cannot tell.
function M.loaded_pcap(pg, p)
  if type(pg.save) ~= "function" then
    return nil, "this pktgen's Lua has no pktgen.save, so the script cannot tell which pcap " ..
      "pktgen loaded: check `page pcap` shows " .. p.pcap .. " with " .. p.flows .. " packets, then " ..
      "type `enable " .. p.tx .. " pcap` and `start " .. p.tx .. "`. Traffic not started.", "manual"
  end
  local path = os.tmpname()
  local ok, serr = pcall(pg.save, path)
  local f = ok and io.open(path, "r")
  if not f then
    os.remove(path)
    return nil, "pktgen.save(" .. path .. ") failed (" .. tostring(serr) .. "): cannot tell " ..
      "which pcap pktgen loaded. Traffic not started.", "manual"
  end
  local block, file, count = false, nil, nil
  for line in f:lines() do
    local port = line:match("^# PCAP port (%d+)")
    if port then
      block = port == tostring(p.tx)
    elseif block then
      count = count or tonumber(line:match("^#%s+Packet count:%s*(%d+)"))
      file = file or line:match("^#%s+Filename%s*:%s*(.-)%s*$")
    end
  end
  f:close()
  os.remove(path)
  local s_opt = "-s " .. p.tx .. ":" .. p.pcap
  if not file then
    return nil, "pktgen has no pcap for port " .. p.tx .. ": start it with " .. s_opt ..
      " (without -s, pcap mode sends pktgen's default packet)"
  end
  if file ~= p.pcap then
    return nil, "pktgen loaded " .. file .. " for port " .. p.tx .. ", not SPW_PCAP=" .. p.pcap ..
      ": start it with " .. s_opt
  end
  if count ~= p.flows then
    return nil, string.format("pktgen read %s frames from %s, not the case's %d flows",
      tostring(count), file, p.flows)
  end
  return true
end

function M.describe(p)
  local addresses, ports = M.flow_layout(p.flows)
  return string.format(
    "spillway.lua: %s to %s port %d, %d-byte frames (%d with FCS), %d flows (%d client " ..
    "addresses, %d source ports) from port %s in %s mode; DUT egress with %s: %d-byte " ..
    "frames to port %s",
    p.kind, p.vip, p.port, p.size, p.size + M.FCS, p.flows, addresses, ports, p.tx,
    p.pcap and "pcap" or "range", p.mode, M.expected_egress(p.mode, p.kind, p.size), p.rx)
end

-- Runs one case: check pktgen's version, configure (range mode, or pcap mode with SPW_PCAP),
-- start, warm up, measure, stop, report.
function M.main(pg, getenv, sleep_ms)
  local p, err = M.params(getenv)
  if not p then
    print("spillway.lua: " .. err)
    return nil, err
  end
  local _, verr = M.check_version(pg)
  if verr then
    print("spillway.lua: " .. verr)
    return nil, verr
  end
  if p.write_pcap then
    -- In pktgen a pcap is sent, not written: writing one here would also lift range mode's limit.
    local werr = "SPW_WRITE_PCAP is for running this script outside pktgen (lua5.4 " ..
      "perf/pktgen/spillway.lua); in pktgen, give the file with SPW_PCAP"
    print("spillway.lua: " .. werr)
    return nil, werr
  end
  sleep_ms = sleep_ms or pg.delay
  print(M.describe(p))
  if p.pcap then
    local ok, perr, manual = M.loaded_pcap(pg, p)
    if ok then ok, perr = M.check_pcap(p, p.pcap) end
    if not ok then
      print("spillway.lua: " .. perr)
      if manual then return p, "manual" end
      return nil, perr
    end
    if type(pg.pcap) ~= "function" then
      print("spillway.lua: this pktgen's Lua has no pktgen.pcap; type `enable " .. p.tx ..
        " pcap`, then `start " .. p.tx .. "`. Traffic not started.")
      return p, "manual"
    end
    pg.stop(p.tx)
    pg.set(p.tx, "rate", p.rate)
    pg.set(p.tx, "count", 0) -- forever
    pg.pcap(p.tx, "on")
    print("spillway.lua: pcap mode: " .. p.flows .. " frames of " .. p.pcap .. " from port " .. p.tx)
  else
    local cmds, required = M.configure(pg, p)
    if not M.apply_cli(pg, p, cmds) then
      if required then
        print("spillway.lua: this pktgen's Lua cannot set TCP flags or IPv6 ranges; type\n" ..
          "    load " .. p.cmdfile .. "\nthen `start " .. p.tx .. "`. Traffic not started.")
        return p, "manual"
      end
      print("spillway.lua: could not run " .. p.cmdfile .. "; sending pktgen's default TCP ACKs")
    end
  end
  if p.duration < 0 then return p, "configured" end
  pg.clr()
  pg.start(p.tx)
  if p.duration == 0 then return p, "running" end
  sleep_ms(p.warmup * 1000)
  local tx0, rx0 = counters(pg, p.tx), counters(pg, p.rx)
  sleep_ms(p.duration * 1000)
  local tx1, rx1 = counters(pg, p.tx), counters(pg, p.rx)
  pg.stop(p.tx)
  if not (tx0 and rx0 and tx1 and rx1) then
    print("spillway.lua: pktgen.portStats gave no counters; read them on the main page")
    return p, "stopped"
  end
  local report, rerr = M.report(p, tx1.opackets - tx0.opackets, rx1.ipackets - rx0.ipackets,
    rx1.ibytes - rx0.ibytes)
  if not report then
    print("spillway.lua: error: " .. rerr)
    return p, "no counters", nil, rerr
  end
  for _, line in ipairs(report) do print("spillway.lua: " .. line) end
  return p, "measured", report
end

-- Outside pktgen with SPW_WRITE_PCAP set (`lua5.4 perf/pktgen/spillway.lua`): write the case's
-- pcap for pcap mode. In pktgen: run the case. Loaded from a check: only return the module.
if type(pktgen) == "table" and not SPILLWAY_PKTGEN_NO_MAIN then
  M.main(pktgen)
elseif pktgen == nil and not SPILLWAY_PKTGEN_NO_MAIN and os.getenv("SPW_WRITE_PCAP") then
  local p, err = M.params(os.getenv)
  local n
  if p then n, err = M.write_pcap(p, p.write_pcap) end
  if not n then
    io.stderr:write("spillway.lua: " .. err .. "\n")
    os.exit(1)
  end
  io.stderr:write(string.format("spillway.lua: %d frames of %d bytes (%s, %d flows) -> %s; %s\n",
    n, p.size, p.kind, p.flows, p.write_pcap, M.pcap_memory_text(p)))
end
return M
