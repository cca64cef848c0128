"""Tool calls: when a request with `tools` is answered with calls instead of text, and which.

The model calls tools when it must (`tool_choice` "required" or a named function) or, with
"auto", when the conversation asks for tool calls or names one of the tools; `tool_choice`
"none" always gets text. It writes each call the way Qwen's template teaches it,
`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, so every token counts as
output, and SGLang's tool parser turns those tokens into deltas: one with the call's id, type
and name once the name is complete, then the arguments JSON in fragments as it is generated.
Calls, names and arguments (valid for each tool's JSON schema, strings taken from the prompt)
are drawn with the prompt's seed, so temperature 0 repeats them exactly.
"""

from __future__ import annotations

import json
import random
import re
from functools import lru_cache
from typing import Any

import orjson

from loadlib.sim import content
from loadlib.sim.tokenizer import pieces

_ASKS = re.compile(r"\btool(s|[ _-]?calls?)?\b|\bfunction[ _-]?call", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z_][\w./-]+|[\u4e00-\u9fff]{2,4}")
_LONG_TEXT = {"body", "text", "content", "comment", "message", "description", "reason"}
_TOOL_CALL_OPEN, _TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"  # one special token each


def functions_to_call(tools: object, tool_choice: object, prompt: str) -> list[dict[str, Any]] | None:
    """The function definitions the answer will call, or None for a text answer.

    Raises ValueError (a 400 for the client) for malformed `tools` or an unknown named function.
    """
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ValueError("tools must be a list")
    if tool_choice == "none":
        return None
    functions = [t["function"] for t in tools
                 if isinstance(t, dict) and isinstance(t.get("function"), dict)
                 and isinstance(t["function"].get("name"), str)]
    if not functions:
        return None
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        named = [f for f in functions if f["name"] == name]
        if not named:
            raise ValueError(f"Tool '{name}' not found in 'tools'.")
        return named
    if tool_choice == "required" or _ASKS.search(prompt) or any(f["name"] in prompt for f in functions):
        return functions
    return None


def output_for(seed: int, functions: list[dict[str, Any]], prompt: str, domain: str,
               reasoning_tokens: int) -> content.Output:
    """The deterministic tool-calling answer for a seed (cached like text outputs)."""
    return _output(seed, orjson.dumps(functions), prompt, domain, reasoning_tokens)


@lru_cache(maxsize=256)
def _output(seed: int, functions_json: bytes, prompt: str, domain: str,
            reasoning_tokens: int) -> content.Output:
    functions = orjson.loads(functions_json)
    rng = random.Random(seed)
    texts = content.reasoning(domain, rng, reasoning_tokens)
    words = _WORD.findall(prompt) or ["value"]
    count = 1 if len(functions) == 1 else rng.randint(1, min(3, len(functions)))
    calls = []
    for i, function in enumerate(rng.sample(functions, count)):
        if i:
            texts.append("\n")
        name = function["name"]
        arguments = json.dumps(_object(function.get("parameters") or {}, rng, words), ensure_ascii=False)
        texts += [_TOOL_CALL_OPEN, "\n", *pieces(f'{{"name": {json.dumps(name)}, "arguments": ')]
        name_at = len(texts) - 1
        texts += pieces(arguments)
        calls.append(content.ToolCall(f"call_{rng.getrandbits(96):024x}", name, name_at,
                                      name_at + 1, len(texts)))
        texts += [*pieces("}\n"), _TOOL_CALL_CLOSE]
    return content.Output(tuple(texts), tuple(content.escape(t) for t in texts),
                          reasoning_tokens, tuple(calls))


def _object(schema: dict[str, Any], rng: random.Random, words: list[str]) -> dict[str, Any]:
    """Every required property and about half the optional ones, in the schema's order."""
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    return {key: _value(sub if isinstance(sub, dict) else {}, key, rng, words)
            for key, sub in props.items() if key in required or rng.random() < 0.5}


def _value(schema: dict[str, Any], key: str, rng: random.Random, words: list[str]) -> Any:
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if kind == "integer":
        low = int(schema.get("minimum", 1))
        return rng.randint(low, int(schema.get("maximum", low + 99)))
    if kind == "number":
        low = float(schema.get("minimum", 0.0))
        return round(rng.uniform(low, float(schema.get("maximum", low + 100.0))), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        n = max(int(schema.get("minItems", 1)), rng.randint(1, 3))
        if items.get("enum"):
            return rng.sample(items["enum"], min(n, len(items["enum"])))
        return [_value(items, key, rng, words) for _ in range(n)]
    if kind == "object":
        return _object(schema, rng, words)
    n = rng.randint(20, 60) if key in _LONG_TEXT else rng.randint(1, 4)
    start = rng.randrange(len(words))
    return " ".join(words[(start + i) % len(words)] for i in range(n))
