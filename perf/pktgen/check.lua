-- Runs perf/pktgen/spillway.lua against a fake `pktgen` table, without pktgen-dpdk (CI runs
-- this through perf/pktgen/check.sh, after `luac -p`). The fake records every call and models
-- what pktgen 24.03 does with them, with its own numbers (the PG table below, from pktgen's
-- sources), not the script's:
--
--   - range mode builds one packet per mbuf of the TX queue's range pool, (rxd + txd) x 8
--     mbufs, at `start`, stepping its range template before each packet (pktgen_range_ctor:
--     value + inc; IPv4 addresses and ports past max go to min and below min to max, IPv6
--     addresses either way to min; inc 0 takes `start`); the template starts at pktgen's
--     defaults (source port 1234, client 192.168.<port>.1, IPv6 ::), keeps its state from run
--     to run and goes back to the defaults on pktgen.reset;
--   - IPv6 frames are enlarged to 74 bytes (78 with the FCS);
--   - `-s P:FILE` loads the file at start-up (pktgen.save then names it with its frame count);
--     `pcap on` without one changes nothing, and pktgen sends its default packet;
--   - start-up prints the mbufs per pool only with -v, and a pool per TX queue for -s;
--   - counters: a version string, packets at a set rate, received bytes from the frames sent,
--     or counters that stay 0 (pktgen before 24.03.1).
--
-- For each case (kind x flow count, both the pktgen.range.* API and the older flat one) this
-- checks the range settings, that the packets pktgen would build are the layout's flows in
-- order from flow 0 (or that range mode refused), the frame size, the CLI lines, the
-- run/measure/report sequence, the expected egress per delivery mode against a table worked out
-- by hand; then the template reset, the version and zero-counter refusals, pcap mode (the pcap
-- pktgen loaded, the writer), the -v start-up line the docs' command lines need, the pcap memory
-- pktgen prints, the new-flow line against a model of Spillway's first-packet ageing, and that
-- bad parameters are refused.
--
--   lua5.4 perf/pktgen/check.lua
--   lua5.4 perf/pktgen/check.lua --dump-flows KIND FLOWS   # for perf/trex/check_profiles.py

local here = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
SPILLWAY_PKTGEN_NO_MAIN = true
local M = dofile(here .. "/spillway.lua")

-- spillway.lua reports as it goes; keep the check's own output to its result.
local real_print = print
local printed = {}
print = function(...)
  local parts = {}
  for i = 1, select("#", ...) do parts[#parts + 1] = tostring(select(i, ...)) end
  printed[#printed + 1] = table.concat(parts, " ")
end

local checks, failures = 0, {}
local function check(cond, what)
  checks = checks + 1
  if not cond then failures[#failures + 1] = what end
end

local function gcd(a, b)
  while b ~= 0 do a, b = b, a % b end
  return a
end

-- pktgen 24.03 as the fake models it (pktgen-constants.h, pktgen-port-cfg.c, pktgen-range.c,
-- pktgen-pcap.c).
local PG = {
  sport = 1234, -- DEFAULT_SRC_PORT: the range template's source port at start-up and reset
  rxd = 1024, txd = 2048, mbufs_per_desc = 8, -- MAX_MBUFS_PER_PORT(rxd, txd)
  mbuf = 128, headroom = 128, -- sizeof(struct rte_mbuf), RTE_PKTMBUF_HEADROOM
  default_size = 60, min_v6 = 74, max_frame = 1514,
}
-- The range template's client at start-up: DEFAULT_IP_ADDR 192.168.0.0 | port << 8 | 1.
function PG.ip4(port) return (192 << 24) | (168 << 16) | (tonumber(port) << 8) | 1 end
PG.mbufs = (PG.rxd + PG.txd) * PG.mbufs_per_desc

-- Hand-worked bytes a delivery mode adds to a frame (IPv4 outer / IPv6 outer): outer IP
-- (20 / 40) + tunnel header (ipip 0, gre 4, gre-key 8, gue 8, geneve 8 + 8 + 8); l2dsr none.
local OVERHEAD = {
  l2dsr = { 0, 0 }, ipip = { 20, 40 }, gre = { 24, 44 }, ["gre-key"] = { 28, 48 },
  gue = { 28, 48 }, geneve = { 44, 64 },
}

local function ip4(s)
  local a, b, c, d = s:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  assert(a, "not an IPv4 address: " .. tostring(s))
  return ((tonumber(a) * 256 + tonumber(b)) * 256 + tonumber(c)) * 256 + tonumber(d)
end

local function ip4_text(n)
  return string.format("%d.%d.%d.%d", (n >> 24) & 255, (n >> 16) & 255, (n >> 8) & 255, n & 255)
end

-- IPv6 addresses as 16-byte strings; pktgen's 128-bit add and memcmp order work on their two
-- 64-bit halves (unsigned).
local function ip6(s)
  local groups = {}
  local function split(x, out)
    for g in x:gmatch("[^:]+") do out[#out + 1] = tonumber(g, 16) end
  end
  local head, tail = s:match("^(.-)::(.*)$")
  if head then
    local h, t = {}, {}
    split(head, h)
    split(tail, t)
    for _, g in ipairs(h) do groups[#groups + 1] = g end
    for _ = 1, 8 - #h - #t do groups[#groups + 1] = 0 end
    for _, g in ipairs(t) do groups[#groups + 1] = g end
  else
    split(s, groups)
  end
  assert(#groups == 8, "not an IPv6 address: " .. s)
  local out = {}
  for _, g in ipairs(groups) do out[#out + 1] = string.pack(">I2", g) end
  return table.concat(out)
end

local function halves(a) return string.unpack(">i8i8", a) end
local function from_halves(h, l) return string.pack(">i8i8", h, l) end

local function add128(ah, al, bh, bl)
  local l = al + bl
  return ah + bh + (math.ult(l, al) and 1 or 0), l
end

-- -1, 0 or 1 as memcmp orders the two addresses.
local function cmp128(ah, al, bh, bl)
  if ah ~= bh then return math.ult(ah, bh) and -1 or 1 end
  if al ~= bl then return math.ult(al, bl) and -1 or 1 end
  return 0
end

local function ip6_add(a, b)
  local ah, al = halves(a)
  local bh, bl = halves(b)
  return from_halves(add128(ah, al, bh, bl))
end

local function ip6_text(a)
  local g = {}
  for i = 1, 16, 2 do g[#g + 1] = string.format("%x", (string.unpack(">I2", a, i))) end
  return table.concat(g, ":")
end

-- One step of pktgen_range_ctor for a port or an IPv4 address (`wrap`: the field's width).
local function step4(cur, f, wrap)
  if f.inc == 0 then return f.start end
  local v = (cur + f.inc) & wrap
  if v < f.min then v = f.max elseif v > f.max then v = f.min end
  return v
end

-- One step of pktgen_range_ctor for an IPv6 address (halves h, l; the field's as halves too):
-- outside min..max goes to min.
local function step6(h, l, f)
  if f.inc[1] == 0 and f.inc[2] == 0 then return f.start[1], f.start[2] end
  h, l = add128(h, l, f.inc[1], f.inc[2])
  if cmp128(h, l, f.min[1], f.min[2]) < 0 or cmp128(h, l, f.max[1], f.max[2]) > 0 then
    return f.min[1], f.min[2]
  end
  return h, l
end

-- A pcap's frames as pktgen's -s reads them: each frame's client and source port (IPv4 or
-- IPv6 TCP/UDP), its length, and the count.
local last_pcap = {} -- the last file read, by its bytes: the checks read each file several times
local function read_pcap(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local data = f:read("a")
  f:close()
  if last_pcap.data == data then return last_pcap.result end
  local frames, pos, largest = {}, 25, 0
  while pos + 15 <= #data do
    local _, _, caplen = string.unpack("<I4I4I4", data, pos)
    local fr = data:sub(pos + 16, pos + 15 + caplen)
    pos = pos + 16 + caplen
    local v6 = fr:byte(13) == 0x86 and fr:byte(14) == 0xdd
    local addr = v6 and fr:sub(23, 38) or string.unpack(">I4", fr, 27)
    local sport = string.unpack(">I2", fr, v6 and 55 or 35)
    frames[#frames + 1] = { addr = addr, sport = sport, size = #fr, v6 = v6 }
    if #fr > largest then largest = #fr end
  end
  last_pcap = { data = data, result = { frames = frames, count = #frames, largest = largest } }
  return last_pcap.result
end

-- A fake pktgen that models what the real one sends. opts.flat: the pre-3.x flat range API;
-- opts.run: nil (no pktgen.run), "ok" or "error"; opts.loss: packets lost per ms;
-- opts.version: pktgen.info.Pktgen_Version (default "Pktgen 24.03.1", false: no info);
-- opts.zero: the Lua counters stay 0; opts.mbufs: mbufs of the TX queue's range pool (default
-- pktgen's); opts.mode: the DUT's delivery mode for the received bytes; opts.pps: packets sent
-- per second (default 1000000); opts.pcap: { [port] = FILE } as given with -s; opts.state: the
-- range templates of an earlier fake (the same pktgen, run again); opts.no_reset, opts.no_save:
-- a binding without pktgen.reset or pktgen.save.
local function fake(opts)
  local calls, pg = {}, {}
  local state = opts.state or { templates = {} }
  local function rec(name)
    return function(...) calls[#calls + 1] = { name = name, args = { ... } } end
  end
  for _, n in ipairs({ "stop", "set_type", "set_proto", "set", "clr", "set_mac", "pcap" }) do
    pg[n] = rec(n)
  end
  if opts.version ~= false then
    pg.info = { Pktgen_Version = opts.version or "Pktgen 24.03.1", Lua_Version = _VERSION }
  end
  local slept = 0
  pg.delay = function(ms) slept = slept + ms end
  local range = {}
  for _, n in ipairs({ "dst_mac", "src_mac", "dst_ip", "src_ip", "dst_port", "src_port",
    "ip_proto", "pkt_size", "ttl" }) do
    range[n] = rec("range." .. n)
  end
  if opts.flat then
    for k, v in pairs(range) do pg[k] = v end
    pg.range = rec("range_on")
  else
    pg.range = range
    pg.set_range = rec("range_on")
  end
  local ran = {}
  if opts.run then
    pg.run = function(kind, file)
      if opts.run == "error" then error("run( ['cmd'|'lua'], <string_or_path>), arguments wrong.") end
      calls[#calls + 1] = { name = "run", args = { kind, file } }
      for line in io.lines(file) do
        if line:sub(1, 1) ~= "#" then ran[#ran + 1] = line end
      end
    end
  end
  -- pktgen_reset: the port's packets, hence its range template, back to the defaults.
  if not opts.no_reset then
    pg.reset = function(port)
      calls[#calls + 1] = { name = "reset", args = { port } }
      state.templates[tostring(port)] = nil
    end
  end
  -- -s P:FILE: read at start-up; pktgen_save lists it per port.
  local loaded = {}
  for port, path in pairs(opts.pcap or {}) do
    local p = read_pcap(path)
    if p then p.file = path end
    loaded[tostring(port)] = p
  end
  if not opts.no_save then
    pg.save = function(path)
      calls[#calls + 1] = { name = "save", args = { path } }
      local f = assert(io.open(path, "w"))
      f:write("#\n# Pktgen - Ver: 24.03.1 (DPDK 23.11.0)\n# Copyright (c) <2010-2024>, Intel Corporation\n")
      for port = 0, 1 do
        f:write(string.format("#\n# Port: %d, Burst (Rx/Tx):  64/ 32, Rate:100%%\n", port))
        f:write(string.format("set %d count 0\nset %d size 64\n", port, port))
        local p = loaded[tostring(port)]
        if p then
          f:write(string.format("#\n# PCAP port %d\n", port))
          f:write(string.format("#    Packet count: %d\n", p.count))
          f:write(string.format("#    Filename    : %s\n", p.file))
        end
        f:write("\n")
      end
      f:write("################################ Done #################################\n")
      f:close()
    end
  end
  local function last(name, key)
    local v
    for _, c in ipairs(calls) do
      if c.name == name and (key == nil or c.args[2] == key) then v = c.args[key and 3 or 2] end
    end
    return v
  end
  local function field(name)
    local f = {}
    for _, c in ipairs(calls) do
      if c.name == name then f[c.args[2]] = c.args[3] end
    end
    return f
  end
  local wire = { built = {} }
  local function is_v6()
    local v6 = last("set_type") == "ipv6"
    for _, line in ipairs(ran) do if line:match("type ipv6$") then v6 = true end end
    return v6
  end
  -- The range pool's packets, built at start as pktgen_setup_packets does.
  local function build_range(port)
    local v6 = is_v6()
    local t = state.templates[port]
    if t == nil then
      t = { sport = PG.sport, ip4 = PG.ip4(port), ip6h = 0, ip6l = 0 }
      state.templates[port] = t
    end
    local sp = field("range.src_port")
    local ip
    if v6 then
      ip = { start = { 0, 0 }, inc = { 0, 0 }, min = { 0, 0 }, max = { 0, 0 } }
      for _, line in ipairs(ran) do
        local what, val = line:match("^range %d+ src ip (%a+) (%S+)$")
        if what then ip[what] = { halves(ip6(val)) } end
      end
    else
      local si = field("range.src_ip")
      ip = { start = ip4(si.start), inc = ip4(si.inc), min = ip4(si.min), max = ip4(si.max) }
    end
    local built = {}
    for k = 1, opts.mbufs or PG.mbufs do
      -- IPv4 ports are stepped in 32 bits, IPv6 ones in 16 (pktgen_range_ctor).
      t.sport = step4(t.sport, sp, v6 and 0xffff or 0xffffffff)
      if v6 then
        t.ip6h, t.ip6l = step6(t.ip6h, t.ip6l, ip)
        built[k] = { addr = from_halves(t.ip6h, t.ip6l), sport = t.sport }
      else
        t.ip4 = step4(t.ip4, ip, 0xffffffff)
        built[k] = { addr = t.ip4, sport = t.sport }
      end
    end
    local size = last("range.pkt_size", "start") - 4
    if v6 and size < PG.min_v6 then size = PG.min_v6 end
    return built, size, v6
  end
  local function pcap_on(port)
    for i = #calls, 1, -1 do
      local c = calls[i]
      if c.name == "pcap" and tostring(c.args[1]) == port then return c.args[2] == "on" end
    end
    return false
  end
  pg.start = function(port)
    calls[#calls + 1] = { name = "start", args = { port } }
    port = tostring(port)
    local p = loaded[port]
    if pcap_on(port) and p then
      -- enable_pcap only switches to pcap mode when the port has a pcap.
      wire.mode, wire.built, wire.size, wire.v6 = "pcap", p.frames, p.largest, p.frames[1].v6
    elseif last("range_on") then
      wire.mode = "range"
      wire.built, wire.size, wire.v6 = build_range(port)
    else
      -- pktgen's default packet: TCP from 192.168.<port>.1:1234.
      wire.mode, wire.size, wire.v6 = "single", PG.default_size, false
      wire.built = { { addr = PG.ip4(port), sport = PG.sport } }
    end
  end
  function wire.frame_size() return wire.size, wire.v6 end
  function wire.flows()
    local seen, n = {}, 0
    for _, b in ipairs(wire.built) do
      local key = type(b.addr) == "number" and (b.addr << 16 | b.sport) or b.addr .. b.sport
      if not seen[key] then seen[key] = true; n = n + 1 end
    end
    return n
  end
  -- Counters follow the simulated clock: opts.pps packets per second sent on port 0, `loss`
  -- of them per ms missing on port 1, every received frame the egress of the frame sent.
  pg.portStats = function(port, _)
    local sent = opts.zero and 0 or (opts.pps or 1000000) * slept // 1000
    local got = opts.zero and 0 or sent - (opts.loss or 0) * slept
    local entry
    if tonumber(port) == 0 then
      entry = { opackets = sent, obytes = sent * 60, ipackets = 0, ibytes = 0 }
    else
      local size, v6 = wire.frame_size()
      local egress = (size or 0) + OVERHEAD[opts.mode or "gue"][v6 and 2 or 1]
      entry = { opackets = 0, obytes = 0, ipackets = got, ibytes = got * egress }
    end
    local t = { n = 1 }
    t[tonumber(port)] = opts.nested and { curr = entry } or entry
    return t
  end
  return pg, calls, ran, wire, state
end

-- What pktgen 24.03 prints at start-up for its application arguments (after --): the mbufs of
-- each pool only with -v, and for -s P:FILE one pcap pool per TX queue of the port
-- (pktgen_pcap_parse: the file's frames, repeated up to the range pool when fewer, each of the
-- largest frame + the mbuf header + headroom, printed as the file's frames x that size).
local function startup(args, tx_queues)
  local verbose, rxd, txd, pcaps, lines = false, PG.rxd, PG.txd, {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "-v" then
      verbose = true
    elseif a:match("^%-%-rxd=") then
      rxd = tonumber(a:match("=(%d+)$"))
    elseif a:match("^%-%-txd=") then
      txd = tonumber(a:match("=(%d+)$"))
    elseif a == "--rxd" or a == "--txd" or a == "-s" or a == "-m" or a == "-f" or a == "-l" then
      i = i + 1
      if a == "--rxd" then rxd = tonumber(args[i]) end
      if a == "--txd" then txd = tonumber(args[i]) end
      if a == "-s" then
        local port, file = args[i]:match("^(%d+):(.+)$")
        pcaps[#pcaps + 1] = { port = tonumber(port), file = file }
      end
    end
    i = i + 1
  end
  local mbufs = (rxd + txd) * PG.mbufs_per_desc
  if verbose then
    lines[#lines + 1] = string.format(">>> Packet Max Burst 128/128, RX Desc %d, TX Desc %d, " ..
      "mbufs/port %d, mbuf cache 256", rxd, txd, mbufs)
  end
  for _, s in ipairs(pcaps) do
    local p = read_pcap(s.file)
    if p and p.count > 0 then
      local largest = math.min(math.max(p.largest, PG.default_size), PG.max_frame)
      local size = largest + PG.mbuf + PG.headroom
      local count = p.count
      if count < mbufs then count = (mbufs // count) * count end
      for q = 0, (tx_queues or 1) - 1 do
        lines[#lines + 1] = string.format("    Create: PCAP-       %d:%d - Number of MBUFs %6d " ..
          "for %5d packets                 = %6d KB", s.port, q, count, p.count,
          (p.count * size + 1023) // 1024)
      end
    end
  end
  return lines
end

-- Spillway's flow table for one flow set, as M15 has it: a packet finds its flow's entry if the
-- flow's previous packet came at most `lifetime` seconds before (the first-packet entry,
-- refreshed by each packet); otherwise it makes a new entry. pktgen sends the flows in turn,
-- `pps` packets a second; returns the entries made by `packets` packets.
local function spillway_new_flows(flows, pps, lifetime, packets)
  local last, new = {}, 0
  for k = 0, packets - 1 do
    local f, t = k % flows, k / pps
    if last[f] == nil or t - last[f] > lifetime then new = new + 1 end
    last[f] = t
  end
  return new
end

local function env_of(t)
  return function(name) return t[name] end
end

-- The (start, inc, min, max) of a recorded range field.
local function field(calls, name)
  local f = {}
  for _, c in ipairs(calls) do
    if c.name == name then f[c.args[2]] = c.args[3] end
  end
  return f
end

local function started(calls)
  for _, c in ipairs(calls) do if c.name == "start" then return true end end
  return false
end

-- The client and port of flow i as the layout documents it, worked out here: 10.0.0.1 + i
-- (2001:db8:c::1 + i), 1235 + i mod gcd(flows, 4096).
local CLIENT6_FIRST, CLIENT4_FIRST = ip6("2001:db8:c::1"), ip4("10.0.0.1")
local function layout_flow(kind, flows, i)
  local port = 1235 + i % gcd(flows, 4096)
  if M.is_ipv6(kind) then
    return ip6_add(CLIENT6_FIRST, string.pack(">I8I8", 0, i)), port
  end
  return CLIENT4_FIRST + i, port
end

-- --dump-flows KIND FLOWS: the flows pktgen would send for the case, by packet index, as range
-- mode builds them (up to 65536 flows, with a pool that large) and as the frames of the pcap
-- spillway.lua writes (all of them up to 4096 flows; above, frames 0, 1, P - 1, P, FLOWS - 2
-- and FLOWS - 1, P the source ports), one "range|pcap INDEX ADDRESS PORT" line each, for
-- perf/trex/check_profiles.py to compare with the TRex profile's.
if arg and arg[1] == "--dump-flows" then
  local kind, flows = arg[2], tonumber(arg[3])
  local mbufs = math.max(flows, PG.mbufs)
  local env = { SPW_KIND = kind, SPW_FLOWS = tostring(flows), SPW_DST_MAC = "3c:fd:fe:aa:bb:cc",
    SPW_MBUFS = tostring(mbufs), SPW_DURATION = "1", SPW_CMDFILE = os.tmpname() }
  local out = {}
  local function text(addr) return type(addr) == "string" and ip6_text(addr) or ip4_text(addr) end
  if flows <= 65536 then
    local pg, _, _, wire = fake({ run = "ok", mbufs = mbufs })
    local p, state = M.main(pg, env_of(env), pg.delay)
    if p == nil or wire.mode ~= "range" then
      io.stderr:write("check.lua --dump-flows: range mode did not run: " .. tostring(state) .. "\n")
      os.exit(1)
    end
    for k = 1, flows do
      local b = wire.built[k]
      out[#out + 1] = string.format("range %d %s %d", k - 1, text(b.addr), b.sport)
    end
  end
  os.remove(env.SPW_CMDFILE)
  local p = M.params(env_of({ SPW_KIND = kind, SPW_FLOWS = tostring(flows), SPW_DST_MAC = env.SPW_DST_MAC,
    SPW_WRITE_PCAP = "-" }))
  if flows <= 4096 then
    local pcap = os.tmpname()
    M.write_pcap(p, pcap)
    for i, fr in ipairs(read_pcap(pcap).frames) do
      out[#out + 1] = string.format("pcap %d %s %d", i - 1, text(fr.addr), fr.sport)
    end
    os.remove(pcap)
  else
    local _, ports = M.flow_layout(flows)
    for _, i in ipairs({ 0, 1, ports - 1, ports, flows - 2, flows - 1 }) do
      local fr = M.frame(p, i)
      local v6 = fr:byte(13) == 0x86
      local addr = v6 and fr:sub(23, 38) or string.unpack(">I4", fr, 27)
      out[#out + 1] = string.format("pcap %d %s %d", i, text(addr), string.unpack(">I2", fr, v6 and 55 or 35))
    end
  end
  io.stdout:write(table.concat(out, "\n"), "\n")
  os.exit(0)
end

-- Hand-worked egress frame lengths (no FCS) for pktgen's default sizes. pktgen pads nothing:
-- a 60-byte TCP or UDP IPv4 frame holds a 46-byte IP packet; IPv6 frames are at least 74
-- bytes (pktgen enlarges shorter ones), so IPv6 TCP and UDP alike hold a 60-byte IP packet.
-- egress = 14 + outer IP (20; 40 for the IPv6 service) + tunnel header + inner IP.
local EGRESS = {
  ack = { l2dsr = 60, ipip = 80, gre = 84, ["gre-key"] = 88, gue = 88, geneve = 104 },
  syn = { l2dsr = 60, ipip = 80, gre = 84, ["gre-key"] = 88, gue = 88, geneve = 104 },
  udp = { l2dsr = 60, ipip = 80, gre = 84, ["gre-key"] = 88, gue = 88, geneve = 104 },
  ipv6 = { l2dsr = 74, ipip = 114, gre = 118, ["gre-key"] = 122, gue = 122, geneve = 138 },
  ["ipv6-syn"] = { l2dsr = 74, ipip = 114, gre = 118, ["gre-key"] = 122, gue = 122, geneve = 138 },
  ["ipv6-udp"] = { l2dsr = 74, ipip = 114, gre = 118, ["gre-key"] = 122, gue = 122, geneve = 138 },
}

local cmdfile = os.tmpname()
local MAC = "3c:fd:fe:aa:bb:cc"

for _, kind in ipairs(M.KINDS) do
  for _, mode in ipairs(M.MODES) do
    local got = M.expected_egress(mode, kind, M.min_size(kind))
    check(got == EGRESS[kind][mode], string.format("egress %s/%s: %d, the table says %d",
      kind, mode, got, EGRESS[kind][mode]))
  end
  for _, flows in ipairs(M.FLOW_COUNTS) do
    for _, flat in ipairs({ false, true }) do
      local case = string.format("SPW_KIND=%s SPW_FLOWS=%d%s", kind, flows, flat and " (flat API)" or "")
      local pg, calls, ran, wire = fake({ flat = flat, run = "ok", nested = not flat })
      local env = { SPW_KIND = kind, SPW_FLOWS = tostring(flows), SPW_DST_MAC = MAC,
        SPW_CMDFILE = cmdfile, SPW_DURATION = "10" }
      local p, state, report = M.main(pg, env_of(env), pg.delay)
      if flows > PG.mbufs then
        -- More flows than the range pool has mbufs: range mode must refuse, not send fewer,
        -- and say how to see the pool's size (-v) or change it.
        check(p == nil and not started(calls) and tostring(state):find("range mode sends at most 24576", 1, true),
          case .. ": range mode must refuse more flows than mbufs: " .. tostring(state))
        check(tostring(state):find("started with -v", 1, true) and tostring(state):find("--txd", 1, true),
          case .. ": the refusal must say pktgen prints mbufs/port only with -v: " .. tostring(state))
        -- And a script that claimed them anyway (SPW_MBUFS raised without raising pktgen's
        -- mbufs) would send only the pool's flows: the model shows it.
        if not flat then
          env.SPW_MBUFS = tostring(flows)
          local pg2, _, _, wire2 = fake({ run = "ok", nested = true })
          local p2 = M.main(pg2, env_of(env), pg2.delay)
          check(p2 ~= nil and wire2.flows() == PG.mbufs,
            case .. ": the fake must deliver only its 24576 mbufs' flows")
        end
        goto continue
      end
      check(p ~= nil and state == "measured", case .. ": did not run to a measurement: " .. tostring(state))
      check(wire.mode == "range" and wire.flows() == flows, case .. ": pktgen would send " .. wire.flows() .. " distinct flows")
      check(wire.frame_size() == M.min_size(kind), case .. ": pktgen would send " .. tostring(wire.frame_size()) ..
        "-byte frames, the script says " .. M.min_size(kind))
      -- Packet k of the pool is flow k mod flows of the layout: flow 0 first (client 10.0.0.1
      -- or 2001:db8:c::1, port 1235), the same 5-tuples as the pcap and TRex send.
      local k_bad
      for k = 1, math.min(#wire.built, 2 * flows) do
        local addr, port = layout_flow(kind, flows, (k - 1) % flows)
        local b = wire.built[k]
        if b.addr ~= addr or b.sport ~= port then k_bad = k; break end
      end
      check(k_bad == nil, case .. ": range packet " .. tostring(k_bad) .. " is not flow " ..
        tostring(k_bad and (k_bad - 1) % flows) .. " of the layout (source port " ..
        tostring(k_bad and wire.built[k_bad].sport) .. ")")
      local v6, udp = M.is_ipv6(kind), M.is_udp(kind)
      local size = M.min_size(kind) + 4
      local proto = udp and "udp" or "tcp"
      local seen = {}
      for _, c in ipairs(calls) do seen[c.name] = (seen[c.name] or 0) + 1 end
      check(seen.range_on == 1, case .. ": range mode not switched on")
      check(seen.reset == 1, case .. ": the port's range template not reset")
      check(seen.start == 1 and seen.clr == 1, case .. ": traffic not started once after clearing stats")
      local ps = field(calls, "range.pkt_size")
      check(ps.start == size and ps.min == size and ps.max == size and ps.inc == 0,
        case .. ": range pkt_size is not " .. size)
      local dm = field(calls, "range.dst_mac")
      check(dm.start == MAC, case .. ": range dst_mac is not SPW_DST_MAC")
      local dp = field(calls, "range.dst_port")
      check(dp.start == (udp and 53 or 80) and dp.inc == 0 and dp.min == dp.start and dp.max == dp.start,
        case .. ": destination port not fixed at the VIP port")
      local sp = field(calls, "range.src_port")
      local ports = sp.max - sp.min + 1
      check(sp.min == 1235 and sp.start == 1235 and sp.max <= 65535, case .. ": source ports")
      check(flows % ports == 0, case .. ": " .. ports .. " source ports do not divide the flows")
      check((ports > 1) == (sp.inc == 1), case .. ": source port increment")
      local sets = {}
      for _, c in ipairs(calls) do if c.name == "set_proto" then sets[#sets + 1] = c.args[2] end end
      check(sets[1] == proto, case .. ": set_proto " .. tostring(sets[1]))
      local cli = M.cli_commands(p)
      check(#ran == #cli, case .. ": pktgen.run did not get the CLI file")
      local text = table.concat(cli, "\n")
      if not udp then
        local want = M.is_syn(kind) and "range 0 tcp flag set syn" or "range 0 tcp flag set ack"
        check(text:find(want, 1, true) ~= nil, case .. ": missing `" .. want .. "`")
        if M.is_syn(kind) then
          check(text:find("range 0 tcp flag clr ack", 1, true) ~= nil, case .. ": SYN without clearing ACK")
        end
      end
      if v6 then
        check(text:find("range 0 type ipv6", 1, true) ~= nil, case .. ": no `range 0 type ipv6`")
        check(text:find("range 0 dst ip start " .. p.vip, 1, true) ~= nil, case .. ": IPv6 VIP not set")
        local want_max = "range 0 src ip max " .. M.ipv6_client(flows - 1)
        check(text:find(want_max, 1, true) ~= nil, case .. ": missing `" .. want_max .. "`")
        local inc_line = "range 0 src ip inc " .. (flows > 1 and "::1" or "::")
        local has_inc = false
        for _, line in ipairs(cli) do if line == inc_line then has_inc = true end end
        check(has_inc, case .. ": missing `" .. inc_line .. "`")
        check(M.ipv6_client(0) == "2001:db8:c::1", "first IPv6 client")
        check(M.ipv6_client(65535) == "2001:db8:c::1:0", "IPv6 client 65536")
        check(seen["range.src_ip"] == nil, case .. ": IPv4 src_ip range set for IPv6")
      else
        local di = field(calls, "range.dst_ip")
        check(di.start == p.vip and di.min == p.vip and di.max == p.vip and di.inc == "0.0.0.0",
          case .. ": destination not fixed at the VIP")
        local si = field(calls, "range.src_ip")
        local lo, hi = ip4(si.min), ip4(si.max)
        check(si.start == "10.0.0.1" and lo == ip4("10.0.0.1"), case .. ": clients start at 10.0.0.1")
        check(hi - lo + 1 == flows, case .. ": " .. (hi - lo + 1) .. " client addresses for " .. flows .. " flows")
        check(si.inc == (flows > 1 and "0.0.0.1" or "0.0.0.0"), case .. ": client address increment")
        local period = (hi - lo + 1) * ports // gcd(hi - lo + 1, ports)
        check(period == flows, case .. ": the ranges repeat after " .. period .. " packets")
      end
      check(report ~= nil and report[1]:find("lost 0 ", 1, true) ~= nil, case .. ": report " .. tostring(report and report[1]))
      -- The received average comes from the frames the fake sent, the expectation from the
      -- script: they agree only if the script knows what pktgen sends.
      check(report ~= nil and report[2]:find(string.format("average %.1f bytes; expected %d",
        EGRESS[kind].gue, EGRESS[kind].gue), 1, true) ~= nil,
        case .. ": size report " .. tostring(report and report[2]))
      ::continue::
    end
  end
end

-- One pktgen, two cases: the second run's range template goes on from where the first left
-- it (100 flows: flow 75, 10.0.0.76:1238) unless the script resets the port, which would pair
-- the next case's clients with other ports; with the reset both start at flow 0.
do
  local pg, _, _, wire, state = fake({ run = "ok" })
  M.main(pg, env_of({ SPW_FLOWS = "100", SPW_DST_MAC = MAC, SPW_CMDFILE = cmdfile, SPW_DURATION = "1" }), pg.delay)
  local pg2, _, _, wire2 = fake({ run = "ok", state = state })
  M.main(pg2, env_of({ SPW_FLOWS = "4096", SPW_DST_MAC = MAC, SPW_CMDFILE = cmdfile, SPW_DURATION = "1" }), pg2.delay)
  local k_bad
  for k = 1, 8192 do
    local addr, port = layout_flow("ack", 4096, (k - 1) % 4096)
    local b = wire2.built[k]
    if b.addr ~= addr or b.sport ~= port then k_bad = k; break end
  end
  local b = wire2.built[1]
  check(wire.built[1].sport == 1235 and k_bad == nil,
    "a second case on the same pktgen must send the layout from flow 0 too (10.0.0.1:1235), not " ..
    ip4_text(b.addr) .. ":" .. b.sport .. " first")
  -- Without pktgen.reset the script says so (a fresh pktgen still starts at flow 0).
  printed = {}
  local pg3, _, _, wire3 = fake({ run = "ok", no_reset = true })
  M.main(pg3, env_of({ SPW_FLOWS = "64", SPW_DST_MAC = MAC, SPW_CMDFILE = cmdfile, SPW_DURATION = "1" }), pg3.delay)
  local said = false
  for _, line in ipairs(printed) do if line:find("no pktgen.reset", 1, true) then said = true end end
  check(said and wire3.built[1].sport == 1235, "without pktgen.reset the script must warn")
end

-- Without pktgen.run (or when it refuses), TCP kinds stop before starting; UDP needs no CLI.
do
  local pg, calls = fake({ run = "error" })
  local _, state = M.main(pg, env_of({ SPW_KIND = "syn", SPW_DST_MAC = MAC, SPW_CMDFILE = cmdfile }))
  check(state == "manual" and not started(calls), "syn without pktgen.run must not start traffic")
  local lines = {}
  for line in io.lines(cmdfile) do lines[#lines + 1] = line end
  check(#lines >= 3 and lines[#lines] == "range 0 tcp flag set syn", "CLI file for a manual `load`")
  local pg2 = fake({})
  local _, state2 = M.main(pg2, env_of({ SPW_KIND = "udp", SPW_DST_MAC = MAC, SPW_DURATION = "0" }))
  check(state2 == "running", "udp runs without pktgen.run")
  local pg3, calls3 = fake({ run = "ok" })
  local _, state3 = M.main(pg3, env_of({ SPW_KIND = "ack", SPW_DST_MAC = MAC, SPW_CMDFILE = cmdfile,
    SPW_DURATION = "-1" }))
  check(state3 == "configured" and not started(calls3), "SPW_DURATION=-1 only configures")
  local pg4 = fake({ run = "ok", loss = 1, mode = "ipip" })
  local _, _, report = M.main(pg4, env_of({ SPW_KIND = "ack", SPW_DST_MAC = MAC, SPW_CMDFILE = cmdfile,
    SPW_DURATION = "2", SPW_MODE = "ipip" }))
  check(report and report[1]:find("sent 2000000 packets (1.000 Mpps), received 1998000 (0.999 Mpps) in 2 s; lost 2000 (0.1000%)", 1, true) ~= nil,
    "loss report: " .. tostring(report and report[1]))
  check(report and report[2]:find("average 80.0 bytes; expected 80 (ipip)", 1, true) ~= nil,
    "size report: " .. tostring(report and report[2]))
  local pg5, calls5 = fake({})
  local _, state5 = M.main(pg5, env_of({ SPW_KIND = "ack", SPW_DST_MAC = MAC, SPW_CMDFILE = cmdfile,
    SPW_DURATION = "0" }))
  check(state5 == "running", "ack runs without pktgen.run (pktgen's TCP default is ACK)")
  check(started(calls5), "ack without pktgen.run starts traffic")
end

-- pktgen's version: refused before 24.03.1 (its Lua counters read 0) or when unknown.
for _, v in ipairs({ { "Pktgen 23.10.2", false }, { "Pktgen 24.03.0", false }, { false, false },
  { "Pktgen", false }, { "Pktgen 24.03.1", true }, { "Pktgen 24.10.3", true }, { "Pktgen 25.08.2", true } }) do
  local pg, calls = fake({ run = "ok", version = v[1] })
  local p, state = M.main(pg, env_of({ SPW_DST_MAC = MAC, SPW_CMDFILE = cmdfile, SPW_DURATION = "2" }))
  local what = "pktgen version " .. tostring(v[1])
  if v[2] then
    check(p ~= nil and state == "measured", what .. " must be accepted: " .. tostring(state))
  else
    check(p == nil and not started(calls) and tostring(state):find("24.03.1", 1, true),
      what .. " must be refused before any traffic: " .. tostring(state))
  end
end

-- SPW_WRITE_PCAP inside pktgen is refused (it would also lift range mode's limit).
do
  local pg, calls = fake({ run = "ok" })
  local p = M.main(pg, env_of({ SPW_DST_MAC = MAC, SPW_FLOWS = "65536", SPW_WRITE_PCAP = "/tmp/x.pcap" }))
  check(p == nil and #calls == 0, "SPW_WRITE_PCAP must be refused inside pktgen")
end

-- Counters that read 0 over a run that lasted: an error, never "0 lost".
do
  printed = {}
  local pg = fake({ run = "ok", zero = true, version = "Pktgen 24.03.1" })
  local p, state, report, err = M.main(pg, env_of({ SPW_DST_MAC = MAC, SPW_CMDFILE = cmdfile,
    SPW_DURATION = "5" }))
  local lost = false
  for _, line in ipairs(printed) do if line:find("lost", 1, true) then lost = true end end
  check(p ~= nil and state == "no counters" and report == nil and not lost
    and tostring(err):find("read 0 sent and 0 received", 1, true),
    "zero counters must give an error, not a loss figure: " .. tostring(state) .. " " .. tostring(err))
  local pr = M.params(env_of({ SPW_DST_MAC = MAC }))
  check(M.report(pr, 1000, 0, 0) == nil and M.report(pr, 0, 1000, 60000) == nil,
    "a report needs both counters above 0")
end

-- pcap mode: the script writes the case's frames outside pktgen, pktgen loads them with -s,
-- and the script checks that pktgen loaded that very file, all of it, before sending it.
do
  local pcapfile = os.tmpname()
  for _, kind in ipairs(M.KINDS) do
    local flows = (kind == "ack" or kind == "ipv6-udp") and 65536 or 24577
    local env = { SPW_KIND = kind, SPW_FLOWS = tostring(flows), SPW_DST_MAC = MAC,
      SPW_CMDFILE = cmdfile, SPW_DURATION = "3", SPW_WRITE_PCAP = pcapfile }
    local case = "pcap mode SPW_KIND=" .. kind .. " SPW_FLOWS=" .. flows
    local p = M.params(env_of(env))
    local n = M.write_pcap(p, pcapfile)
    check(n == flows, case .. ": wrote " .. tostring(n) .. " frames")
    -- Read it back: record count, lengths, every frame flow i of the layout.
    local r = read_pcap(pcapfile)
    local sizes_ok, layout_ok = true, true
    for i, fr in ipairs(r.frames) do
      if fr.size ~= M.min_size(kind) then sizes_ok = false end
      local addr, port = layout_flow(kind, flows, i - 1)
      if fr.addr ~= addr or fr.sport ~= port then layout_ok = false end
    end
    check(r.count == flows and sizes_ok and layout_ok,
      case .. ": pcap holds " .. r.count .. " frames, in the layout's order: " .. tostring(layout_ok))
    -- What pktgen prints for this file on one TX queue: the script's estimate must match.
    local mem = M.pcap_memory(flows, M.min_size(kind), PG.mbufs)
    local shown = startup({ "-v", "-s", "0:" .. pcapfile }, 1)
    check(#shown == 2 and shown[2]:find(string.format("Number of MBUFs %6d for %5d packets", mem.mbufs, flows), 1, true)
      and shown[2]:find(string.format("= %6d KB", mem.printed_kb), 1, true),
      case .. ": pktgen prints " .. tostring(shown[2]) .. ", the script expects " .. mem.printed_kb .. " KB")
    env.SPW_PCAP, env.SPW_WRITE_PCAP = pcapfile, nil
    local pg, calls, _, wire = fake({ run = "ok", pcap = { [0] = pcapfile } })
    local p2, state, report = M.main(pg, env_of(env), pg.delay)
    local on, ranged = false, false
    for _, c in ipairs(calls) do
      if c.name == "pcap" and c.args[2] == "on" then on = true end
      if c.name == "range_on" then ranged = true end
    end
    check(p2 ~= nil and state == "measured" and on and not ranged and wire.mode == "pcap"
      and wire.flows() == flows, case .. ": not sent in pcap mode: " .. tostring(state))
    check(report and report[1]:find("lost 0 ", 1, true) and report[2]:find(string.format(
      "average %.1f bytes; expected %d", EGRESS[kind].gue, EGRESS[kind].gue), 1, true), case .. ": report")
    -- The same file for another case is refused.
    env.SPW_FLOWS = tostring(flows - 1)
    local pg3, calls3 = fake({ run = "ok", pcap = { [0] = pcapfile } })
    local p3 = M.main(pg3, env_of(env), pg3.delay)
    check(p3 == nil and not started(calls3), case .. ": a pcap of another flow count must be refused")
  end
  -- pktgen started without -s: `pcap on` would change nothing and pktgen would send its
  -- default packet (one flow, 192.168.0.1:1234), so the script must refuse.
  local env = { SPW_KIND = "syn", SPW_FLOWS = "64", SPW_DST_MAC = MAC, SPW_WRITE_PCAP = pcapfile,
    SPW_CMDFILE = cmdfile, SPW_DURATION = "2" }
  M.write_pcap(M.params(env_of(env)), pcapfile)
  env.SPW_PCAP, env.SPW_WRITE_PCAP = pcapfile, nil
  do
    local pg, calls = fake({ run = "ok" })
    local p, err = M.main(pg, env_of(env), pg.delay)
    check(p == nil and not started(calls) and tostring(err):find("-s 0:" .. pcapfile, 1, true),
      "pcap mode on a pktgen without -s must be refused: " .. tostring(err))
    -- What it would have sent: the fake's default packet.
    local pgd, _, _, wired = fake({ run = "ok" })
    pgd.pcap(0, "on")
    pgd.start(0)
    check(wired.mode == "single" and wired.flows() == 1 and wired.frame_size() == 60,
      "the fake sends pktgen's default packet when pcap is on without -s")
  end
  -- -s with another file, and -s on another port.
  local other = os.tmpname()
  M.write_pcap(M.params(env_of({ SPW_KIND = "syn", SPW_FLOWS = "64", SPW_DST_MAC = MAC })), other)
  for _, pcaps in ipairs({ { [0] = other }, { [1] = pcapfile } }) do
    local pg, calls = fake({ run = "ok", pcap = pcaps })
    local p, err = M.main(pg, env_of(env), pg.delay)
    check(p == nil and not started(calls) and tostring(err):find("-s 0:" .. pcapfile, 1, true),
      "pcap mode must be refused unless pktgen loaded SPW_PCAP for the TX port: " .. tostring(err))
  end
  -- A binding without pktgen.save cannot tell: the script stops for a manual check.
  do
    local pg, calls = fake({ run = "ok", pcap = { [0] = pcapfile }, no_save = true })
    local p, state = M.main(pg, env_of(env), pg.delay)
    check(p ~= nil and state == "manual" and not started(calls), "pcap mode without pktgen.save: " .. tostring(state))
  end
  os.remove(other)
  env.SPW_WRITE_PCAP, env.SPW_PCAP = pcapfile, nil
  M.write_pcap(M.params(env_of(env)), pcapfile)
  env.SPW_PCAP = pcapfile
  env.SPW_DST_MAC = "3c:fd:fe:aa:bb:cd"
  check(M.check_pcap(M.params(env_of(env)), pcapfile) == nil, "a pcap to another MAC must be refused")
  env.SPW_DST_MAC, env.SPW_KIND = MAC, "ack"
  check(M.check_pcap(M.params(env_of(env)), pcapfile) == nil, "a pcap of SYNs is not an ACK case")
  -- A small pcap is repeated up to the range pool: 64 frames, 384 x 64 = 24576 mbufs.
  local mem = M.pcap_memory(64, 60, PG.mbufs)
  local shown = startup({ "-s", "0:" .. pcapfile }, 2)
  check(#shown == 2 and shown[1]:find("Number of MBUFs  24576 for    64 packets", 1, true)
    and shown[2]:find(string.format("= %6d KB", mem.printed_kb), 1, true) and mem.mbufs == 24576,
    "a 64-frame pcap: " .. tostring(shown[1]))
  os.remove(pcapfile)
end

-- pcap memory for the largest case, worked out by hand: 1,048,576 60-byte frames, each an
-- element of 60 + 128 + 128 = 316 bytes; pktgen prints 1,048,576 x 316 / 1024 = 323,584 KB per
-- TX queue; DPDK's mempool object is a 64-byte header + 320 (316 rounded to 8) = 384 bytes,
-- 6 cache lines, padded to 7 (coprime with 4 channels): 448 bytes, 448 MiB per TX queue.
-- (The old estimate, a 2.2 KB mbuf per frame, was 2.3 GB.)
do
  local m = M.pcap_memory(1048576, 60, PG.mbufs, 4)
  check(m.mbufs == 1048576 and m.element == 316 and m.printed_kb == 323584 and m.object == 448
    and m.bytes == 448 * 1048576, string.format("pcap memory of 1M frames: %d mbufs of %d, %d KB, " ..
    "objects of %d, %d bytes", m.mbufs, m.element, m.printed_kb, m.object, m.bytes))
  local v6 = M.pcap_memory(1048576, 74, PG.mbufs, 4)
  check(v6.element == 330 and v6.object == 448, "pcap memory of 74-byte frames: " .. v6.object)
  local p = M.params(env_of({ SPW_DST_MAC = MAC, SPW_FLOWS = "1048576", SPW_WRITE_PCAP = "/x.pcap" }))
  local text = M.pcap_memory_text(p)
  check(text:find("1048576 mbufs of 316 bytes", 1, true) and text:find("= 323584 KB", 1, true)
    and text:find("448.0 MiB", 1, true), "pcap memory text: " .. text)
end

-- The docs' and the script's pktgen command lines must make pktgen print its mbufs per pool
-- (SPW_MBUFS, range mode's limit): pktgen 24.03 prints "mbufs/port" only with -v.
do
  local function tokens(s)
    local out = {}
    local i = 1
    while i <= #s do
      local c = s:sub(i, i)
      if c:match("%s") then
        i = i + 1
      elseif c == '"' then
        local j = s:find('"', i + 1, true) or #s + 1
        out[#out + 1] = s:sub(i + 1, j - 1)
        i = j + 1
      else
        local j = s:find("[%s\"]", i) or #s + 1
        out[#out + 1] = s:sub(i, j - 1)
        i = j
      end
    end
    return out
  end
  for _, doc in ipairs({ here .. "/spillway.lua", here .. "/README.md", here .. "/../BARE-METAL.md" }) do
    local f = io.open(doc, "r")
    check(f ~= nil, "cannot read " .. doc)
    if f then
      local text = f:read("a")
      f:close()
      -- Lua comments lose their "--", continued lines are joined.
      text = text:gsub("\n%-%- ?", "\n"):gsub("\\\n", " ")
      local found = 0
      for line in text:gmatch("[^\n]+") do
        local app = line:match("pktgen %-l .- %-%- (.*)$")
        if app then
          found = found + 1
          local shown = startup(tokens(app), 1)
          local mbufs = false
          for _, l in ipairs(shown) do if l:find("mbufs/port 24576", 1, true) then mbufs = true end end
          check(mbufs, doc .. ": pktgen started as `" .. app .. "` does not print its mbufs (add -v)")
        end
      end
      check(found > 0, doc .. ": no pktgen command line found")
    end
  end
  local shown = startup({ "-v", "--rxd=2048", "--txd=4096", "-m", "[1:2].0" }, 1)
  check(shown[1] and shown[1]:find("mbufs/port " .. M.range_mbufs(2048, 4096), 1, true),
    "mbufs for --rxd=2048 --txd=4096: " .. tostring(shown[1]))
  check(#startup({ "-m", "[1:2].0" }, 1) == 0, "without -v pktgen prints no mbufs line")
end

-- The new-flow line against Spillway's first-packet ageing (spillway_new_flows): when each flow
-- comes back within the lifetime the line claims exactly `flows`, and the model agrees; when
-- not, the line gives a bound the model meets, and names the rate that would give `flows`.
do
  local flows, lifetime = 4096, 10
  for _, c in ipairs({ { pps = 1000, fast = true }, { pps = 410, fast = true }, { pps = 200, fast = false },
    { pps = 409, fast = false } }) do
    local pg = fake({ run = "ok", pps = c.pps })
    local _, _, report = M.main(pg, env_of({ SPW_FLOWS = tostring(flows), SPW_DST_MAC = MAC,
      SPW_CMDFILE = cmdfile, SPW_DURATION = "30", SPW_WARMUP = "2", SPW_FIRST_PACKET = tostring(lifetime) }), pg.delay)
    local line = report and report[3] or ""
    local total = c.pps * 32 -- warm-up and measurement
    local new = spillway_new_flows(flows, c.pps, lifetime, total)
    local what = string.format("new-flow line at %d pps: ", c.pps)
    if c.fast then
      check(new == flows and line:find("must show 4096 new flows", 1, true), what .. line .. " (model: " .. new .. ")")
    else
      check(new > flows and new <= total and line:find("cannot show 4096 new flows", 1, true)
        and line:find("at least 4096", 1, true) and line:find("410 pps", 1, true),
        what .. line .. " (model: " .. new .. ")")
    end
  end
  -- 1,048,576 flows: at 1 Mpps each comes back every 1.05 s; at 50 kpps every 21 s, past 10 s.
  local pcapless = { SPW_FLOWS = "1048576", SPW_DST_MAC = MAC, SPW_PCAP = "/x.pcap", SPW_DURATION = "30" }
  local p = M.params(env_of(pcapless))
  check(M.new_flows_text(p, 30000000):find("must show 1048576 new flows", 1, true), "1M flows at 1 Mpps")
  local slow = M.new_flows_text(p, 1500000)
  check(slow:find("cannot show 1048576 new flows", 1, true) and slow:find("every 21.0 s", 1, true)
    and slow:find("0.105 Mpps", 1, true), "1M flows at 50 kpps: " .. slow)
end

for _, bad in ipairs({
  { SPW_KIND = "bogus" }, { SPW_FLOWS = "0" }, { SPW_FLOWS = "abc" }, { SPW_FLOWS = "1.5" },
  { SPW_FLOWS = tostring(M.MAX_FLOWS + 1) }, { SPW_MODE = "vxlan" }, { SPW_VIP = "2001:db8::10" },
  { SPW_KIND = "ipv6", SPW_VIP = "198.18.10.10" }, { SPW_SIZE = "59" },
  { SPW_KIND = "ipv6", SPW_SIZE = "60" }, { SPW_PORT = "0" }, { SPW_DST_MAC = "" },
  { SPW_DST_MAC = "nope" }, { SPW_KIND = "ipv6-udp", SPW_SIZE = "62" }, { SPW_KIND = "ipv6-udp", SPW_SIZE = "73" },
  { SPW_FLOWS = "24577" }, { SPW_FLOWS = "65536", SPW_MBUFS = "32768" }, { SPW_MBUFS = "0" },
  { SPW_FIRST_PACKET = "0" },
}) do
  local env = { SPW_DST_MAC = MAC }
  local desc = {}
  for k, v in pairs(bad) do env[k] = v; desc[#desc + 1] = k .. "=" .. v end
  if bad.SPW_DST_MAC == "" then env.SPW_DST_MAC = nil end
  local p = M.params(env_of(env))
  check(p == nil, "parameters " .. table.concat(desc, " ") .. " should be refused")
end
local p = M.params(env_of({ SPW_DST_MAC = MAC }))
check(p and p.kind == "ack" and p.flows == 4096 and p.vip == "198.18.10.10" and p.port == 80
  and p.size == 60 and p.mode == "gue" and p.duration == 30 and p.mbufs == 24576
  and p.first_packet == 10, "defaults")
check(M.RANGE_MBUFS == PG.mbufs, "range mode's default limit is pktgen's (1024 + 2048) x 8 mbufs")
local p6 = M.params(env_of({ SPW_DST_MAC = MAC, SPW_KIND = "ipv6-udp" }))
check(p6 and p6.size == 74, "ipv6-udp defaults to the 74 bytes pktgen sends")
check(M.params(env_of({ SPW_DST_MAC = MAC, SPW_FLOWS = "1048576", SPW_PCAP = "/x.pcap" })) ~= nil,
  "pcap mode takes more flows than range mode")

os.remove(cmdfile)
for i, f in ipairs(failures) do
  if i <= 40 then real_print("FAIL: " .. f) end
end
if #failures > 40 then real_print("FAIL: ... and " .. (#failures - 40) .. " more") end
real_print(string.format("check.lua: %d checks (%s): %d passed, %d failed", checks, _VERSION,
  checks - #failures, #failures))
os.exit(#failures == 0 and 0 or 1)
