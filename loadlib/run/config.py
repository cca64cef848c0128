"""A test's configuration, typed and built once.

The coordinating process (the local runner, or the master) makes one `RunConfig` at each test
start from Locust's options and the profile, and sends it as is to every process that runs users.
Nothing of it is written back into Locust's options: the request defaults a profile sets live
here and nowhere else (`settings`), and each request's body is built from them by
`loadlib.wire.client.chat_body`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from loadlib.modes import LoadMode, mode_named
from loadlib.profiles import Profile
from loadlib.wire.client import ChatSettings
from loadlib.wire.flavours import SGLANG


@dataclass(frozen=True)
class RunConfig:
    mode: str  # a key of loadlib.modes.MODES, or the locustfile's own users ("locust")
    settings: ChatSettings  # the request defaults; the API key never travels (each process has its own)
    users: int  # the -u the run was asked for
    started_at: float  # wall clock: where a free-running timeline starts, the same on every process
    profile: Profile | None = None  # None: the locustfile's own users
    workers: tuple[str, ...] = ()  # worker ids in share order (distributed runs)
    context_tokens: int | None = None  # the model's context, where /v1/models says
    targets: tuple[tuple[str, str], ...] = ()  # an A/B run's servers: (label, base URL)

    @property
    def load_mode(self) -> LoadMode:
        return mode_named(self.mode)

    def share(self, worker_id: str | None) -> tuple[int, int]:
        """(this process's index, processes running users) for splitting shared work."""
        if worker_id in self.workers:
            return self.workers.index(worker_id), len(self.workers)
        return 0, 1

    def target_url(self, label: str) -> str | None:
        """The base URL of the target labelled `label`; None for "" (the run's one server)."""
        return dict(self.targets).get(label) if label else None

    def to_message(self) -> dict[str, Any]:
        settings = dataclasses.asdict(self.settings)
        settings.pop("api_key")
        return {"mode": self.mode, "settings": settings, "users": self.users, "started_at": self.started_at,
                "profile": self.profile.model_dump(mode="json", by_alias=True) if self.profile else None,
                "workers": list(self.workers), "context_tokens": self.context_tokens,
                "targets": [list(target) for target in self.targets]}

    @classmethod
    def from_message(cls, data: dict[str, Any], api_key: str | None) -> "RunConfig":
        profile = Profile.model_validate(data["profile"]) if data["profile"] is not None else None
        return cls(data["mode"], ChatSettings(**data["settings"], api_key=api_key), data["users"],
                   data["started_at"], profile, tuple(data["workers"]), data["context_tokens"],
                   tuple(tuple(target) for target in data["targets"]))


def request_settings(profile: Profile | None, opts: Any, model: str, api_key: str | None,
                     owned_by: str | None = None) -> ChatSettings:
    """The request defaults: a profile's `[request]` (the protocol's options make one too), else
    the options (a locustfile's own users). `owned_by` is what the target's /v1/models says of the
    model: `--spec-details auto` asks SGLang, and only SGLang, for its account of speculative
    decoding (a stricter server may refuse a field it does not know)."""
    max_tokens, thinking = (profile.request.max_tokens, profile.request.thinking) if profile is not None \
        else (opts.max_tokens, opts.thinking)
    spec_details = getattr(opts, "spec_details", "auto")
    return ChatSettings(model=model, max_tokens=max_tokens, thinking=thinking, api_key=api_key,
                        timeout_s=opts.request_timeout, verify_tls=not opts.insecure,
                        spec_details=spec_details == "on" or spec_details == "auto" and owned_by == SGLANG.probes.owned_by,
                        chunk_times=getattr(opts, "chunk_times", False))
