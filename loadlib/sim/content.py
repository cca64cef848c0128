"""What the simulated model "writes": a content domain per prompt and deterministic output text.

Speculative decoding accepts far more draft tokens on code than on prose, so the engine needs to
know what kind of text a prompt asks for. The domain is guessed from the prompt (CJK share,
prose and code keywords), and the output is stitched from a small per-domain corpus with a
generator seeded by the prompt, so identical prompts at temperature 0 produce identical text
that looks like the domain (code-ish for code, Chinese for Chinese prompts).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import lru_cache

import orjson

from loadlib.sim.tokenizer import pieces

_CJK_CHAR = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
_ESSAY = re.compile("散文|诗|文笔|小说|故事|作文|抒情|描写")
_CODE = re.compile(
    r"\b(code|implement\w*|function|class|python|c\+\+|java|rust|golang|typescript|"
    r"javascript|sql|script|program|json|regex|bash)\b|```|def |#include", re.IGNORECASE)


# The programming language a code prompt asks for: the draft predicts some better than others.
# The first that matches names it (C++ before C).
_LANGUAGES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("c++", re.compile(r"c\+\+", re.IGNORECASE)), ("python", re.compile(r"\bpython\b", re.IGNORECASE)),
    ("rust", re.compile(r"\brust\b", re.IGNORECASE)), ("go", re.compile(r"\b(golang|go)\b", re.IGNORECASE)),
    ("java", re.compile(r"\bjava\b", re.IGNORECASE)), ("typescript", re.compile(r"\btypescript\b", re.IGNORECASE)),
    ("javascript", re.compile(r"\bjavascript\b", re.IGNORECASE)), ("c", re.compile(r"\bC\b")))


def language(text: str) -> str | None:
    """The programming language a prompt names (`c++`, `python`, `rust`, `go`, `java`,
    `typescript`, `javascript`, `c`), None when it names none of them."""
    return next((name for name, pattern in _LANGUAGES if pattern.search(text)), None)


def classify(text: str) -> str:
    """The content domain of a prompt: `code`, `en_tech`, `cn_chat` or `cn_essay`."""
    visible = len(text) - text.count(" ")
    if visible and len(_CJK_CHAR.findall(text)) / visible > 0.2:
        return "cn_essay" if _ESSAY.search(text) else "cn_chat"
    return "code" if _CODE.search(text) else "en_tech"


_CORPUS: dict[str, tuple[str, ...]] = {
    "code": (
        "import threading\n", "import time\n", "from collections import OrderedDict\n",
        "from typing import Any, Generic, Hashable, Optional, TypeVar\n\n",
        "K = TypeVar(\"K\", bound=Hashable)\n", "V = TypeVar(\"V\")\n\n",
        "class _Entry(Generic[V]):\n    __slots__ = (\"value\", \"expires_at\")\n\n",
        "    def __init__(self, value: V, expires_at: float) -> None:\n",
        "        self.value = value\n", "        self.expires_at = expires_at\n\n",
        "class LRUCache(Generic[K, V]):\n",
        "    \"\"\"Thread-safe LRU cache with per-entry TTL.\"\"\"\n\n",
        "    def __init__(self, capacity: int, ttl: float = 60.0) -> None:\n",
        "        if capacity <= 0:\n            raise ValueError(\"capacity must be positive\")\n",
        "        self._capacity = capacity\n", "        self._ttl = ttl\n",
        "        self._data: OrderedDict[K, _Entry[V]] = OrderedDict()\n",
        "        self._lock = threading.RLock()\n\n",
        "    def get(self, key: K, default: Optional[V] = None) -> Optional[V]:\n",
        "        with self._lock:\n", "            entry = self._data.get(key)\n",
        "            if entry is None:\n                return default\n",
        "            if entry.expires_at < time.monotonic():\n",
        "                del self._data[key]\n                return default\n",
        "            self._data.move_to_end(key)\n            return entry.value\n\n",
        "    def put(self, key: K, value: V) -> None:\n",
        "            self._data[key] = _Entry(value, time.monotonic() + self._ttl)\n",
        "            while len(self._data) > self._capacity:\n",
        "                self._data.popitem(last=False)\n\n",
        "    def __len__(self) -> int:\n        with self._lock:\n            return len(self._data)\n\n",
        "import unittest\n\n", "class LRUCacheTest(unittest.TestCase):\n",
        "    def test_evicts_least_recently_used(self) -> None:\n",
        "        cache = LRUCache(capacity=2)\n", "        cache.put(\"a\", 1)\n",
        "        cache.put(\"b\", 2)\n", "        self.assertEqual(cache.get(\"a\"), 1)\n",
        "        self.assertIsNone(cache.get(\"b\"))\n\n",
        "    def test_expired_entry_is_dropped(self) -> None:\n",
        "        for i in range(1000):\n            cache.put(i, i * i)\n",
        "template <typename T, std::size_t N>\n", "class SpscRing {\n public:\n",
        "  bool push(const T& item) noexcept {\n",
        "    const auto head = head_.load(std::memory_order_relaxed);\n",
        "    if (next(head) == tail_.load(std::memory_order_acquire)) return false;\n",
        "    buffer_[head] = item;\n    head_.store(next(head), std::memory_order_release);\n",
        "    return true;\n  }\n",
    ),
    "en_tech": (
        "Speculative decoding splits generation into two roles: a small draft model proposes ",
        "several tokens ahead, and the large target model verifies them in a single forward pass. ",
        "Because verification of k tokens costs about as much as generating one, every accepted ",
        "draft token is nearly free throughput. ", "The acceptance rule compares the target "
        "distribution with the draft distribution at each position. ",
        "With greedy decoding a draft token is accepted exactly when it equals the target's argmax; ",
        "with sampling, a token is accepted with probability min(1, p(x) / q(x)), ",
        "and on rejection a corrected token is drawn from the normalized residual distribution. ",
        "This keeps the output distribution identical to the target model's. ",
        "\n\n## Why acceptance varies by domain\n\n",
        "Code is highly predictable: indentation, keywords, closing brackets and repeated "
        "identifiers let the draft model guess long runs correctly. ",
        "Natural-language explanations carry more entropy per token, so runs break earlier. ",
        "Creative prose is the hardest case, since word choice is deliberately varied. ",
        "In practice the mean accepted length ranges from about six tokens on code ",
        "to fewer than two on literary text. ", "\n\n### The draft-verify loop\n\n",
        "1. The draft model extends the context by a block of candidate tokens.\n",
        "2. The target model scores the whole block in one batched forward pass.\n",
        "3. The longest prefix that matches the target is accepted, plus one bonus token.\n",
        "4. The KV cache is rolled back to the last accepted position and the loop repeats.\n",
        "Throughput therefore equals the forward rate multiplied by the accepted tokens per step. ",
    ),
    "cn_chat": (
        "家用路由器长期不重启变慢，通常不是单一原因造成的，而是多个因素叠加的结果。",
        "\n\n一、内存碎片\n\n", "路由器的系统内存很小，长时间运行后频繁分配和释放会产生碎片，",
        "导致可用的连续内存越来越少，进程只能反复回收和整理内存。",
        "\n\n二、连接跟踪表\n\n", "每一个经过路由器的连接都会在连接跟踪表里占用一个条目，",
        "下载工具和智能设备会建立大量短连接，表项接近上限时新连接就会被丢弃或变慢。",
        "\n\n三、NAT 状态老化\n\n", "NAT 映射需要等待超时才能释放，如果老化时间设置过长，",
        "失效的映射会一直占用资源，查表的开销也随之上升。",
        "\n\n可操作的建议：", "定期重启或设置计划任务自动重启；",
        "适当缩短连接跟踪的超时时间；", "升级到内存更大的型号或者刷入更新的固件；",
        "关闭不需要的服务，比如远程管理和多余的插件。", "这样一般就能明显改善网络速度。",
    ),
    "cn_essay": (
        "北平的秋来得清，来得静，也来得悲凉。", "清晨推开院门，天色是一种洗过似的蓝，",
        "槐树的叶子一片一片地落下来，踏上去没有声响，只觉得脚底下软软的。",
        "胡同口卖早点的吆喝声远远传来，和着鸽哨，在高远的天空里打着旋儿。",
        "\n\n", "到了午后，阳光斜斜地照进窗棂，把窗纸染成淡淡的金黄。",
        "院子里的枣树结满了红透的枣子，风一吹，便有几颗落在青砖地上。",
        "西山的红叶这时正好，远远望去，像一片燃着的晚霞。",
        "秋蝉的声音已经稀了，断断续续的，仿佛在诉说一个快要讲完的故事。",
        "傍晚的雨细细密密地下着，打在屋檐上，滴滴答答，一直响到夜里。",
        "这样的秋，是要慢慢地品的，像一杯温热的茶，越喝越有味道。",
    ),
    "en_reason": (
        "Okay, let me think about what the user is asking for here. ",
        "First I should figure out the main requirements. ", "Hmm, wait, I need to be careful: ",
        "the question mentions several parts, so I will handle them one at a time. ",
        "Let me consider the edge cases before writing the answer. ",
        "That seems right, but let me double-check the reasoning. ",
        "So the structure of the answer should be: an overview, the details, then an example. ",
    ),
    "cn_reason": (
        "嗯，用户想让我", "先理清楚问题的几个要点。", "首先需要考虑背景，",
        "然后分几个方面展开说明，", "这里要注意不要遗漏细节，", "再检查一下逻辑是否通顺。",
        "好的，我大概知道该怎么组织回答了。",
    ),
}


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call in a tool-calling answer: where its name and arguments sit among the tokens."""

    id: str
    name: str
    name_at: int  # the token that completes the name: its step sends the call's first delta
    args_from: int  # the arguments JSON is tokens [args_from, args_to)
    args_to: int


@dataclass(frozen=True, slots=True)
class Output:
    """A request's full natural output: reasoning pieces first, then answer pieces.

    `escaped[i]` is piece i as UTF-8 bytes already escaped for a JSON string, so a chunk's
    content is a join of a slice, with no per-chunk encoding. A tool-calling answer lists its
    calls; its tokens are then the calls as the model writes them, not text to stream.
    """

    texts: tuple[str, ...]
    escaped: tuple[bytes, ...]
    reasoning_len: int
    calls: tuple[ToolCall, ...] = ()


def escape(piece: str) -> bytes:
    """`piece` as the inside of a JSON string."""
    return orjson.dumps(piece)[1:-1]


def stitch(domain: str, rng: random.Random, n_tokens: int) -> list[str]:
    """`n_tokens` pieces of the domain's corpus, mostly in order, drawn with `rng`."""
    corpus = _CORPUS[domain]
    out: list[str] = []
    start = rng.randrange(len(corpus))
    i = start
    while len(out) < n_tokens:
        out.extend(pieces(corpus[i % len(corpus)]))
        # mostly in order (so it reads like a text), sometimes a jump
        i = i + 1 if rng.random() < 0.8 else rng.randrange(len(corpus))
    return out[:n_tokens]


def reasoning(domain: str, rng: random.Random, n_tokens: int) -> list[str]:
    """Thinking text in the prompt's language."""
    if not n_tokens:
        return []
    return stitch("cn_reason" if domain.startswith("cn_") else "en_reason", rng, n_tokens)


@lru_cache(maxsize=512)
def output_for(seed: int, domain: str, answer_tokens: int, reasoning_tokens: int) -> Output:
    """The deterministic output for a seed (cached: identical prompts share one object)."""
    rng = random.Random(seed)
    texts = reasoning(domain, rng, reasoning_tokens) + stitch(domain, rng, answer_tokens)
    return Output(tuple(texts), tuple(escape(t) for t in texts), reasoning_tokens)
