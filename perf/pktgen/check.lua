-- Runs perf/pktgen/spillway.lua against a fake `pktgen` table, without pktgen-dpdk (CI runs
-- this through perf/pktgen/check.sh, after `luac -p`). The fake records every call and models
-- what pktgen sends: range packets built once per TX mbuf (24,576: at most that many distinct
-- flows), IPv6 frames enlarged to 74 bytes, received bytes from the frames it sent, a version
-- string, counters that stay 0 (pktgen before 24.03.1) and pcap mode. For each case (kind x
-- flow count, both the pktgen.range.* API and the older flat one) this checks the range
-- settings, that the flows the fake sends are exactly `flows` (or that range mode refused),
-- the frame size, the CLI lines for TCP flags and IPv6, the run/measure/report sequence, the
-- expected egress per delivery mode against a table worked out by hand; then the version and
-- zero-counter refusals, the pcap writer and pcap mode, and that bad parameters are refused.
--
--   lua5.4 perf/pktgen/check.lua

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

-- The low 32 bits of the IPv6 addresses the script writes (2001:db8:c::x[:y]).
local function ip6_low(s)
  local tail = s:match("::(.*)$")
  if tail == nil or tail == "" then return 0 end
  local v = 0
  for g in tail:gmatch("[^:]+") do v = (v << 16) | tonumber(g, 16) end
  return v & 0xffffffff
end

-- Distinct values of the stepped fields over `steps` packets, as pktgen_range_ctor steps
-- them: value += inc; below min -> max; above max -> min; inc 0 keeps the start value.
local function step(fields, steps)
  local cur, seen, count = {}, {}, 0
  for i, f in ipairs(fields) do cur[i] = f.start end
  for _ = 1, steps do
    local key = table.concat(cur, "/")
    if not seen[key] then seen[key] = true; count = count + 1 end
    for i, f in ipairs(fields) do
      if f.inc ~= 0 then
        local v = cur[i] + f.inc
        if v < f.min then v = f.max elseif v > f.max then v = f.min end
        cur[i] = v
      end
    end
  end
  return count
end

-- A fake pktgen that models what the real one sends. opts.flat: the pre-3.x flat range API;
-- opts.run: nil (no pktgen.run), "ok" or "error"; opts.loss: packets lost per ms;
-- opts.version: pktgen.info.Pktgen_Version (default "Pktgen 24.03.1", false: no info);
-- opts.zero: the Lua counters stay 0 (pktgen before 24.03.1); opts.mbufs: TX mbufs per port
-- (default 24576): range packets are built once per mbuf, so at most that many distinct
-- flows go out; opts.mode: the DUT's delivery mode for the received bytes.
-- IPv6 frames are enlarged to 78 bytes with the FCS, as pktgen does.
local function fake(opts)
  local calls, pg = {}, {}
  local function rec(name)
    return function(...) calls[#calls + 1] = { name = name, args = { ... } } end
  end
  for _, n in ipairs({ "stop", "start", "set_type", "set_proto", "set", "clr", "set_mac", "pcap" }) do
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
  local function last(name, key)
    local v
    for _, c in ipairs(calls) do
      if c.name == name and (key == nil or c.args[2] == key) then v = c.args[key and 3 or 2] end
    end
    return v
  end
  local wire = {}
  -- What goes out: frame size without FCS and distinct flows, from the recorded settings.
  function wire.frame_size()
    if last("pcap") == "on" then return opts.pcap_size, opts.pcap_v6 end
    local v6 = last("set_type") == "ipv6"
    for _, line in ipairs(ran) do if line:match("type ipv6$") then v6 = true end end
    local size = (last("range_on") and last("range.pkt_size", "start")) or last("set", "size")
    if v6 and size < 78 then size = 78 end
    return size - 4, v6
  end
  function wire.flows()
    if last("pcap") == "on" then return opts.pcap_flows end
    local sp = { start = last("range.src_port", "start"), inc = last("range.src_port", "inc"),
      min = last("range.src_port", "min"), max = last("range.src_port", "max") }
    local ip = { start = 0, inc = 0, min = 0, max = 0 }
    local _, v6 = wire.frame_size()
    if v6 then
      for _, line in ipairs(ran) do
        local what, val = line:match("^range %d+ src ip (%a+) (%S+)$")
        if what then ip[what] = ip6_low(val) end
      end
    elseif last("range.src_ip", "start") then
      for _, k in ipairs({ "start", "inc", "min", "max" }) do ip[k] = ip4(last("range.src_ip", k)) end
    end
    return step({ ip, sp }, opts.mbufs or 24576)
  end
  -- Counters follow the simulated clock: 1000 packets per ms sent on port 0, `loss` of them
  -- per ms missing on port 1, every received frame the egress of the frame actually sent.
  pg.portStats = function(port, _)
    local sent = opts.zero and 0 or 1000 * slept
    local got = opts.zero and 0 or sent - (opts.loss or 0) * slept
    local entry
    if tonumber(port) == 0 then
      entry = { opackets = sent, obytes = sent * 60, ipackets = 0, ibytes = 0 }
    else
      local size, v6 = wire.frame_size()
      local egress = size + OVERHEAD[opts.mode or "gue"][v6 and 2 or 1]
      entry = { opackets = 0, obytes = 0, ipackets = got, ibytes = got * egress }
    end
    local t = { n = 1 }
    t[tonumber(port)] = opts.nested and { curr = entry } or entry
    return t
  end
  return pg, calls, ran, wire
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
      if flows > M.RANGE_MBUFS then
        -- More flows than pktgen has TX mbufs: range mode must refuse, not send fewer.
        local started = false
        for _, c in ipairs(calls) do if c.name == "start" then started = true end end
        check(p == nil and not started and tostring(state):find("range mode sends at most 24576", 1, true),
          case .. ": range mode must refuse more flows than mbufs: " .. tostring(state))
        -- And a script that claimed them anyway (SPW_MBUFS raised without raising pktgen's
        -- mbufs) would send only 24576 distinct flows: the model shows it.
        env.SPW_MBUFS = tostring(flows)
        local pg2, _, _, wire2 = fake({ flat = flat, run = "ok", nested = not flat })
        local p2 = M.main(pg2, env_of(env), pg2.delay)
        check(p2 ~= nil and wire2.flows() == M.RANGE_MBUFS,
          case .. ": the fake must deliver only its 24576 mbufs' flows")
        goto continue
      end
      check(p ~= nil and state == "measured", case .. ": did not run to a measurement: " .. tostring(state))
      check(wire.flows() == flows, case .. ": pktgen would send " .. wire.flows() .. " distinct flows")
      check(wire.frame_size() == M.min_size(kind), case .. ": pktgen would send " .. wire.frame_size() ..
        "-byte frames, the script says " .. M.min_size(kind))
      local v6, udp = M.is_ipv6(kind), M.is_udp(kind)
      local size = M.min_size(kind) + 4
      local proto = udp and "udp" or "tcp"
      local seen = {}
      for _, c in ipairs(calls) do seen[c.name] = (seen[c.name] or 0) + 1 end
      check(seen.range_on == 1, case .. ": range mode not switched on")
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
      check(sp.min == 1024 and sp.start == 1024 and sp.max <= 65535, case .. ": source ports")
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
        if flows <= 65536 then
          local n = step({ { start = ip4(si.start), inc = ip4(si.inc), min = lo, max = hi },
            { start = sp.start, inc = sp.inc, min = sp.min, max = sp.max } }, 2 * flows)
          check(n == flows, case .. ": stepping the ranges gives " .. n .. " flows")
        else
          local period = (hi - lo + 1) * ports // gcd(hi - lo + 1, ports)
          check(period == flows, case .. ": the ranges repeat after " .. period .. " packets")
        end
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

-- Without pktgen.run (or when it refuses), TCP kinds stop before starting; UDP needs no CLI.
do
  local pg, calls = fake({ run = "error" })
  local _, state = M.main(pg, env_of({ SPW_KIND = "syn", SPW_DST_MAC = MAC, SPW_CMDFILE = cmdfile }))
  local started = false
  for _, c in ipairs(calls) do if c.name == "start" then started = true end end
  check(state == "manual" and not started, "syn without pktgen.run must not start traffic")
  local lines = {}
  for line in io.lines(cmdfile) do lines[#lines + 1] = line end
  check(#lines >= 3 and lines[#lines] == "range 0 tcp flag set syn", "CLI file for a manual `load`")
  local pg2 = fake({})
  local _, state2 = M.main(pg2, env_of({ SPW_KIND = "udp", SPW_DST_MAC = MAC, SPW_DURATION = "0" }))
  check(state2 == "running", "udp runs without pktgen.run")
  local pg3, calls3 = fake({ run = "ok" })
  local _, state3 = M.main(pg3, env_of({ SPW_KIND = "ack", SPW_DST_MAC = MAC, SPW_CMDFILE = cmdfile,
    SPW_DURATION = "-1" }))
  local started3 = false
  for _, c in ipairs(calls3) do if c.name == "start" then started3 = true end end
  check(state3 == "configured" and not started3, "SPW_DURATION=-1 only configures")
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
  local started5 = false
  for _, c in ipairs(calls5) do if c.name == "start" then started5 = true end end
  check(started5, "ack without pktgen.run starts traffic")
end

-- pktgen's version: refused before 24.03.1 (its Lua counters read 0) or when unknown.
for _, v in ipairs({ { "Pktgen 23.10.2", false }, { "Pktgen 24.03.0", false }, { false, false },
  { "Pktgen", false }, { "Pktgen 24.03.1", true }, { "Pktgen 24.10.3", true }, { "Pktgen 25.08.2", true } }) do
  local pg, calls = fake({ run = "ok", version = v[1] })
  local p, state = M.main(pg, env_of({ SPW_DST_MAC = MAC, SPW_CMDFILE = cmdfile, SPW_DURATION = "2" }))
  local started = false
  for _, c in ipairs(calls) do if c.name == "start" then started = true end end
  local what = "pktgen version " .. tostring(v[1])
  if v[2] then
    check(p ~= nil and state == "measured", what .. " must be accepted: " .. tostring(state))
  else
    check(p == nil and not started and tostring(state):find("24.03.1", 1, true),
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

-- pcap mode: the script writes the case's frames outside pktgen, then checks and sends them.
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
    -- Read it back: record count, lengths, every (client, port) distinct.
    local f = assert(io.open(pcapfile, "rb"))
    local data = f:read("a")
    f:close()
    local pos, count, seen, distinct, sizes_ok, size = 25, 0, {}, 0, true, nil
    local v6 = M.is_ipv6(kind)
    while pos <= #data do
      local _, _, caplen = string.unpack("<I4I4I4", data, pos)
      local fr = data:sub(pos + 16, pos + 15 + caplen)
      pos = pos + 16 + caplen
      count = count + 1
      if #fr ~= M.min_size(kind) then sizes_ok = false end
      size = #fr
      local key = v6 and fr:sub(23, 38) .. fr:sub(55, 56) or fr:sub(27, 30) .. fr:sub(35, 36)
      if not seen[key] then seen[key] = true; distinct = distinct + 1 end
    end
    check(count == flows and distinct == flows and sizes_ok,
      case .. ": pcap holds " .. count .. " frames, " .. distinct .. " distinct flows")
    env.SPW_PCAP, env.SPW_WRITE_PCAP = pcapfile, nil
    local pg, calls = fake({ run = "ok", pcap_flows = distinct, pcap_size = size, pcap_v6 = v6 })
    local p2, state, report = M.main(pg, env_of(env), pg.delay)
    local on, ranged = false, false
    for _, c in ipairs(calls) do
      if c.name == "pcap" and c.args[2] == "on" then on = true end
      if c.name == "range_on" then ranged = true end
    end
    check(p2 ~= nil and state == "measured" and on and not ranged,
      case .. ": not sent in pcap mode: " .. tostring(state))
    check(report and report[1]:find("lost 0 ", 1, true) and report[2]:find(string.format(
      "average %.1f bytes; expected %d", EGRESS[kind].gue, EGRESS[kind].gue), 1, true), case .. ": report")
    -- The same file for another case is refused.
    env.SPW_FLOWS = tostring(flows - 1)
    local pg3, calls3 = fake({ run = "ok" })
    local p3 = M.main(pg3, env_of(env), pg3.delay)
    check(p3 == nil and #calls3 == 0, case .. ": a pcap of another flow count must be refused")
  end
  local env = { SPW_KIND = "syn", SPW_FLOWS = "64", SPW_DST_MAC = MAC, SPW_WRITE_PCAP = pcapfile }
  M.write_pcap(M.params(env_of(env)), pcapfile)
  env.SPW_PCAP = pcapfile
  env.SPW_DST_MAC = "3c:fd:fe:aa:bb:cd"
  check(M.check_pcap(M.params(env_of(env)), pcapfile) == nil, "a pcap to another MAC must be refused")
  env.SPW_DST_MAC, env.SPW_KIND = MAC, "ack"
  check(M.check_pcap(M.params(env_of(env)), pcapfile) == nil, "a pcap of SYNs is not an ACK case")
  os.remove(pcapfile)
end

for _, bad in ipairs({
  { SPW_KIND = "bogus" }, { SPW_FLOWS = "0" }, { SPW_FLOWS = "abc" }, { SPW_FLOWS = "1.5" },
  { SPW_FLOWS = tostring(M.MAX_FLOWS + 1) }, { SPW_MODE = "vxlan" }, { SPW_VIP = "2001:db8::10" },
  { SPW_KIND = "ipv6", SPW_VIP = "198.18.10.10" }, { SPW_SIZE = "59" },
  { SPW_KIND = "ipv6", SPW_SIZE = "60" }, { SPW_PORT = "0" }, { SPW_DST_MAC = "" },
  { SPW_DST_MAC = "nope" }, { SPW_KIND = "ipv6-udp", SPW_SIZE = "62" }, { SPW_KIND = "ipv6-udp", SPW_SIZE = "73" },
  { SPW_FLOWS = "24577" }, { SPW_FLOWS = "65536", SPW_MBUFS = "32768" }, { SPW_MBUFS = "0" },
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
  and p.size == 60 and p.mode == "gue" and p.duration == 30 and p.mbufs == 24576, "defaults")
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
