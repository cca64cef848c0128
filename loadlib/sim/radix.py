"""A radix prefix cache over token ids, as SGLang keeps one, with its optional host tier.

A request whose prompt starts with token ids that an earlier request already prefilled skips
that much prefill, and `usage.prompt_tokens_details.cached_tokens` reports it. The device cache
holds `capacity_tokens`, least-recently-used leaves evicted first; with a page size above one,
matches and inserts are rounded down to whole pages.

With a host tier (`host_capacity_tokens`, SGLang's `--enable-hierarchical-cache` with
`--hicache-ratio R`: R times the device pool) the cache is SGLang's HiRadixCache under its
default `write_through` policy: every block the device caches is also written to host memory,
so a block the device evicts stays in the tree on the host alone, and a later match loads it
back to the device (`PrefixHit.host`, which the engine charges a load time). The host evicts
its least-recently-used blocks that are on the host alone, down to its capacity.
"""

from __future__ import annotations

import heapq
import itertools
from typing import NamedTuple


class _Node:
    __slots__ = ("children", "key", "parent", "last_access", "on_device", "on_host")

    def __init__(self, key: list[int], parent: "_Node | None", on_host: bool = False) -> None:
        self.children: dict[int, _Node] = {}
        self.key = key
        self.parent = parent
        self.last_access = 0
        self.on_device = True
        self.on_host = on_host  # a copy in host memory (write-through)


class PrefixHit(NamedTuple):
    """Leading tokens of a prompt found cached: on the device, and on the host alone (loaded back)."""

    device: int
    host: int

    @property
    def tokens(self) -> int:
        return self.device + self.host


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
    """Token-exact prefix matching with an LRU token budget on the device and, optionally, a
    larger one on the host."""

    def __init__(self, capacity_tokens: int, page_size: int = 1, host_capacity_tokens: int = 0) -> None:
        self.capacity_tokens = capacity_tokens
        self.host_capacity_tokens = host_capacity_tokens
        self.page_size = max(1, page_size)
        self._clock = itertools.count(1)
        self.reset()

    def reset(self) -> None:
        self.root = _Node([], None)
        self.size_tokens = 0  # on the device
        self.host_size_tokens = 0

    @property
    def _write_through(self) -> bool:
        return self.host_capacity_tokens > 0

    def match(self, ids: list[int]) -> PrefixHit:
        """The leading tokens of `ids` already cached (page aligned), the device's first; touches
        them, and loads what only the host holds back to the device."""
        node, i, tick = self.root, 0, next(self._clock)
        device = 0
        loaded: list[_Node] = []
        while i < len(ids):
            child = node.children.get(ids[i])
            if child is None:
                break
            m = _common(child.key, ids, i)
            if m < len(child.key) and not child.on_device:
                child = self._split(child, m)  # load back only the part that matched
            child.last_access = tick
            if child.on_device:
                device += m
            else:
                loaded.append(child)
            i += m
            if m < len(child.key):
                break
            node = child
        total = i - i % self.page_size
        device = min(device - device % self.page_size, total)
        for child in loaded:
            child.on_device = True
            self.size_tokens += len(child.key)
        self._fit()
        return PrefixHit(device, total - device)

    def insert(self, ids: list[int]) -> None:
        """Adds `ids` (rounded down to whole pages), then evicts down to capacity."""
        ids = ids[:len(ids) - len(ids) % self.page_size]
        node, i, tick = self.root, 0, next(self._clock)
        while i < len(ids):
            child = node.children.get(ids[i])
            if child is None:
                leaf = _Node(ids[i:], node, on_host=self._write_through)
                leaf.last_access = tick
                node.children[ids[i]] = leaf
                self.size_tokens += len(leaf.key)
                self.host_size_tokens += len(leaf.key) if leaf.on_host else 0
                break
            m = _common(child.key, ids, i)
            child.last_access = tick
            if m < len(child.key):
                child = self._split(child, m)
            if not child.on_device:  # prefilled again: back on the device
                child.on_device = True
                self.size_tokens += len(child.key)
            i += m
            node = child
        self._fit()

    def _fit(self) -> None:
        """Evicts down to the device's capacity, then the host's."""
        if self.size_tokens > self.capacity_tokens:
            self._evict_device(self.size_tokens - self.capacity_tokens)
        if self.host_size_tokens > self.host_capacity_tokens:
            self._evict_host(self.host_size_tokens - self.host_capacity_tokens)

    def _split(self, child: _Node, m: int) -> _Node:
        parent = child.parent
        assert parent is not None
        head = _Node(child.key[:m], parent, child.on_host)
        head.last_access = child.last_access
        head.on_device = child.on_device
        parent.children[head.key[0]] = head
        child.key = child.key[m:]
        child.parent = head
        head.children[child.key[0]] = child
        return head

    def _evict_device(self, n_tokens: int) -> None:
        """Frees device tokens from the least recently used nodes with nothing below them on the
        device: those with a host copy stay in the tree on the host alone, the others go."""
        leaves = [(n.last_access, id(n), n) for n in self._nodes()
                  if n.on_device and not any(c.on_device for c in n.children.values())]
        heapq.heapify(leaves)
        while n_tokens > 0 and leaves:
            _, _, leaf = heapq.heappop(leaves)
            parent = leaf.parent
            assert parent is not None
            n_tokens -= len(leaf.key)
            self.size_tokens -= len(leaf.key)
            leaf.on_device = False
            if not leaf.on_host:
                del parent.children[leaf.key[0]]
            if parent is not self.root and not any(c.on_device for c in parent.children.values()):
                heapq.heappush(leaves, (parent.last_access, id(parent), parent))

    def _evict_host(self, n_tokens: int) -> None:
        """Drops the least recently used leaves that only the host holds."""
        leaves = [(n.last_access, id(n), n) for n in self._nodes() if not n.on_device and not n.children]
        heapq.heapify(leaves)
        while n_tokens > 0 and leaves:
            _, _, leaf = heapq.heappop(leaves)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            n_tokens -= len(leaf.key)
            self.host_size_tokens -= len(leaf.key)
            if parent is not self.root and not parent.on_device and not parent.children:
                heapq.heappush(leaves, (parent.last_access, id(parent), parent))

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())
