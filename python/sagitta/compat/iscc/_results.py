"""Results of the iscc-usearch surface: usearch's ``Match``, ``Matches``
and ``BatchMatches``."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ._args import _key_out


class Match:
    """One hit: ``key`` and ``distance``."""

    __slots__ = ("distance", "key")

    def __init__(self, key: int, distance: float) -> None:
        self.key = key
        self.distance = distance

    def to_tuple(self) -> tuple[int, float]:
        return (self.key, self.distance)

    def __repr__(self) -> str:
        return f"Match(key={self.key}, distance={self.distance})"


class Matches:
    """The hits of one query (as usearch's ``Matches``)."""

    def __init__(self, keys: np.ndarray, distances: np.ndarray) -> None:
        self.keys = keys
        self.distances = distances

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> Match:
        return Match(_key_out(self.keys[i]), float(self.distances[i]))

    def __iter__(self) -> Iterator[Match]:
        return (self[i] for i in range(len(self)))

    def to_list(self) -> list[tuple[int, float]]:
        return [(_key_out(k), float(d)) for k, d in zip(self.keys, self.distances)]

    def __repr__(self) -> str:
        return f"Matches({len(self)})"


class BatchMatches:
    """The hits of a batch (as usearch's ``BatchMatches``): ``keys`` and
    ``distances`` of shape (queries, count), ``counts`` valid hits per
    query; empty slots hold key 0 and distance ``inf``."""

    def __init__(self, keys: np.ndarray, distances: np.ndarray, counts: np.ndarray) -> None:
        self.keys = keys
        self.distances = distances
        self.counts = counts

    def __len__(self) -> int:
        return len(self.counts)

    def __getitem__(self, i: int) -> Matches:
        n = int(self.counts[i])
        return Matches(self.keys[i, :n], self.distances[i, :n])

    def __iter__(self) -> Iterator[Matches]:
        return (self[i] for i in range(len(self)))

    def to_list(self) -> list[list[tuple[int, float]]]:
        return [m.to_list() for m in self]

    def __repr__(self) -> str:
        return f"BatchMatches({len(self)})"
