"""A deterministic approximate tokenizer and the chat template's token framing.

The simulator never sees the real model's tokenizer, but `usage.prompt_tokens`, prefill time and
the radix cache all need token counts that behave like one: CJK text about one token per two
characters (Qwen's vocabulary holds most common two-character words), Latin words about one
(long words more), digits in groups of three, whitespace runs one.
Token ids are stable hashes of the pieces, so identical text gives identical ids and the radix
cache can match prefixes token-exactly.
"""

from __future__ import annotations

import json
import re
import zlib

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_PUNCT = "\u3000-\u303f\uff00-\uffef"
_PIECE = re.compile(
    rf"[{_CJK}]{{1,2}}"  # one or two CJK ideographs
    rf"|[{_CJK_PUNCT}]"  # one full-width punctuation mark
    r"| ?[A-Za-z]{1,10}"  # a word (long words split every 10 letters), with its leading space
    r"| ?\d{1,3}"
    rf"| ?[^\sA-Za-z\d{_CJK}{_CJK_PUNCT}]{{1,2}}"  # ASCII punctuation, up to two marks
    r"|\s+"  # a whitespace run (newline plus indentation is one piece)
)

# Special tokens of a Qwen-style chat template; ids above any crc32-derived id cannot collide
# because regular ids are reduced below 2**31.
IM_START, IM_END, NEWLINE = 2**31 + 1, 2**31 + 2, 2**31 + 3
THINK_OPEN, THINK_CLOSE = 2**31 + 4, 2**31 + 5
EOS_TOKEN_ID = 151645  # what SGLang reports as `matched_stop` for a Qwen end of turn


def pieces(text: str) -> list[str]:
    """Splits text into token-sized pieces whose concatenation is the text."""
    return _PIECE.findall(text)


def piece_id(piece: str) -> int:
    return zlib.crc32(piece.encode()) & 0x7FFFFFFF


def encode(text: str) -> list[int]:
    """Token ids of `text` (stable across processes and runs)."""
    return [zlib.crc32(p.encode()) & 0x7FFFFFFF for p in _PIECE.findall(text)]


def _role_id(role: str) -> int:
    return piece_id("<role>" + role)


def message_text(content: object) -> str:
    """The text of an OpenAI message `content` (a string or a list of parts; images count as a
    fixed placeholder so that vision requests still have a plausible size)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") == "text":
                    out.append(str(part.get("text", "")))
                elif part.get("type") in ("image_url", "video_url", "audio_url"):
                    out.append(" <image>" * 256)
        return "".join(out)
    return "" if content is None else str(content)


_TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_TOOLS_TAIL = ("</tools>\n\nFor each function call, return a json object with function name and "
               "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
               '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def _with_tools(messages: list[dict], tools: list) -> list[dict]:
    """The messages as Qwen's template sees them with `tools`: the tool signatures are appended
    to the system turn (one is added when there is none), so they are part of the prompt."""
    signatures = "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
    block = f"{_TOOLS_HEAD}{signatures}\n{_TOOLS_TAIL}"
    if messages and messages[0].get("role") == "system":
        system = message_text(messages[0].get("content")) + "\n\n" + block
        return [{"role": "system", "content": system}, *messages[1:]]
    return [{"role": "system", "content": block}, *messages]


def encode_chat(messages: list[dict], thinking: bool, tools: list | None = None) -> list[int]:
    """Prompt token ids as a Qwen3 chat template renders them (one user turn is ~9 tokens of
    framing), with the empty think block that `enable_thinking=false` adds."""
    if tools:
        messages = _with_tools(messages, tools)
    ids: list[int] = []
    for msg in messages:
        ids.append(IM_START)
        ids.append(_role_id(str(msg.get("role", "user"))))
        ids.append(NEWLINE)
        ids.extend(encode(message_text(msg.get("content"))))
        ids.append(IM_END)
        ids.append(NEWLINE)
    ids.extend((IM_START, _role_id("assistant"), NEWLINE))
    if not thinking:
        ids.extend((THINK_OPEN, NEWLINE, NEWLINE, THINK_CLOSE, NEWLINE, NEWLINE))
    return ids
