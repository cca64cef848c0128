"""What the live metrics cost the client: CPU seconds per request with them off, with
`--metrics-port` (scraped once a second, as Prometheus would) and with `--metrics-port --otel`
(exported over OTLP/HTTP to a loopback receiver every second), at 64 streams.

    python benchmarks/metrics_overhead.py [--streams 64] [--seconds 20] [--repeats 2]

Each configuration is one Locust process (64 users sending back to back) against the same
simulator; the runs alternate (off, on, on+otel, off, ...) so that the machine's drift hits all
alike. The client's CPU is the Locust process's own (user + system) over the run's steady middle
(start-up imports left out), divided by the requests that ended in it. Target: on costs under 2 %
more per request. A shared machine's noise is several per cent: compare with --repeats 3 or more.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import orjson
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from loadlib.figures.verdicts import t_quantile  # noqa: E402
from loadlib.sim.process import start_simulator  # noqa: E402

LOCUSTFILE = '''
from locust import constant, task
from loadlib import LLMUser


class Chat(LLMUser):
    wait_time = constant(0)

    @task
    def ask(self):
        self.chat([{"role": "user", "content": "Write a long story about a lighthouse."}], name="story",
                  max_tokens=256)
'''


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scrape_every_second(url: str, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        try:
            urllib.request.urlopen(url, timeout=1).read()
        except OSError:
            pass


def journal_lines(run_dir: Path) -> int:
    path = run_dir / "records.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def run(config: str, host: str, streams: int, seconds: int, otlp: str, work: Path) -> tuple[float, int, float]:
    """One Locust run; (client CPU seconds, requests ended, seconds) over its steady middle: from
    3 s after the first record to 2 s before its end, so that start-up (imports) is left out."""
    run_dir = work / f"{config}-{time.monotonic_ns()}"
    args = [sys.executable, "-m", "locust", "-f", str(work / "bench.py"), "--headless", "-u", str(streams),
            "-r", str(streams), "-t", f"{seconds}s", "--host", host, "--loglevel", "ERROR", "--run-dir", str(run_dir)]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}, "OTEL_TRACES_EXPORTER": "none",
           "OTEL_LOGS_EXPORTER": "none", "OTEL_METRIC_EXPORT_INTERVAL": "1000", "OTEL_EXPORTER_OTLP_ENDPOINT": otlp,
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    stop, scraper = threading.Event(), None
    if config != "off":
        port = free_port()
        args += ["--metrics-port", str(port)]
        scraper = threading.Thread(target=scrape_every_second, args=(f"http://127.0.0.1:{port}/metrics", stop))
        scraper.start()
    if config == "on+otel":
        args.append("--otel")
    proc = subprocess.Popen(args, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = psutil.Process(proc.pid)
        deadline = time.monotonic() + 30
        while not journal_lines(run_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        started = time.monotonic()
        time.sleep(3)
        cpu0, n0, t0 = sum(client.cpu_times()[:2]), journal_lines(run_dir), time.monotonic()
        time.sleep(max(1.0, seconds - 5 - (time.monotonic() - started)))
        cpu1, n1, t1 = sum(client.cpu_times()[:2]), journal_lines(run_dir), time.monotonic()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop.set()
        if scraper is not None:
            scraper.join()
    return cpu1 - cpu0, n1 - n0, t1 - t0


def accounted(journal: Path, scrape_every_s: float = 1.0) -> tuple[float, float, int]:
    """The exporter's own cost, timed in this process on a run's real records: (microseconds per
    record: parsing its journal line and observing it; milliseconds per scrape of the page they
    make; records). Between-run noise on a shared machine is several per cent; this is not."""
    from prometheus_client import generate_latest

    from loadlib.run.metrics_export import RunMetrics

    lines = journal.read_bytes().splitlines()
    metrics = RunMetrics(lambda: None)
    start = time.process_time()
    for line in lines:
        metrics.observe(orjson.loads(line), "run")
    per_record = (time.process_time() - start) / max(len(lines), 1)
    start = time.process_time()
    for _ in range(20):
        generate_latest(metrics.registry)
    return per_record * 1e6, (time.process_time() - start) / 20 * 1e3, len(lines)


def paired_change(on: list[float], off: list[float]) -> str:
    """The mean of each repeat's on/off ratio with its 95 % t interval: runs side by side in time
    share the machine's drift, so their ratio is the comparison that noise disturbs least."""
    ratios = np.array(on) / np.array(off) - 1
    if len(ratios) < 2:
        return f"{100 * ratios.mean():+.1f}% (one repeat: no interval)"
    half = t_quantile(0.975, len(ratios) - 1) * ratios.std(ddof=1) / np.sqrt(len(ratios))
    low, high = ratios.mean() - half, ratios.mean() + half
    within = "not distinguishable from off" if low <= 0 <= high else "distinguishable from off"
    return (f"{100 * ratios.mean():+.1f}%, 95% CI {100 * low:+.1f}% to {100 * high:+.1f}% "
            f"over {len(ratios)} repeats ({within})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--account", metavar="JOURNAL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.account:
        print(*accounted(Path(args.account)))
        return
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    otlp = f"http://127.0.0.1:{receiver.server_address[1]}"
    totals: dict[str, list[float]] = {"off": [0.0, 0, 0.0], "on": [0.0, 0, 0.0], "on+otel": [0.0, 0, 0.0]}
    per_repeat: dict[str, list[float]] = {config: [] for config in totals}  # ms/request, one per repeat
    with tempfile.TemporaryDirectory() as tmp, \
            start_simulator(["--time-scale", "0.05", "--max-running-requests", str(args.streams)]) as sim:
        work = Path(tmp)
        (work / "bench.py").write_text(LOCUSTFILE)
        for repeat in range(args.repeats):
            for config in totals:
                cpu, requests, seconds = run(config, sim.url, args.streams, args.seconds, otlp, work)
                totals[config][0] += cpu
                totals[config][1] += requests
                totals[config][2] += seconds
                per_repeat[config].append(cpu / max(requests, 1))
                print(f"  run {repeat + 1} {config:8s} CPU {cpu:6.2f} s over {seconds:4.1f} s, requests {requests:6d}, "
                      f"{1000 * cpu / max(requests, 1):.3f} ms/request", flush=True)
        journal = max(work.glob("on-*/records.jsonl"), key=lambda p: p.stat().st_size)
        # in a process of its own: the exporter imports Locust, which patches threads this one runs
        timed = subprocess.run([sys.executable, __file__, "--account", str(journal)], capture_output=True, text=True,
                               check=True).stdout.split()
        record_us, scrape_ms, records = float(timed[0]), float(timed[1]), int(timed[2])
    receiver.shutdown()
    base = totals["off"][0] / max(totals["off"][1], 1)
    print(f"\n{args.streams} streams, {args.repeats} x {args.seconds} s each (steady part measured)")
    print(f"  {'config':8s} {'CPU s':>8s} {'CPU %':>6s} {'requests':>9s} {'ms/request':>11s} {'vs off':>8s}")
    for config, (cpu, requests, seconds) in totals.items():
        per = cpu / max(requests, 1)
        print(f"  {config:8s} {cpu:8.2f} {100 * cpu / seconds:6.1f} {requests:9d} {1000 * per:11.3f} "
              f"{100 * (per / base - 1):+7.1f}%")
    for config in ("on", "on+otel"):
        print(f"  {config} vs off, paired by repeat: {paired_change(per_repeat[config], per_repeat['off'])}")
    rate = totals["off"][1] / max(totals["off"][2], 1e-9)  # requests per second
    cost = record_us / 1e6 + scrape_ms / 1e3 / rate  # the exporter's seconds per request, one scrape a second
    print(f"\naccounted (timed in-process on {records} real records): {record_us:.1f} us per record, "
          f"{scrape_ms:.2f} ms per scrape; at {rate:.0f} requests/s and a scrape a second that is "
          f"{100 * cost / base:.2f} % of the client's CPU per request (target < 2 %)")


if __name__ == "__main__":
    main()
