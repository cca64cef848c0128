"""The same live measurements as OpenTelemetry metrics, with Locust's own `--otel`.

Locust's `--otel` sets up the OpenTelemetry SDK from the standard `OTEL_*` environment variables
(exporter, endpoint, protocol, export interval) and exports its own `locust.client.duration` and
`locust.users.count`. This adds, on the coordinating process, one set of instruments fed by each
measured record (`loadlib.events.record`, the figures of `metrics_export.figures_of`), named after
the OpenTelemetry GenAI semantic conventions where one exists and `uni_locust.*` where none does.
Attributes: `gen_ai.operation.name` ("chat"), `gen_ai.request.model` (when the run has one model),
`uni_locust.name`, `uni_locust.cell`, `uni_locust.target`, `uni_locust.run`, and `error.type` (the
failure's kind) on a failed request's duration.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from locust.env import Environment

from loadlib.hooks import events
from loadlib.run.inputs import usage_error
from loadlib.run.metrics_export import GAP_BUCKETS, SECONDS_BUCKETS, TPS_BUCKETS, RunNow, figures_of, live_state
from loadlib.scenarios.base import stats_name

METER = "uni-locust"
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)  # the conventions' advice


class OtelMetrics:
    """The instruments, made once per process from the global meter provider Locust set up."""

    def __init__(self, live: Callable[[], Any]) -> None:
        from opentelemetry import metrics

        meter = metrics.get_meter(METER)
        hist = meter.create_histogram
        self.duration = hist("gen_ai.client.operation.duration", unit="s", description="GenAI operation duration "
                             "(send to end of stream)", explicit_bucket_boundaries_advisory=list(SECONDS_BUCKETS))
        self.token_usage = hist("gen_ai.client.token.usage", unit="{token}", description="Number of input and "
                                "output tokens used", explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS))
        self.ttft = hist("gen_ai.server.time_to_first_token", unit="s", description="Time to first token, "
                         "measured at the client", explicit_bucket_boundaries_advisory=list(SECONDS_BUCKETS))
        self.tpot = hist("gen_ai.server.time_per_output_token", unit="s", description="Time per output token "
                         "after the first, measured at the client: 1 / decode rate",
                         explicit_bucket_boundaries_advisory=list(GAP_BUCKETS))
        self.ttfo = hist("uni_locust.time_to_first_answer_token", unit="s", description="Time to the first "
                         "answer token after the reasoning", explicit_bucket_boundaries_advisory=list(SECONDS_BUCKETS))
        self.gap = hist("uni_locust.chunk_gap", unit="s", description="Mean time between a stream's chunks "
                        "after the first", explicit_bucket_boundaries_advisory=list(GAP_BUCKETS))
        self.decode = hist("uni_locust.decode_rate", unit="{token}/s", description="Decode rate per stream",
                           explicit_bucket_boundaries_advisory=list(TPS_BUCKETS))
        self.requests = meter.create_counter("uni_locust.requests", unit="{request}",
                                             description="Measured requests, by outcome")
        self.tokens = meter.create_counter("uni_locust.tokens", unit="{token}",
                                           description="Cached and reasoning tokens the server's usage reported; an agent "
                                           "session's ideal cached tokens (an infinite prefix cache)")
        self.live = live
        meter.create_observable_gauge("uni_locust.streams_in_flight", [self._in_flight], unit="{request}",
                                      description="Requests being sent and read now")
        meter.create_observable_gauge("uni_locust.workers", [self._workers], unit="{worker}",
                                      description="Locust workers alive (distributed runs)")

    def observe(self, record: dict[str, Any], run: str, model: str) -> None:
        """One finished request (unmeasured ones are left out)."""
        if not record.get("measured", True):
            return
        attrs = {"gen_ai.operation.name": "chat", "uni_locust.name": stats_name(record["case"], record["cell"],
                 record["scenario"]), "uni_locust.cell": record["cell"], "uni_locust.target": record.get("target", ""),
                 "uni_locust.run": run}
        if model:
            attrs["gen_ai.request.model"] = model
        figures = figures_of(record)
        self.requests.add(1, {**attrs, "uni_locust.outcome": "ok" if figures.ok else "failed"})
        if record.get("total_s") is not None:
            self.duration.record(record["total_s"], attrs if figures.ok else {**attrs, "error.type": figures.reason})
        prompt, completion, cached, reasoning, ideal = figures.tokens
        for kind, count in (("input", prompt), ("output", completion)):
            if count is not None:
                self.token_usage.record(count, {**attrs, "gen_ai.token.type": kind})
        for kind, count in (("cached", cached), ("reasoning", reasoning), ("ideal_cached", ideal)):
            if count:
                self.tokens.add(count, {**attrs, "uni_locust.token.type": kind})
        if not figures.ok:
            return
        for histogram, value in ((self.ttft, figures.ttft_s), (self.ttfo, figures.ttfo_s),
                                 (self.gap, figures.chunk_gap_s), (self.decode, figures.decode_tps)):
            if value is not None:
                histogram.record(value, attrs)
        if figures.decode_tps:
            self.tpot.record(1.0 / figures.decode_tps, attrs)

    def _in_flight(self, _options: Any) -> list[Any]:
        from opentelemetry.metrics import Observation

        state = self.live()
        return [] if state is None else [Observation(state.streams_in_flight, {"uni_locust.run": state.run})]

    def _workers(self, _options: Any) -> list[Any]:
        from opentelemetry.metrics import Observation

        state = self.live()
        if state is None or state.workers is None:
            return []
        return [Observation(state.workers, {"uni_locust.run": state.run})]


def refuse_missing_exporter() -> None:
    """Locust's `--otel` exports over OTLP/gRPC unless told otherwise, and only logs a warning
    when that exporter is not installed: nothing would leave. Refused in one line instead."""
    exporters = os.getenv("OTEL_METRICS_EXPORTER", "otlp").lower()
    protocol = os.getenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", os.getenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"))
    if "otlp" not in exporters or protocol.strip().lower() != "grpc":
        return
    try:
        import opentelemetry.exporter.otlp.proto.grpc.metric_exporter  # noqa: F401
    except ImportError:
        usage_error("--otel: OTLP over gRPC needs opentelemetry-exporter-otlp-proto-grpc; set "
                    "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf (installed) or install it")


def install(environment: Environment, session_of: Callable[[], RunNow | None]) -> OtelMetrics | None:
    """With `--otel`, on the coordinating process: the instruments and their listener on every
    record; the last figures are flushed when Locust quits."""
    if not getattr(environment.parsed_options, "otel", False):
        return None
    refuse_missing_exporter()
    otel = OtelMetrics(lambda: live_state(environment, session_of()))

    def on_record(record: dict[str, Any], **_: Any) -> None:
        session = session_of()
        otel.observe(record, session.run_dir.name, session.config.settings.model if session.config else "")

    events.record.add_listener(on_record)
    environment.events.quitting.add_listener(lambda **_: _flush())
    return otel


def _flush() -> None:
    from opentelemetry import metrics

    provider = metrics.get_meter_provider()
    if hasattr(provider, "force_flush"):
        provider.force_flush(timeout_millis=5000)
