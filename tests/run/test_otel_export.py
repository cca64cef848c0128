"""`--otel`: the run's measurements leave as OpenTelemetry metrics over OTLP/HTTP, received here by
a real OTLP endpoint that decodes the protocol's protobuf, and checked against the records."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from loadlib.records import read_records
from tests.conftest import FAST_SIM, served
from tests.run.test_lost_workers import OWN_LOCUSTFILE

pytestmark = pytest.mark.processes
metrics_service = pytest.importorskip("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")



class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP metrics endpoint on loopback: keeps each decoded ExportMetricsServiceRequest."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[Any] = []


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/metrics":
            request = metrics_service.ExportMetricsServiceRequest()
            request.ParseFromString(body)
            self.server.requests.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with served(Receiver()) as server:
        yield server


def otel_env(endpoint: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_TRACES_EXPORTER="none", OTEL_LOGS_EXPORTER="none", OTEL_METRIC_EXPORT_INTERVAL="1000")
    if endpoint:
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf")
    return env


def last_points(requests: list[Any], uni_locust_only: bool = True) -> dict[str, list[Any]]:
    """Each metric's data points in the last export that held it (cumulative: the run's totals)."""
    points: dict[str, list[Any]] = {}
    for request in requests:
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                if uni_locust_only and scope.scope.name != "uni-locust":
                    continue
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    points[metric.name] = list(getattr(metric, kind).data_points)
    return points


def attrs(point: Any) -> dict[str, Any]:
    return {kv.key: kv.value.string_value for kv in point.attributes}


def test_otel_metrics_reach_an_otlp_endpoint_named_by_the_genai_conventions_and_match_the_records(tmp_path, receiver):
    (tmp_path / "own.py").write_text(OWN_LOCUSTFILE)
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "locust", "-f", "own.py", "--headless", "-u", "2", "-r", "2",
                           "-t", "4s", "--otel", "--sim-args", FAST_SIM, "--loglevel", "WARNING",
                           "--run-dir", str(run_dir)], cwd=tmp_path, capture_output=True, text=True, timeout=90,
                          env=otel_env(f"http://127.0.0.1:{receiver.server_address[1]}"))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    records = [r for r in read_records(run_dir) if r["measured"]]
    assert len(records) > 10 and len(receiver.requests) >= 2  # periodic exports, then the final flush
    points = last_points(receiver.requests)
    assert {"gen_ai.client.operation.duration", "gen_ai.client.token.usage", "gen_ai.server.time_to_first_token",
            "gen_ai.server.time_per_output_token", "uni_locust.chunk_gap", "uni_locust.decode_rate",
            "uni_locust.requests"} <= set(points), sorted(points)

    [duration] = points["gen_ai.client.operation.duration"]
    assert attrs(duration)["gen_ai.operation.name"] == "chat" and attrs(duration)["uni_locust.run"] == run_dir.name
    assert attrs(duration)["uni_locust.name"] == "prime" and attrs(duration)["gen_ai.request.model"]
    assert duration.count == len(records)
    assert duration.sum == pytest.approx(sum(r["total_s"] for r in records), rel=1e-6)
    usage = {attrs(p)["gen_ai.token.type"]: p for p in points["gen_ai.client.token.usage"]}
    assert usage["output"].sum == sum(r["completion_tokens"] for r in records)
    assert usage["input"].sum == sum(r["prompt_tokens"] for r in records)
    [ttft] = points["gen_ai.server.time_to_first_token"]
    assert ttft.count == len(records) and ttft.sum == pytest.approx(sum(r["ttft_s"] for r in records), rel=1e-6)
    assert sum(p.as_int for p in points["uni_locust.requests"]) == len(records)
    locust_own = last_points(receiver.requests, uni_locust_only=False)
    assert "locust.client.duration" in locust_own  # Locust's own --otel metrics still leave beside ours


def test_otel_over_grpc_without_its_exporter_is_refused_in_one_line(tmp_path):
    if importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is not None:
        pytest.skip("the gRPC exporter is installed: --otel works over gRPC")
    (tmp_path / "own.py").write_text(OWN_LOCUSTFILE)
    proc = subprocess.run([sys.executable, "-m", "locust", "-f", "own.py", "--headless", "-t", "2s", "--otel",
                           "--host", "http://127.0.0.1:9"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env=otel_env(None))
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf" in errors[0], \
        proc.stderr[-2000:]
