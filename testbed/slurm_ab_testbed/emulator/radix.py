"""The prefix (radix) cache of the emulated scheduler, as SGLang 0.5.23's ``RadixCache``.

Follows ``sglang/srt/mem_cache/radix_cache.py`` (match_prefix, insert, _split_node, evict,
inc/dec_lock_ref) and its use in ``managers/schedule_batch.py`` / ``mem_cache/common.py``:

- keys are token ids, matched and stored in whole pages (``--page-size``, default 1): a partial
  page never matches; a request matches at most ``input_len - 1`` tokens
  (``Req._compute_max_prefix_len``: one token is always computed, for its logits);
- a running request locks the path it uses (``lock_ref``): locked tokens are in use, the rest of
  the tree is *evictable* and counts as free for admission (``available + evictable``); new KV
  evicts least-recently-used unlocked leaves first (``evict``, LRU strategy);
- a request inserts its prompt after each prefill chunk (``checkpoint``) and its prompt plus
  output (all but the last token, which has no KV yet) when it finishes; a later request with the
  same prefix skips those tokens' prefill.

Only lengths matter to the emulator (no KV values), so a node holds its key and counts; the
tree compares keys with list slices (C speed), which keeps a 16K-token match cheap.
"""
from __future__ import annotations

import heapq
import itertools
from typing import Optional, Sequence


class Node:
    __slots__ = ("key", "children", "parent", "lock", "last")

    def __init__(self, key: list[int], parent: Optional["Node"]):
        self.key = key
        self.children: dict = {}
        self.parent = parent
        self.lock = 0
        self.last = 0


class RadixCache:
    def __init__(self, page_size: int = 1):
        self.page = max(1, int(page_size))
        self._clock = itertools.count(1)
        self.reset()

    def reset(self) -> None:
        """Empty the tree (``/flush_cache``); nothing may be locked."""
        self.root = Node([], None)
        self.root.lock = 1
        self.total = 0            # tokens in the tree
        self.protected = 0        # tokens on paths locked by running requests

    @property
    def evictable(self) -> int:
        return self.total - self.protected

    # ---- keys ----------------------------------------------------------------------------------
    def _child_key(self, ids: Sequence[int], at: int):
        return ids[at] if self.page == 1 else tuple(ids[at:at + self.page])

    def _aligned(self, n: int) -> int:
        return n - n % self.page

    def _common(self, key: list[int], ids: Sequence[int], at: int) -> int:
        """Length (whole pages) of the common prefix of key and ids[at:]."""
        n = min(len(key), len(ids) - at)
        if ids[at:at + n] == key[:n]:
            return self._aligned(n)
        i = 0
        while i < n and key[i] == ids[at + i]:
            i += 1
        return self._aligned(i)

    # ---- match / insert ------------------------------------------------------------------------
    def match(self, ids: Sequence[int], limit: Optional[int] = None) -> tuple[int, Node]:
        """Longest cached prefix of ids (at most ``limit`` tokens, whole pages): (length, last node).
        Splits a node where the match ends inside it, as ``_match_prefix_helper`` does."""
        end = self._aligned(min(len(ids), len(ids) if limit is None else max(0, limit)))
        ids = ids[:end] if end < len(ids) else ids
        node, at, now = self.root, 0, next(self._clock)
        node.last = now
        while at < end:
            child = node.children.get(self._child_key(ids, at))
            if child is None:
                break
            child.last = now
            n = self._common(child.key, ids, at)
            if n == 0:
                break
            if n < len(child.key):
                node = self._split(child, n)
                at += n
                break
            node, at = child, at + n
        return at, node

    def insert(self, ids: Sequence[int]) -> tuple[int, Node]:
        """Insert the page-aligned part of ids; returns (tokens that were already cached, the
        node ending the key)."""
        end = self._aligned(len(ids))
        ids = ids[:end] if end < len(ids) else ids
        node, at, now = self.root, 0, next(self._clock)
        node.last = now
        while at < end:
            child = node.children.get(self._child_key(ids, at))
            if child is None:
                break
            child.last = now
            n = self._common(child.key, ids, at)
            if n < len(child.key):
                child = self._split(child, n)
            node, at = child, at + n
        matched = at
        if at < end:
            leaf = Node(list(ids[at:]), node)
            leaf.last = now
            node.children[self._child_key(leaf.key, 0)] = leaf
            self.total += len(leaf.key)
            node = leaf
        return matched, node

    def _split(self, child: Node, n: int) -> Node:
        """child -> new(child.key[:n]) -> child(child.key[n:]); returns the new upper node."""
        parent = child.parent
        new = Node(child.key[:n], parent)
        new.lock, new.last = child.lock, child.last
        parent.children[self._child_key(child.key, 0)] = new
        child.key = child.key[n:]
        child.parent = new
        new.children[self._child_key(child.key, 0)] = child
        return new

    # ---- locks ---------------------------------------------------------------------------------
    def lock(self, node: Node) -> None:
        while node is not self.root:
            if node.lock == 0:
                self.protected += len(node.key)
            node.lock += 1
            node = node.parent

    def unlock(self, node: Node) -> None:
        while node is not self.root:
            node.lock -= 1
            if node.lock == 0:
                self.protected -= len(node.key)
            node = node.parent

    @staticmethod
    def depth(node: Node) -> int:
        n = 0
        while node.parent is not None:
            n += len(node.key)
            node = node.parent
        return n

    # ---- eviction ------------------------------------------------------------------------------
    def evict(self, tokens: int) -> int:
        """Drop least-recently-used unlocked leaves until ``tokens`` were freed (or nothing is
        left to evict); returns the tokens freed."""
        if tokens <= 0 or self.evictable <= 0:
            return 0
        heap = [(n.last, id(n), n) for n in self._leaves() if n.lock == 0]
        heapq.heapify(heap)
        freed = 0
        while freed < tokens and heap:
            _, _, n = heapq.heappop(heap)
            parent = n.parent
            del parent.children[self._child_key(n.key, 0)]
            self.total -= len(n.key)
            freed += len(n.key)
            if parent is not self.root and not parent.children and parent.lock == 0:
                heapq.heappush(heap, (parent.last, id(parent), parent))
        return freed

    def _leaves(self):
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            if n.children:
                stack.extend(n.children.values())
            else:
                yield n
