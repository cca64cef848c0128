"""How many concurrent streams and chunks/s one simulator process sustains on its schedule.

For each load point (streams, target chunks/s) this starts a fresh simulator whose time scale
makes a verify step for that many streams last `streams / target` seconds, keeps that many
streams open from a lean client in a separate process (epoll, counts `data: ` lines, never
parses JSON), and prints the achieved chunks/s, the simulator's CPU share and CPU µs per chunk,
and its own scheduling lag (p50/p99/max from /metrics). Run it on an otherwise idle machine: the
simulator and the client need a core each.

    python benchmarks/sim_capacity.py [--seconds 6] [--points 8:10000,64:50000,256:50000]

Targets (issue 7): >= 256 streams and >= 50,000 chunks/s on one core with lag p99 < 2 ms,
never below 20,000 chunks/s.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import selectors
import socket
import time
import urllib.request

from loadlib.sim.engine import LAG_WINDOW_S
from loadlib.sim.presets import DEFAULT_PRESET, PRESETS
from loadlib.sim.process import start_simulator

PROMPT = ("You are an expert Python engineer. Write a complete implementation of a thread-safe "
          "LRU cache class with TTL expiration support, including unit tests.")
TOKENS = 200_000  # long enough that no stream ends (and re-prefills) during a load point
GRACE_S = 3.0  # the client reads on this long after the measured window


def _request(host: str, port: int, i: int) -> bytes:
    body = json.dumps({"model": "sim", "messages": [{"role": "user", "content": PROMPT}],
                       "max_tokens": TOKENS, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True},
                       "chat_template_kwargs": {"enable_thinking": False}}).encode()
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"X-Request-Id: cap-{i}\r\nX-Sim-Natural-Tokens: {TOKENS}\r\n\r\n").encode() + body


def client(host: str, port: int, streams: int, seconds: float, warmup: float, out) -> None:
    """Holds `streams` streams open and reports chunks/s counted from `warmup` for `seconds`
    (it keeps reading a little longer, so the simulator is still loaded when it is asked for
    its lag)."""
    sel = selectors.EpollSelector()
    socks = []
    for i in range(streams):
        s = socket.create_connection((host, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(_request(host, port, i))
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        socks.append(s)
    start = time.monotonic()
    measure_from, measure_to = start + warmup, start + warmup + seconds
    end = measure_to + GRACE_S
    counted = 0
    tail = {s: b"" for s in socks}
    now = start
    while now < end:
        for key, _ in sel.select(0.05):
            s = key.fileobj
            try:
                data = s.recv(262144)
            except BlockingIOError:
                continue
            if not data:
                sel.unregister(s)
                continue
            chunk = tail[s] + data
            if measure_from <= now < measure_to:
                counted += chunk.count(b"data: {\"id\"") - tail[s].count(b"data: {\"id\"")
            tail[s] = data[-12:]
        now = time.monotonic()
    for s in socks:
        s.close()
    out.send(counted / seconds)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def lag_quantiles(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    found = dict(re.findall(r'loadlib_sim:scheduling_lag_seconds\{[^}]*quantile="([\d.]+)"\} (\S+)', text))
    return {q: float(v) * 1e3 for q, v in found.items()}


def run_point(streams: int, target: float, seconds: float) -> dict[str, float]:
    cfg = PRESETS[DEFAULT_PRESET]
    step = cfg.verify_step_s + (streams - 1) * cfg.verify_extra_req_s
    scale = streams / target / step
    with start_simulator(["--time-scale", f"{scale:.6g}", "--max-running-requests", str(streams),
                          "--chunked-prefill-size", str(64 * streams),
                          "--max-prefill-tokens", str(64 * streams)]) as sim:
        host, port = sim.url.rsplit("//", 1)[1].split(":")
        warmup = 1.5
        recv, send = multiprocessing.Pipe(False)
        proc = multiprocessing.Process(target=client, args=(host, int(port), streams, seconds, warmup, send))
        proc.start()
        time.sleep(warmup)
        cpu0, t0 = cpu_seconds(sim.pid), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = cpu_seconds(sim.pid), time.monotonic()
        lag = lag_quantiles(sim.url)  # the last LAG_WINDOW_S seconds, while still loaded
        rate = recv.recv()
        proc.join()
    cpu_share = (cpu1 - cpu0) / (t1 - t0)
    return {"streams": streams, "target": target, "chunks_per_s": rate, "cpu_share": cpu_share,
            "cpu_us_per_chunk": cpu_share * 1e6 / rate if rate else float("nan"),
            "lag_p50_ms": lag.get("0.5", float("nan")), "lag_p99_ms": lag.get("0.99", float("nan")),
            "lag_max_ms": lag.get("1.0", float("nan"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=max(6.0, LAG_WINDOW_S),
                    help="measured seconds per load point (at least the /metrics lag window)")
    ap.add_argument("--points", default="8:10000,64:50000,256:20000,256:50000,256:70000",
                    help="comma-separated STREAMS:TARGET_CHUNKS_PER_S")
    args = ap.parse_args()
    print(f"{'streams':>7} {'target/s':>9} {'chunks/s':>9} {'sim CPU':>8} {'us/chunk':>9} "
          f"{'lag p50':>8} {'lag p99':>8} {'lag max':>8}")
    for point in args.points.split(","):
        streams, target = (int(x) for x in point.split(":"))
        r = run_point(streams, target, args.seconds)
        print(f"{r['streams']:>7} {r['target']:>9.0f} {r['chunks_per_s']:>9.0f} {r['cpu_share']:>7.0%} "
              f"{r['cpu_us_per_chunk']:>9.1f} {r['lag_p50_ms']:>6.2f}ms {r['lag_p99_ms']:>6.2f}ms "
              f"{r['lag_max_ms']:>6.2f}ms", flush=True)


if __name__ == "__main__":
    main()
