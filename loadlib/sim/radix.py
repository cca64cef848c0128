"""A radix prefix cache over token ids, as SGLang keeps one.

A request whose prompt starts with token ids that an earlier request already prefilled skips
that much prefill, and `usage.prompt_tokens_details.cached_tokens` reports it. Capacity is in
tokens with least-recently-used leaves evicted first; with a page size above one, matches and
inserts are rounded down to whole pages.
"""

from __future__ import annotations

import heapq
import itertools


class _Node:
    __slots__ = ("children", "key", "parent", "last_access")

    def __init__(self, key: list[int], parent: "_Node | None") -> None:
        self.children: dict[int, _Node] = {}
        self.key = key
        self.parent = parent
        self.last_access = 0


def _common(a: list[int], b: list[int], start: int) -> int:
    """Length of the common prefix of `a` and `b[start:]`."""
    n = min(len(a), len(b) - start)
    if a[:n] == b[start:start + n]:
        return n
    lo, hi = 0, n  # a[:lo] matches, a[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[start:start + mid]:
            lo = mid
        else:
            hi = mid
    return lo


class RadixCache:
    """Token-exact prefix matching with an LRU token budget."""

    def __init__(self, capacity_tokens: int, page_size: int = 1) -> None:
        self.capacity_tokens = capacity_tokens
        self.page_size = max(1, page_size)
        self._clock = itertools.count(1)
        self.reset()

    def reset(self) -> None:
        self.root = _Node([], None)
        self.size_tokens = 0

    def match(self, ids: list[int]) -> int:
        """Number of leading tokens of `ids` already in the cache (page aligned); touches them."""
        node, i, tick = self.root, 0, next(self._clock)
        while i < len(ids):
            child = node.children.get(ids[i])
            if child is None:
                break
            m = _common(child.key, ids, i)
            child.last_access = tick
            i += m
            if m < len(child.key):
                break
            node = child
        return i - i % self.page_size

    def insert(self, ids: list[int]) -> None:
        """Adds `ids` (rounded down to whole pages), then evicts down to capacity."""
        ids = ids[:len(ids) - len(ids) % self.page_size]
        node, i, tick = self.root, 0, next(self._clock)
        while i < len(ids):
            child = node.children.get(ids[i])
            if child is None:
                leaf = _Node(ids[i:], node)
                leaf.last_access = tick
                node.children[ids[i]] = leaf
                self.size_tokens += len(leaf.key)
                break
            m = _common(child.key, ids, i)
            child.last_access = tick
            if m < len(child.key):
                child = self._split(child, m)
            i += m
            node = child
        if self.size_tokens > self.capacity_tokens:
            self._evict(self.size_tokens - self.capacity_tokens)

    def _split(self, child: _Node, m: int) -> _Node:
        parent = child.parent
        assert parent is not None
        head = _Node(child.key[:m], parent)
        head.last_access = child.last_access
        parent.children[head.key[0]] = head
        child.key = child.key[m:]
        child.parent = head
        head.children[child.key[0]] = child
        return head

    def _evict(self, n_tokens: int) -> None:
        leaves = [(n.last_access, id(n), n) for n in self._nodes() if not n.children]
        heapq.heapify(leaves)
        while n_tokens > 0 and leaves:
            _, _, leaf = heapq.heappop(leaves)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            n_tokens -= len(leaf.key)
            self.size_tokens -= len(leaf.key)
            if parent is not self.root and not parent.children:
                heapq.heappush(leaves, (parent.last_access, id(parent), parent))

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())
