"""`manifest.json`: what was measured, against what, with which settings (never a secret).

Users post their server version, launch flags and client setup beside every result; the
manifest keeps these with the run so that reports and comparisons can show them.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson
import psutil

from loadlib.records import MANIFEST_FILE
from loadlib.run.config import RunConfig
from loadlib.run.inputs import profile_settings

log = logging.getLogger("uni-bench")

_SECRET_FLAGS = ("--api-key",)


def redacted_argv(argv: list[str]) -> list[str]:
    """The command line with the values of secret flags replaced by `***`."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("***")
            hide_next = False
        elif arg in _SECRET_FLAGS:
            out.append(arg)
            hide_next = True
        elif any(arg.startswith(flag + "=") for flag in _SECRET_FLAGS):
            out.append(arg.split("=", 1)[0] + "=***")
        else:
            out.append(arg)
    return out


def build_manifest(config: RunConfig, opts: Any, target: dict[str, Any], plan: list[Any]) -> dict[str, Any]:
    """What the run measures, from its configuration (the request defaults, the profile), the
    options it was started with and the target it sends to."""
    profile = config.profile
    return {
        "tool": {"name": "uni-locust", "version": _version("uni-locust"),
                 "locust": _version("locust"), "python": platform.python_version()},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": redacted_argv(sys.argv),
        "target": target,
        "model": config.settings.model,
        "protocol": {
            "rounds": getattr(profile.load, "rounds", None) if profile is not None else None,
            "max_tokens": config.settings.max_tokens, "temperature": config.settings.temperature,
            "thinking": config.settings.thinking, "spec_details": config.settings.spec_details,
            "chunk_times": config.settings.chunk_times,
            "concurrency": sorted({c.concurrency for c in plan if c.concurrency > 1}),
            "scenarios": (profile_settings(profile)["scenarios"] or []) if profile is not None else [],
            "users": opts.num_users, "processes": getattr(opts, "processes", None), "mode": config.mode,
        },
        "client": client_host(),
    }


def opening_manifest(config: RunConfig, opts: Any, target: dict[str, Any], plan: list[Any],
                     profile_file: str | None, model_warning: str | None) -> dict[str, Any]:
    """The manifest as a test starts: what it measures, the profile it plays, and the load mode's
    findings about its plan (also logged). `ended_at` null marks a test still under way, or killed."""
    manifest = build_manifest(config, opts, target, plan)
    if profile_file and config.profile is not None:
        manifest["profile"] = {"file": profile_file, **config.profile.model_dump(mode="json", by_alias=True)}
    if model_warning:
        manifest["model_warning"] = model_warning
    for key, said in config.load_mode.notes(config.profile, config.context_tokens).items():
        if isinstance(said, str):  # a finding; other notes are figures the report reads
            log.warning("%s", said)
        manifest[key] = said
    manifest["ended_at"] = None
    return manifest


def close_manifest(manifest: dict[str, Any], finished: bool, cut_short: str | None, lost: list[Any],
                   client_watch: list[dict[str, Any]], cache_flushes: dict[str, int],
                   clock_offsets: list[dict[str, Any]] | None = None) -> None:
    """The manifest's end: when, whether the plan was done (and if not, why), the workers lost,
    the client's self-watch, the prefix-cache flushes and the workers' clock offsets."""
    manifest["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    manifest["finished"] = finished
    if cut_short:
        manifest["cut_short"] = cut_short
    if lost:
        manifest["lost_workers"] = [vars(worker) for worker in lost]
    manifest["client_watch"] = client_watch
    if cache_flushes:
        manifest["cache_flushes"] = cache_flushes
    if clock_offsets is not None:
        manifest["clock_offsets"] = clock_offsets


def client_host() -> dict[str, Any]:
    """The load generator's hardware and software, which users post beside their numbers."""
    return {
        "host": platform.node(), "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(), "cpu_model": _cpu_model(),
        "cores": os.cpu_count(), "cores_physical": psutil.cpu_count(logical=False),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(), "locust": _version("locust"),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Writes the manifest whole or not at all (a process killed mid-write leaves the old one)."""
    path = Path(run_dir) / MANIFEST_FILE
    partial = path.with_name(MANIFEST_FILE + ".partial")
    partial.write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    os.replace(partial, path)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
