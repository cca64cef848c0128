"""The protocol's fixed prompt set.

The first five are the reference script's prompts verbatim (`uni_bench.py` in the seed thread),
so results stay comparable with published numbers. `code_c` .. `code_h` are this project's
further code prompts in the same form, so that "different prompts" cells at 4 and 8 streams
have N distinct prompts of the same kind as `code` and `code_b`.
"""

from __future__ import annotations

PROTOCOL_PROMPTS: dict[str, str] = {
    "code": "You are an expert Python engineer. Write a complete implementation of a thread-safe LRU cache class with TTL expiration support, including unit tests. Provide only code, no explanation.",
    "code_b": "You are an expert systems engineer. Write a complete implementation of a lock-free SPSC ring buffer in C++17 with acquire/release memory ordering annotations. Provide only code, no explanation.",
    "en_tech": "Write a detailed technical explanation of how speculative decoding with a draft model works, covering the draft-verify loop, acceptance criteria, and why acceptance rate varies by domain. Aim for depth and precision.",
    "cn_chat": "请用中文详细分析一下，为什么家用路由器长期不重启会越来越慢？从内存碎片、连接跟踪表、NAT 状态老化三个角度展开，给出可操作的解决建议。",
    "cn_essay": "请写一篇关于秋天的散文，描写北平的秋色，要求文笔优美，有细节描写，不少于五百字。",
    "code_c": "You are an expert Go engineer. Write a complete implementation of a token-bucket rate limiter middleware for net/http with per-client limits and idle eviction, including table-driven tests. Provide only code, no explanation.",
    "code_d": "You are an expert Rust engineer. Write a complete implementation of a bounded multi-producer multi-consumer channel with blocking and timeout-based send/receive, including unit tests. Provide only code, no explanation.",
    "code_e": "You are an expert TypeScript engineer. Write a complete implementation of a retrying HTTP client with exponential backoff, jitter and cancellation via AbortController, including unit tests. Provide only code, no explanation.",
    "code_f": "You are an expert Python engineer. Write a complete implementation of an asyncio-based job scheduler with priorities, cron-style schedules and graceful shutdown, including unit tests. Provide only code, no explanation.",
    "code_g": "You are an expert Java engineer. Write a complete implementation of a consistent-hashing ring with virtual nodes and rebalancing on node join and leave, including JUnit tests. Provide only code, no explanation.",
    "code_h": "You are an expert C engineer. Write a complete implementation of an arena allocator with aligned allocations, reset and per-arena statistics, including a small test program. Provide only code, no explanation.",
}

SINGLE_STREAM_SCENARIOS: tuple[str, ...] = ("code", "en_tech", "cn_chat", "cn_essay")
SAME_PROMPT = "code"
DIFFERENT_PROMPTS: tuple[str, ...] = ("code", "code_b", "code_c", "code_d", "code_e", "code_f", "code_g", "code_h")


def different_prompts(n: int) -> list[str]:
    """N distinct prompt names for a "different prompts" cell (cycled beyond the shipped eight)."""
    return [DIFFERENT_PROMPTS[i % len(DIFFERENT_PROMPTS)] for i in range(n)]
