"""Runs the uniform protocol against a simulator preset and prints published vs simulated.

The published figures are the seed thread's (applejuice, 2x RTX 3090 without NVLink, tp=2,
DFLASH block 8, thinking off): single-stream decode / TTFT / tok-per-chunk per scenario, the
2-stream code aggregates (same and different prompts), and the cold prefill table; the same and
different aggregates at 4 and 8 streams are printed beside them (the thread has none). With
`--thinking` the decode tables are compared with the same user's thinking-on run instead. Requests are
measured the way the thread's reference script measures them (clock before sending, TTFT at the
first chunk with content, total at `[DONE]`, comp from the usage chunk); simulated durations are
divided by the time scale, so the table is in real seconds.

    python benchmarks/calibrate.py [--preset 3090x2-tp2-dflash] [--time-scale 1]
                                   [--prefill-time-scale 0.2] [--rounds 3] [--thinking]
                                   [--streams 2 4 8] [--no-prefill] [--markdown]
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from loadlib.scenarios.thread import PROTOCOL_PROMPTS, SAME_PROMPT, different_prompts
from loadlib.sim import tokenizer
from loadlib.sim.presets import DEFAULT_PRESET
from loadlib.sim.process import start_simulator

PUBLISHED_SINGLE = {  # scenario: (decode t/s, TTFT s, tok/chunk)
    "code": (246.7, 0.147, 6.32), "en_tech": (140.8, 0.134, 3.63),
    "cn_chat": (99.0, 0.134, 2.56), "cn_essay": (61.4, 0.135, 1.60)}
PUBLISHED_PAIR = {"same": 429.7, "different": 402.4}
PUBLISHED_SINGLE_THINKING = {
    "code": (141.1, 0.149, 3.64), "en_tech": (104.0, 0.136, 2.69),
    "cn_chat": (76.8, 0.135, 1.99), "cn_essay": (63.8, 0.137, 1.67)}
PUBLISHED_PAIR_THINKING = {"same": 207.1, "different": 203.9}
PUBLISHED_PREFILL = [(3228, 1.97), (13894, 8.72), (57560, 41.96), (116234, 101.66), (234226, 269.74)]


def stream(url: str, prompt: str, max_tokens: int, scale: float, thinking: bool = False) -> dict:
    """One protocol request; times are divided by `scale` (simulated seconds)."""
    parts = urlsplit(url)
    payload = {"model": "sim", "messages": [{"role": "user", "content": prompt}],
               "max_tokens": max_tokens, "temperature": 0, "stream": True,
               "stream_options": {"include_usage": True},
               "chat_template_kwargs": {"enable_thinking": thinking}}
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=3600)
    t0 = time.time()
    conn.request("POST", "/v1/chat/completions", json.dumps(payload).encode(),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    ttft, chunks, usage = None, 0, None
    for raw in resp:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        event = json.loads(data)
        if event.get("usage"):
            usage = event["usage"]
        delta = (event.get("choices") or [{}])[0].get("delta", {})
        if delta.get("content") or delta.get("reasoning_content"):
            ttft = ttft if ttft is not None else time.time() - t0
            chunks += 1
    total = time.time() - t0
    conn.close()
    comp = usage["completion_tokens"]
    ttft, total = ttft / scale, total / scale
    return {"comp": comp, "prompt": usage["prompt_tokens"], "ttft": ttft, "total": total,
            "decode": (comp - 1) / (total - ttft), "tpc": comp / chunks}


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def prompt_of(tokens: int) -> str:
    """A unique prompt whose chat-templated size is exactly `tokens` simulator tokens."""
    text = f"Session {uuid.uuid4().hex}: summarize the following notes."
    framing = len(tokenizer.encode_chat([{"role": "user", "content": text}], False))
    return text + " lorem" * (tokens - framing)


def measure(url: str, scale: float, rounds: int, max_tokens: int, thinking: bool,
            streams: list[int]) -> list[tuple[str, float | None, float]]:
    single = PUBLISHED_SINGLE_THINKING if thinking else PUBLISHED_SINGLE
    pair = PUBLISHED_PAIR_THINKING if thinking else PUBLISHED_PAIR
    rows = []
    for name, (decode, ttft, tpc) in single.items():
        runs = [stream(url, PROTOCOL_PROMPTS[name], max_tokens, scale, thinking) for _ in range(rounds)]
        rows += [(f"{name} decode t/s", decode, mean([r["decode"] for r in runs])),
                 (f"{name} TTFT s", ttft, mean([r["ttft"] for r in runs])),
                 (f"{name} tok/chunk", tpc, mean([r["tpc"] for r in runs]))]
    for n in streams:
        for case, prompts in (("same", [SAME_PROMPT] * n), ("different", different_prompts(n))):
            aggregates = []
            for _ in range(rounds):
                with ThreadPoolExecutor(n) as pool:
                    runs = list(pool.map(
                        lambda p: stream(url, PROTOCOL_PROMPTS[p], max_tokens, scale, thinking), prompts))
                aggregates.append(sum(r["comp"] - 1 for r in runs) / max(r["total"] - r["ttft"] for r in runs))
            rows.append((f"{n} streams {case} prompt aggregate t/s", pair[case] if n == 2 else None,
                         mean(aggregates)))
    return rows


def measure_prefill(url: str, scale: float) -> list[tuple[str, float, float]]:
    rows = []
    for tokens, ttft in PUBLISHED_PREFILL:
        run = stream(url, prompt_of(tokens), 8, scale)
        rows.append((f"cold prefill {run['prompt']:,} tok TTFT s", ttft, run["ttft"]))
        rows.append((f"cold prefill {run['prompt']:,} tok t/s", tokens / ttft, run["prompt"] / run["ttft"]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default=DEFAULT_PRESET)
    ap.add_argument("--time-scale", type=float, default=1.0, help="for the decode runs")
    ap.add_argument("--prefill-time-scale", type=float, default=0.2, help="for the cold prefill runs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--thinking", action="store_true", help="thinking on (the thread's other table)")
    ap.add_argument("--streams", type=int, nargs="+", default=[2, 4, 8],
                    help="concurrencies of the same/different aggregates (the thread publishes 2)")
    ap.add_argument("--no-prefill", action="store_true", help="skip the cold prefill table")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args()
    sim_args = ["--preset", args.preset, "--time-scale", str(args.time_scale),
                "--max-running-requests", str(max([2, *args.streams]))]
    with start_simulator(sim_args) as sim:
        rows = measure(sim.url, args.time_scale, args.rounds, args.max_tokens, args.thinking, args.streams)
    if not args.no_prefill:
        with start_simulator(["--preset", args.preset, "--time-scale", str(args.prefill_time_scale)]) as sim:
            rows += measure_prefill(sim.url, args.prefill_time_scale)
    if args.markdown:
        print("| figure | published | simulated | error |\n|---|---:|---:|---:|")
    for label, published, simulated in rows:
        if published is None:
            shown, error = "-", "-"
        else:
            shown, error = f"{published:,.3f}", f"{(simulated - published) / published * 100:+.1f}%"
        if args.markdown:
            print(f"| {label} | {shown} | {simulated:,.3f} | {error} |")
        else:
            print(f"{label:<42} {shown:>10} {simulated:>10.3f} {error:>8}")


if __name__ == "__main__":
    main()
