"""What the target says about itself, read once at the start of a run for the manifest.

Users post the server version and launch flags beside every result; reading them from the
server (each flavour's info endpoint in `loadlib/wire/flavours.py`: SGLang's /get_server_info,
vLLM's /version, llama.cpp's /props; and /v1/models) makes them exact. An endpoint the server
does not offer is recorded as missing, not raised. Secrets never reach a file: the API key in
use and every field named like a key, token or password are replaced by "***" (SGLang's server
args include its own `api_key`).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from loadlib.wire.connection import Connection, Endpoint, TransportError
from loadlib.wire.flavours import EFFECTIVE_MAX_RUNNING, FLAVOURS, LLAMACPP, SGLANG, Flavour

SERVER_INFO_FILE = "server_info.json"
MODELS_PATH = "/v1/models"  # every OpenAI-compatible server
# Each group is one piece of information; its paths are tried in order until one answers:
# each flavour's own info endpoint and the others it offers, then the model list.
PROBES = (*(group for f in FLAVOURS.values() for group in (f.probes.info_paths, *f.probes.more_paths)),
          (MODELS_PATH,))
# The launch flags users post beside their numbers (SGLang server-arg names).
LAUNCH_FLAGS = (
    "model_path", "served_model_name", "tp_size", "dp_size", "context_length", "quantization",
    "kv_cache_dtype", "mem_fraction_static", "max_running_requests", "chunked_prefill_size",
    "max_prefill_tokens", "page_size", "disable_radix_cache", "enable_hierarchical_cache",
    "enable_cache_report", "stream_interval", "attention_backend", "speculative_algorithm",
    "speculative_draft_model_path", "speculative_num_draft_tokens", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_dflash_block_size",
    "decode_log_interval",  # how often its running/queued/accept-length gauges are set
)
REDACTED = "***"
_SECRET_NAME = re.compile(r"api_?key|secret|passw(or)?d|credential|(^|_)token$", re.IGNORECASE)


def probe_server(base_url: str, api_key: str | None = None, verify_tls: bool = True,
                 timeout_s: float = 5.0) -> tuple[dict[str, Any], dict[str, Any]]:
    """Asks the target what it is: (summary for the manifest, redacted response bodies by path).

    The summary holds `kind` (sglang, sglang-router, vllm, llama.cpp or unknown), `version`,
    `launch` (the flags in `LAUNCH_FLAGS` that the server reports) and `endpoints` (path -> "ok"
    or why it is missing). Once the host cannot be reached, the remaining paths are not tried.
    """
    connection = Connection(Endpoint.parse(base_url), timeout=timeout_s, verify_tls=verify_tls,
                            connect_timeout=min(timeout_s, 3.0))
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    endpoints: dict[str, str] = {}
    bodies: dict[str, Any] = {}
    unreachable = None
    try:
        for group in PROBES:
            for path in group:
                if unreachable:
                    endpoints[path] = f"not tried: {unreachable}"
                    continue
                try:
                    body, reason = _get_json(connection, path, headers)
                except TransportError as exc:
                    unreachable = str(exc)
                    endpoints[path] = unreachable
                    continue
                endpoints[path] = reason or "ok"
                if reason is None:
                    bodies[path] = redact(body, api_key)
                    break
    finally:
        connection.close()
    summary = {"kind": server_kind(bodies), "version": server_version(bodies),
               "launch": launch_flags(bodies), "endpoints": endpoints}
    return summary, bodies


def _get_json(connection: Connection, path: str, headers: dict[str, str]) -> tuple[Any, str | None]:
    """(JSON body, None) for a 200 with JSON, else (None, why the path counts as missing)."""
    response = connection.request("GET", path, headers=headers)
    if response.status != 200:
        return None, f"missing (HTTP {response.status})"
    if response.error:
        return None, f"missing ({response.error})"
    try:
        return orjson.loads(response.body), None
    except orjson.JSONDecodeError:
        return None, "missing (not JSON)"


def redact(value: Any, api_key: str | None = None) -> Any:
    """A copy of a JSON value with secret-named fields and the API key itself replaced by ***."""
    if isinstance(value, dict):
        return {k: REDACTED if _SECRET_NAME.search(str(k)) and v not in (None, "", False)
                else redact(v, api_key) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, api_key) for v in value]
    if isinstance(value, str) and api_key and api_key in value:
        return value.replace(api_key, REDACTED)
    return value


def server_kind(bodies: dict[str, Any]) -> str:
    """sglang, sglang-router, vllm, llama.cpp or unknown, from what the server answered.

    A flavour whose info body has marks of its own is asked before one that any JSON object at
    its info path identifies; without an info endpoint, the models' `owned_by` decides."""
    for flavour in sorted(FLAVOURS.values(), key=lambda f: not f.probes.marks):
        probes, info = flavour.probes, _info(bodies, flavour)
        if probes.router_kind and any(mark in info for mark in probes.router_marks):
            return probes.router_kind
        if any(mark in info for mark in probes.marks) or (not probes.marks and _answered(bodies, flavour)):
            return probes.kind
    owners = {m.get("owned_by") for m in _models(bodies)}
    for flavour in FLAVOURS.values():
        if flavour.probes.owned_by in owners:
            return flavour.probes.kind
    return "unknown"


def server_version(bodies: dict[str, Any]) -> str | None:
    """The version (or build) the first flavour's info endpoint gives."""
    for flavour in FLAVOURS.values():
        for path in flavour.probes.info_paths:
            body = bodies.get(path)
            if isinstance(body, dict) and body.get(flavour.probes.version_field):
                return str(body[flavour.probes.version_field])
    return None


def launch_flags(bodies: dict[str, Any]) -> dict[str, Any]:
    """The launch flags users post (SGLang's server args, llama.cpp's slots and context)."""
    info = _info(bodies, SGLANG)
    flags = {name: info[name] for name in LAUNCH_FLAGS if name in info}
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict) and states[0].get(EFFECTIVE_MAX_RUNNING):
        flags[EFFECTIVE_MAX_RUNNING] = states[0][EFFECTIVE_MAX_RUNNING]
    props = _info(bodies, LLAMACPP)
    settings = props.get("default_generation_settings") or {}
    for name, value in (("total_slots", props.get("total_slots")),
                        ("n_ctx", settings.get("n_ctx") if isinstance(settings, dict) else None),
                        ("model_path", props.get("model_path"))):
        if value is not None:
            flags.setdefault(name, value)
    return flags


def _info(bodies: dict[str, Any], flavour: Flavour) -> dict[str, Any]:
    """The flavour's info body, {} when it did not answer with a JSON object."""
    info = next((bodies[p] for p in flavour.probes.info_paths if bodies.get(p)), {})
    return info if isinstance(info, dict) else {}


def _answered(bodies: dict[str, Any], flavour: Flavour) -> bool:
    return any(isinstance(bodies.get(p), dict) for p in flavour.probes.info_paths)


def _models(bodies: dict[str, Any]) -> list[dict[str, Any]]:
    models = bodies.get(MODELS_PATH)
    data = models.get("data") if isinstance(models, dict) else None
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []
