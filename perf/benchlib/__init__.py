"""The parts of Spillway's benchmark harness. perf/bench.py is its command
line and says what the harness measures; perf/bench.sh runs it.

Each module depends only on those listed before it:

  log          progress messages on stderr
  cases        what is measured: cases, matrices, shared constants, sizing
  machine      CPUs, hugepages, /proc CPU time, machine_info, DPDK telemetry, sh
  measurement  a run's samples, its result row, RunFailed, `spillway stats`
  configs      the Spillway configurations a case runs with
  pcap         reading pcap files; the gateway return set's Geneve echo
  warmups      the gateway return and synflood cases' warm-ups and verdict
  report       the results table: columns, rows, medians, RESULTS.md
  runner       Runner: starts spillway or testpmd, samples a window, a row
  passes       the matrix measured in passes, testpmd ceilings first
"""
