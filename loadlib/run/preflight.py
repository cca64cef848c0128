"""What a run checks about its target so that a wrong endpoint is said plainly, not measured.

- The scheme: an `https://` target whose port answers plain HTTP is refused before the run
  starts (`PlainHttpTarget`), with the URL to use instead.
- The model: `GET /v1/models` lists what the server serves. A `--model` it does not list is
  warned about once at the start (vLLM answers 404 for it; SGLang serves any name), and when the
  list cannot be had the run says so instead of silently sending "default"; a 401 or 403 there
  says to give the API key, not a model.
- The first requests: when the first `FIRST_REQUESTS` of a run all fail for the same reason, the
  run stops with that reason (`--keep-going` runs on), rather than marching through its plan for
  minutes. A TLS failure against an `https://` target that answers plain HTTP gets a hint, and
  so does a 401 or 403 (the API key).
- Whether a server is there at all (`server_answer`): any HTTP answer says it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from loadlib.wire.connection import Connection, Endpoint, TransportError

FIRST_REQUESTS = 8
FALLBACK_MODEL = "default"
HANDSHAKE_S = 3.0  # connect and TLS handshake of a preflight request: a live server takes milliseconds
AUTH_REFUSED = (401, 403)


class PlainHttpTarget(ValueError):
    """An `https://` target whose port answers plain HTTP: nothing sent over TLS can succeed."""

    def __init__(self, base_url: str) -> None:
        endpoint = Endpoint.parse(base_url)
        host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host  # an IPv6 address
        super().__init__(f"{base_url} answers plain HTTP, not TLS: use http://{host}:{endpoint.port}{endpoint.prefix}")


@dataclass(frozen=True)
class ModelList:
    """What `GET /v1/models` said: the ids, or why there are none."""

    ids: list[str] = field(default_factory=list)
    problem: str | None = None
    context_tokens: dict[str, int] = field(default_factory=dict)  # model -> max_model_len, where listed
    owned_by: dict[str, str] = field(default_factory=dict)  # model -> its `owned_by` (the server's kind)
    hint: str = "give --model"  # what to do when there is no list

    def choose(self, requested: str) -> tuple[str, str | None]:
        """The model to request and a warning to give once (None when all is well)."""
        if requested:
            if self.ids and requested not in self.ids:
                return requested, (f"--model {requested}: the server lists {', '.join(self.ids)} (vLLM answers 404 "
                                   "for a model it does not list; SGLang serves any name)")
            return requested, None
        if self.ids:
            return self.ids[0], None
        return FALLBACK_MODEL, f"GET /v1/models: {self.problem or 'no models listed'}; requests ask for model " \
                               f"{FALLBACK_MODEL!r} ({self.hint})"


def list_models(base_url: str, api_key: str | None = None, verify_tls: bool = True,
                timeout_s: float = 10.0) -> ModelList:
    """What the server lists; raises `PlainHttpTarget` when an https:// URL's port speaks plain HTTP."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    connection = Connection(Endpoint.parse(base_url), timeout=timeout_s, verify_tls=verify_tls,
                            connect_timeout=HANDSHAKE_S)
    try:
        response = connection.request("GET", "/v1/models", headers=headers)
        if response.status in AUTH_REFUSED:
            return ModelList(problem=f"HTTP {response.status}", hint=auth_hint(api_key))
        if response.status != 200:
            return ModelList(problem=f"HTTP {response.status}")
        data = orjson.loads(response.body).get("data") or []
        models = [model for model in data if isinstance(model, dict) and "id" in model]
        context = {str(m["id"]): m["max_model_len"] for m in models if isinstance(m.get("max_model_len"), int)}
        owners = {str(m["id"]): m["owned_by"] for m in models if isinstance(m.get("owned_by"), str)}
        return ModelList([str(m["id"]) for m in models], context_tokens=context, owned_by=owners) if models else \
            ModelList(problem="the answer lists no model ids")
    except TransportError as exc:
        if str(exc).startswith("TLS") and answers_plain_http(base_url, timeout_s):
            raise PlainHttpTarget(base_url) from None
        return ModelList(problem=_redacted(str(exc), api_key))
    except (orjson.JSONDecodeError, AttributeError, TypeError):
        return ModelList(problem="the answer is not the OpenAI models list")
    finally:
        connection.close()


def auth_hint(api_key: str | None) -> str:
    """What to do about a 401 or 403: give a key, or check the one given."""
    if api_key:
        return "the server refused the API key: check --api-key or OPENAI_API_KEY"
    return "the server wants an API key: give --api-key or set OPENAI_API_KEY"


def server_answer(base_url: str, api_key: str | None = None, verify_tls: bool = True) -> str | None:
    """None when the server answers `GET /v1/models` with any HTTP status (a 503 of a loaded
    server says it is there), else why no answer came ("connect to ...: connection refused")."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    connection = Connection(Endpoint.parse(base_url), timeout=HANDSHAKE_S, verify_tls=verify_tls,
                            connect_timeout=HANDSHAKE_S)
    try:
        connection.request("GET", "/v1/models", headers=headers)
        return None
    except TransportError as exc:
        return _redacted(str(exc), api_key)
    finally:
        connection.close()


def answers_plain_http(base_url: str, timeout_s: float = 5.0) -> bool:
    """Whether an `https://` target's port answers plain HTTP (a TLS handshake there fails)."""
    endpoint = Endpoint.parse(base_url)
    if endpoint.scheme != "https":
        return False
    plain = Connection(Endpoint("http", endpoint.host, endpoint.port, endpoint.prefix), timeout=timeout_s,
                       connect_timeout=HANDSHAKE_S)
    try:
        return plain.request("GET", "/v1/models").status > 0
    except TransportError:
        return False
    finally:
        plain.close()


class FirstFailures:
    """Watches a run's first records: `see` returns the reason to stop when the first
    `FIRST_REQUESTS` all failed alike (the reason up to its first ':'), else None."""

    def __init__(self, count: int = FIRST_REQUESTS) -> None:
        self.count = count
        self.kinds: list[str | None] = []

    @property
    def watching(self) -> bool:
        return len(self.kinds) < self.count

    def see(self, record: dict[str, Any]) -> str | None:
        if not self.watching:
            return None
        error = record.get("error")
        self.kinds.append(str(error).split(":", 1)[0] if error else None)
        if len(self.kinds) == self.count and self.kinds[0] is not None and len(set(self.kinds)) == 1:
            return str(error)
        return None


def _redacted(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text
