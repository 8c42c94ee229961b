"""Constrained decoding: which next tokens an answer may take.

`JsonKeys` keeps the keys of an answer's top-level JSON objects among a fixed set: the
environment model's rewrite then names only fields that the task spec has (`env_model.
constrain_keys`), as a serving engine's guided JSON decoding (vLLM's `response_format` with a
JSON schema) does. Only the keys are constrained: the values, text around the object and nested
objects are the model's own, and the environment still validates the whole rewrite.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import torch
from transformers.tokenization_utils_base import PreTrainedTokenizerBase


class TokenConstraint(Protocol):
    """Which tokens may come next after an answer's `tokens` (its response so far)."""

    def allowed(self, tokens: Sequence[int], vocab_size: int) -> torch.Tensor | None:
        """A boolean mask of `vocab_size` entries (True: allowed), or None: any token."""
        ...


@dataclass(frozen=True)
class _Scan:
    """Where a JSON lexer stands in the answer's text: the open containers, inside a string or
    not (after a backslash or not), the top-level key being written (None outside one), and
    whether a key comes next in the innermost object."""

    stack: str = ""
    in_string: bool = False
    escape: bool = False
    key: str | None = None
    expect_key: bool = False


class JsonKeys:
    """Top-level JSON object keys among `keys`, for a tokenizer's tokens.

    A token is allowed unless the text it appends writes a top-level key that is not in `keys`
    (or starts one that no key in `keys` begins with). Text that is not JSON is left alone: a
    `{` anywhere opens an object, and its keys are then held to the set.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("JsonKeys needs at least one key")
        self.keys = tuple(sorted(set(keys)))
        size = len(tokenizer)
        # Each token's text on its own; a byte-level tokenizer's text of a sequence is the
        # concatenation of these (the keys are ASCII, so split UTF-8 bytes never touch them).
        self.pieces = [str(tokenizer.decode([i])) for i in range(size)]
        self.quoted = [i for i, p in enumerate(self.pieces) if '"' in p]
        self.by_piece: dict[str, list[int]] = {}
        for i, piece in enumerate(self.pieces):
            self.by_piece.setdefault(piece, []).append(i)

    def _step(self, scan: _Scan, char: str) -> _Scan | None:
        """The lexer after `char`, or None when `char` breaks the key set."""
        if scan.in_string:
            if scan.key is None:  # a value's string, or a nested key: free
                if scan.escape:
                    return replace(scan, escape=False)
                if char == "\\":
                    return replace(scan, escape=True)
                return replace(scan, in_string=False) if char == '"' else scan
            if char == '"':
                return replace(scan, in_string=False, key=None) if scan.key in self.keys else None
            key = scan.key + char
            return replace(scan, key=key) if any(k.startswith(key) for k in self.keys) else None
        if char == '"':
            top_key = scan.expect_key and scan.stack == "{"
            return replace(scan, in_string=True, key="" if top_key else None, expect_key=False)
        if char in "{[":
            return replace(scan, stack=scan.stack + char, expect_key=char == "{")
        if char in "}]":
            return replace(scan, stack=scan.stack[:-1], expect_key=False)
        if char == ",":
            return replace(scan, expect_key=scan.stack.endswith("{"))
        if char == ":":
            return replace(scan, expect_key=False)
        return scan

    def _scan(self, text: str, scan: _Scan | None = None) -> _Scan | None:
        scan = scan or _Scan()
        for char in text:
            scan = self._step(scan, char)
            if scan is None:
                return None
        return scan

    def allowed(self, tokens: Sequence[int], vocab_size: int) -> torch.Tensor | None:
        # A token the tokenizer cannot decode on its own (ids past its vocabulary) is text-free.
        text = "".join(self.pieces[t] for t in tokens if t < len(self.pieces))
        scan = self._scan(text)
        if scan is None:  # already off the set: a step where no token could keep it on
            return None
        mask = torch.ones(vocab_size, dtype=torch.bool)
        if scan.key is not None:
            # Inside a top-level key: only the pieces that continue one of the keys, and the
            # quoted pieces that close one (their rest is checked in full).
            mask[:] = False
            for k in self.keys:
                if k.startswith(scan.key):
                    rest = k[len(scan.key) :]
                    for end in range(1, len(rest) + 1):
                        for i in self.by_piece.get(rest[:end], ()):
                            if i < vocab_size:
                                mask[i] = True
            for i in self.quoted:
                if i < vocab_size and not mask[i]:
                    mask[i] = self._scan(self.pieces[i], scan) is not None
            return mask
        # Elsewhere a token can only break the set by opening a key: one with a quote.
        for i in self.quoted:
            if i < vocab_size and self._scan(self.pieces[i], scan) is None:
                mask[i] = False
        return mask
