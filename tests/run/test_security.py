"""No secret leaks, TLS is verified unless the user says otherwise, the simulator stays local.

The leak tests run with a known API key (on the command line, and in OPENAI_API_KEY) against a
server that echoes it back in its auth errors, then search every file the run wrote, everything
Locust printed, and every page of the web UI for it.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import gevent.ssl
import psutil
import pytest

from loadlib.wire.client import ChatClient, ChatSettings
from tests.conftest import LOCUSTFILE, free_port, run_locust
from tests.wire.test_robustness_faults import COMPLETION_TOKENS, MODEL, FaultServer, send

QUIET = ["--headless", "--loglevel", "DEBUG"]  # the most talkative logs must not leak either
FLAG_KEY = "sk-flag-3c9e7a21d05b4f68"
ENV_KEY = "sk-env-8d1f2b6e94c07a35"


def files_containing(root: Path, secret: str) -> list[Path]:
    needle = secret.encode()
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def plan_args(server: FaultServer, run_dir: Path) -> list[str]:
    return ["-u", "2", "--rounds", "1", "--scenarios", "code", "--concurrency", "2", "--host", server.url,
            "--model", MODEL, "--run-dir", str(run_dir)]


@pytest.mark.processes
def test_the_api_key_from_the_command_line_reaches_the_server_and_no_output(tmp_path):
    with FaultServer(["echoes_the_api_key", "normal"]) as server:
        run_dir = tmp_path / "r"
        result = run_locust([*QUIET, *plan_args(server, run_dir), "--api-key", FLAG_KEY,
                             "--csv", str(tmp_path / "locust"), "--html", str(tmp_path / "report.html"),
                             "--logfile", str(tmp_path / "locust.log")], cwd=tmp_path,
                            env=dict(os.environ, OPENAI_API_KEY=ENV_KEY))
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert server.authorizations and set(server.authorizations) == {f"Bearer {FLAG_KEY}"}  # the flag wins
    written = {p.name for p in tmp_path.rglob("*") if p.is_file()}
    assert {"records.jsonl", "manifest.json", "summary.txt", "locust_stats.csv", "locust_failures.csv",
            "report.html", "locust.log"} <= written
    assert "http 401: Invalid API key: ***" in (run_dir / "records.jsonl").read_text()
    report = subprocess.run([sys.executable, "-m", "analysis", "report", str(run_dir)], capture_output=True,
                            text=True, timeout=60)
    for secret in (FLAG_KEY, ENV_KEY):
        assert files_containing(tmp_path, secret) == []
        assert secret not in result.stdout + result.stderr + report.stdout + report.stderr


@pytest.mark.processes
def test_the_api_key_from_the_environment_never_shows_in_the_web_ui(tmp_path):
    port = free_port()
    run_dir = tmp_path / "r"
    with FaultServer(["echoes_the_api_key", "normal"]) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--loglevel", "DEBUG", "--autostart",
             "--web-host", "127.0.0.1", "--web-port", str(port), *plan_args(server, run_dir)],
            cwd=tmp_path, env=dict(os.environ, OPENAI_API_KEY=ENV_KEY),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while not (run_dir / "summary.txt").exists():
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
                time.sleep(0.1)
            pages = {path: _get(f"http://127.0.0.1:{port}{path}") for path in (
                "/", "/stats/requests", "/stats/report", "/stats/report?download=1", "/stats/requests/csv",
                "/stats/requests_full_history/csv", "/stats/failures/csv", "/exceptions", "/exceptions/csv",
                "/logs", "/tasks", "/uni/", "/uni/figures.json", "/uni/records.csv", "/uni/report")}
        finally:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
    assert server.authorizations and set(server.authorizations) == {f"Bearer {ENV_KEY}"}
    assert pages["/"][0] == 200 and pages["/stats/failures/csv"][0] == 200
    assert "Invalid API key: ***" in pages["/stats/failures/csv"][1]  # the echoed error, redacted
    for path, (_status, body) in pages.items():
        assert ENV_KEY not in body, path
    assert ENV_KEY not in out + err
    assert files_containing(tmp_path, ENV_KEY) == []


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


# --- TLS ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def self_signed(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (and its key), made with `cryptography`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "uni-locust test server")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


@pytest.fixture
def tls_server(self_signed):
    context = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # gevent's: the handshake must not block
    context.load_cert_chain(*self_signed)
    with FaultServer(["normal"], tls=context) as server:
        yield server


def test_tls_certificates_are_verified_by_default(tls_server):
    client = ChatClient(tls_server.url, ChatSettings(model=MODEL, timeout_s=2.0))
    try:
        record = send(client, "r1")
    finally:
        client.close()
    assert record.error.startswith(f"TLS to 127.0.0.1:{tls_server.port}: [SSL: CERTIFICATE_VERIFY_FAILED]")


def test_a_trusted_certificate_passes_verification(tls_server, self_signed, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(self_signed[0]))  # trust exactly this certificate
    client = ChatClient(tls_server.url, ChatSettings(model=MODEL, timeout_s=2.0))
    try:
        record = send(client, "r1")
    finally:
        client.close()
    assert record.error is None and record.completion_tokens == COMPLETION_TOKENS


def test_insecure_skips_verification(tls_server):
    client = ChatClient(tls_server.url, ChatSettings(model=MODEL, timeout_s=2.0, verify_tls=False))
    try:
        record = send(client, "r1")
    finally:
        client.close()
    assert record.error is None and record.completion_tokens == COMPLETION_TOKENS


@pytest.mark.processes
def test_a_run_against_an_untrusted_certificate_fails_every_request_with_the_reason(tls_server, tmp_path):
    result = run_locust(["--headless", *plan_args(tls_server, tmp_path / "r")], cwd=tmp_path)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "CERTIFICATE_VERIFY_FAILED" in result.stdout  # the summary's failure table
    assert "5 requests, 5 failed" in (tmp_path / "r" / "summary.txt").read_text()


@pytest.mark.processes
def test_insecure_run_succeeds_and_warns(tls_server, tmp_path):
    result = run_locust(["--headless", *plan_args(tls_server, tmp_path / "r"), "--insecure"], cwd=tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "5 requests, 0 failed" in (tmp_path / "r" / "summary.txt").read_text()
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line and "--insecure" in line]
    assert warnings and "not verified" in warnings[0]


# --- the simulator stays on this machine ---------------------------------------------------------------

@pytest.mark.processes
def test_the_simulator_binds_loopback_unless_told_otherwise():
    from loadlib.sim.process import start_simulator

    sim = start_simulator(["--time-scale", "0.05", "--instances", "2"])
    try:
        listening = [c.laddr for c in psutil.Process(sim.pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN]
    finally:
        sim.stop()
    assert len(listening) == 2 and {addr.ip for addr in listening} == {"127.0.0.1"}
