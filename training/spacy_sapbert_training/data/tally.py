"""Counts that a step keeps of what it did (merged concepts, pairs left out, mentions widened):
named, starting at 0, read and written as attributes, and summed up in a `summary`."""
from collections import Counter


class Tally(Counter):
    """A Counter whose counts read and write as attributes (`stats.links += 1`); subclasses add
    a `summary()` sentence. Attributes starting with "_", and those set in __init__ with
    object.__setattr__, stay ordinary attributes."""

    def __getattr__(self, name: str) -> int:
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]

    def __setattr__(self, name: str, value: int) -> None:
        self[name] = value
