"""One cell's requests as other tools count them, for the exports (`loadlib.outputs.vllm`,
`loadlib.outputs.llmd`): per-request latencies and lengths, the cell's window, its rates, and the
distribution of each (mean, spread, percentiles from the raw records).

A cell's window runs from its first send to its last end (what `vllm bench serve` calls its
duration), so its rates are whole-cell figures, warm-up and tail included; the steady-state and
round figures of the summary are other definitions. Time per output token is `1 / decode` (the
summary's decode, `formulas.decode_tps`); the gaps between stream chunks are those the client
measured where the record keeps them (a run with `--chunk-times`: `chunk_gaps_ms`), else the
request's mean gap (`formulas.chunk_gap_s`) repeated, whose mean is exact but whose spread is the
spread between requests, not within one (`gaps_measured` says which).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

import numpy as np
import pandas as pd

from loadlib.figures.columns import isin
from loadlib.figures.formulas import chunk_gap_s
from loadlib.figures.protocol_tables import CONCURRENT_CASES, cell_order
from loadlib.records import chunk_gaps_s
from loadlib.scenarios.base import SINGLE

PERCENTILES = (0.1, 1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9)  # those llm-d reads of a vLLM result


def distribution(values: np.ndarray) -> dict[str, float] | None:
    """mean, std (population, as numpy's), min, max and each of `PERCENTILES` (linear
    interpolation, as numpy's) of the values that are numbers, keyed "mean", "std", "min", "max",
    and the percentile itself ("50", "99.9"); None where there is none."""
    values = np.asarray(values, dtype="float64")
    values = values[np.isfinite(values)]
    if not len(values):
        return None
    found = {"mean": float(values.mean()), "std": float(values.std()), "min": float(values.min()),
             "max": float(values.max())}
    found.update({f"{p:g}": float(v) for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES))})
    return found


@dataclass(frozen=True)
class CellRequests:
    """One cell's measured records (failed ones included) in send order, and what the exports say
    of them."""

    name: str
    records: pd.DataFrame  # `loadlib.record_table.records_frame`'s rows of the cell

    @cached_property
    def ok(self) -> pd.DataFrame:
        return self.records[self.records["ok"]]

    @property
    def completed(self) -> int:
        return len(self.ok)

    @property
    def failed(self) -> int:
        return len(self.records) - self.completed

    @cached_property
    def started_at(self) -> float:
        return float(self.records["sent_at"].min())

    @cached_property
    def ended_at(self) -> float:
        """The last end of a request, or the last send where none ended."""
        return float(np.nanmax([self.records["end_at"].max(), self.records["sent_at"].max()]))

    @property
    def duration_s(self) -> float:
        return self.ended_at - self.started_at

    def per_second(self, count: float) -> float | None:
        return count / self.duration_s if self.duration_s > 0 else None

    @cached_property
    def input_tokens(self) -> int:
        return int(self.ok["prompt_tokens"].fillna(0).sum())

    @cached_property
    def output_tokens(self) -> int:
        return int(self.ok["completion_tokens"].fillna(0).sum())

    @property
    def tpot_s(self) -> np.ndarray:
        """Per successful request of more than one token, seconds per token after the first."""
        return 1.0 / self.ok["decode_tps"].to_numpy(dtype="float64")

    @property
    def ntpot_s(self) -> np.ndarray:
        """Per successful request, its whole time per output token (llm-d's NTPOT): 1 / end-to-end t/s."""
        return 1.0 / self.ok["e2e_tps"].to_numpy(dtype="float64")

    @cached_property
    def chunk_gaps_s(self) -> list[list[float]]:
        """Per request (failed ones: none), its gaps between chunks after the first: those measured
        where its record keeps them, else its mean gap (`formulas.chunk_gap_s`) once per gap."""
        gaps = []
        for ok, ttft, last, chunks, measured in zip(self.records["ok"], self.records["ttft_s"],
                                                    self.records["last_chunk_s"], self.records["chunks"],
                                                    self.records["chunk_gaps_ms"]):
            if ok and isinstance(measured, str):
                gaps.append(chunk_gaps_s(measured))
                continue
            gap = chunk_gap_s(ttft, last, int(chunks)) if ok and np.isfinite(last) else None
            gaps.append([gap] * (int(chunks) - 1) if gap is not None else [])
        return gaps

    @cached_property
    def gaps_measured(self) -> tuple[int, int]:
        """(successful requests whose chunk gaps were measured, successful requests)."""
        return int(self.ok["chunk_gaps_ms"].notna().sum()), self.completed

    @cached_property
    def most_in_flight(self) -> int:
        """The most successful requests in flight at once (sends and ends as half-open intervals)."""
        times = np.concatenate([self.ok["sent_at"].to_numpy(dtype="float64"), self.ok["end_at"].to_numpy(dtype="float64")])
        steps = np.concatenate([np.ones(len(self.ok)), -np.ones(len(self.ok))])
        order = np.lexsort((steps, times))  # an end before a send at the same instant
        return int(np.cumsum(steps[order]).max(initial=0))

    @cached_property
    def peak_chunks_per_s(self) -> float:
        """The most chunks that arrived in one second of the window (vLLM's peak output "tokens"
        per second: it counts a chunk as a token), at the chunk times of the gaps above."""
        if not len(self.ok):
            return 0.0
        arrivals = [sent + ttft + np.concatenate(([0.0], np.cumsum(gaps)))
                    for sent, ttft, gaps in zip(self.records["sent_at"], self.records["ttft_s"], self.chunk_gaps_s)
                    if np.isfinite(ttft)]
        seconds = (np.concatenate(arrivals) - self.started_at).astype(int) if arrivals else np.zeros(0, int)
        return float(np.bincount(seconds[seconds >= 0]).max(initial=0))

    def scheduled_rate(self) -> float | None:
        """Arrivals per second of a cell sent on a schedule of arrivals (intended send times, no
        closed loop, not all at once); None for any other."""
        records = self.records
        if (records["closed_loop"].any() or records["scheduled_at"].isna().all()
                or isin(records["case"], (SINGLE, *CONCURRENT_CASES)).any()):  # a round's streams start at once
            return None
        intended = records["scheduled_at"].dropna().to_numpy(dtype="float64")
        span = float(intended.max() - intended.min())
        return (len(intended) - 1) / span if span > 0 and len(np.unique(intended)) == len(intended) else None


def cells(records: pd.DataFrame) -> Iterator[CellRequests]:
    """The records' cells in reading order (`protocol_tables.cell_order`), each in send order."""
    if records.empty:
        return
    for name in cell_order(records):
        rows = records[records["cell"] == name].sort_values("sent_at", kind="stable").reset_index(drop=True)
        yield CellRequests(name, rows)
