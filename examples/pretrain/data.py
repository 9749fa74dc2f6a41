"""Packs the byte-level corpus (make_dataset.py) into fixed-length sequences of documents.

Each document is BOS + its bytes. Documents are taken in a seeded random order and laid end to
end; a sequence of `seq_len` tokens holds whole documents and, at its ends, pieces of documents
cut at the boundary (a cut document continues in the next sequence as a new piece that cannot
see its first part, as in standard packed pretraining). Each piece is one attention document
(cu_seqlens), its RoPE positions start at 0, and every token's target is the next byte of its
own document (-100, ignored, after a document's last byte). The order depends only on the seed,
so every attention backend sees the same tokens at the same step.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass

import numpy as np

BOS = 256
IGNORE = -100


@dataclass
class Corpus:
    tokens: np.ndarray  # uint8, all documents concatenated
    offsets: np.ndarray  # int64, n_docs + 1

    @property
    def n_docs(self) -> int:
        return len(self.offsets) - 1

    def document(self, i: int) -> np.ndarray:
        """BOS + the bytes of document i, as int64."""
        body = self.tokens[self.offsets[i]:self.offsets[i + 1]].astype(np.int64)
        return np.concatenate(([BOS], body))


def load(path: str | pathlib.Path) -> tuple[Corpus, Corpus, dict]:
    with np.load(path) as z:
        train = Corpus(z["train_tokens"], z["train_offsets"])
        heldout = Corpus(z["heldout_tokens"], z["heldout_offsets"])
        manifest = json.loads(bytes(z["manifest"]).decode())
    return train, heldout, manifest


@dataclass
class Batch:
    inputs: np.ndarray  # int64 (tokens,)
    targets: np.ndarray  # int64 (tokens,), IGNORE where there is no next byte
    positions: np.ndarray  # int64 (tokens,), position within the piece
    cu_seqlens: np.ndarray  # int32 (pieces + 1,)
    max_seqlen: int


class PackedStream:
    """Yields sequences of exactly seq_len tokens, documents in a seeded order (reshuffled with
    the same generator at each epoch)."""

    def __init__(self, corpus: Corpus, seq_len: int, seed: int, shuffle: bool = True):
        self.corpus, self.seq_len, self.shuffle = corpus, seq_len, shuffle
        self.rng = np.random.default_rng(seed)
        self.epoch = 0
        self._new_epoch()

    def _new_epoch(self):
        n = self.corpus.n_docs
        self.order = self.rng.permutation(n) if self.shuffle else np.arange(n)
        self.next_doc = 0
        self.current = None  # (document tokens, position of the next unread token)

    def state(self) -> dict:
        """Where the stream stands (picklable, small): restoring it continues the same order."""
        at = None if self.current is None else self.current[1]
        return {"rng": self.rng.bit_generator.state, "epoch": self.epoch, "order": self.order,
                "next_doc": self.next_doc, "current_at": at}

    def load_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.epoch, self.order, self.next_doc = state["epoch"], state["order"], state["next_doc"]
        at = state["current_at"]
        # the current document is the last one taken
        self.current = None if at is None else (
            self.corpus.document(int(self.order[self.next_doc - 1])), at)

    def _take_document(self):
        if self.next_doc == len(self.order):
            self.epoch += 1
            self._new_epoch()
        doc = self.corpus.document(int(self.order[self.next_doc]))
        self.next_doc += 1
        return doc

    def next_sequence(self):
        """(inputs, targets, piece lengths) of one sequence."""
        inputs, targets, lengths = [], [], []
        room = self.seq_len
        while room > 0:
            if self.current is None:
                self.current = (self._take_document(), 0)
            doc, at = self.current
            n = min(room, len(doc) - at)
            inputs.append(doc[at:at + n])
            nxt = doc[at + 1:at + n + 1]
            if len(nxt) < n:  # the document's last token has no target
                nxt = np.concatenate((nxt, [IGNORE]))
            targets.append(nxt)
            lengths.append(n)
            room -= n
            at += n
            self.current = None if at == len(doc) else (doc, at)
        return np.concatenate(inputs), np.concatenate(targets), lengths

    def next_batch(self, sequences: int) -> Batch:
        inputs, targets, lengths = [], [], []
        for _ in range(sequences):
            i, t, l = self.next_sequence()
            inputs.append(i)
            targets.append(t)
            lengths += l
        cu = np.zeros(len(lengths) + 1, dtype=np.int32)
        np.cumsum(lengths, out=cu[1:])
        positions = np.concatenate([np.arange(n) for n in lengths])
        return Batch(np.concatenate(inputs), np.concatenate(targets), positions, cu,
                     int(max(lengths)))
