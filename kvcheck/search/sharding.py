"""What the exhaustive search's shards and the process that drives them agree on: the records
they exchange (`Candidate`, `Found`) and the shape of a shard (`ShardLike`).

`kvcheck.search.exhaust` defines the search and its `Shard`; `kvcheck.search.exhaust_parallel`
drives one shard per worker process for `exhaust --workers N`. The driver needs the shard's shape
but not its code (the search hands it `Shard` as an argument), so both import this module and
neither imports the other for its types: no import cycle, not even one made for type checkers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Any, Protocol, TypeVar

from kvcheck.core.family import FamilyEngine, ReferenceModel
from kvcheck.core.target import Target

__all__ = ["Candidate", "Found", "NodeLike", "PlanLike", "ShardLike"]

# One transition's child as a shard keeps it for the next level (a state's best path so far):
# its steps, start config and events, and its state (a node; the index of the shard that holds
# it, until it sends it; or what that shard sent: pickled bytes, or None when the state did not
# pickle and is replayed). Events are the family's.
Candidate = tuple[int, int, tuple[Any, ...], Any]
# A counterexample found at a level: start config, events, the invariant its last event broke.
Found = tuple[int, tuple[Any, ...], str]

_Node = TypeVar("_Node", bound="NodeLike")


class NodeLike(Protocol):
    """A state of the search: what the driver pickles to send it to its owner."""

    engine: FamilyEngine
    model: ReferenceModel


class _BoundsLike(Protocol):
    @property
    def events(self) -> int | None:
        """Events per scenario at most (None: until no new state is found)."""


class PlanLike(Protocol):
    """The search's plan as the driver reads it: the family (a worker loads it) and the deepest
    level to search."""

    @property
    def family(self) -> str:
        """The family searched (`kvcheck.core.family.family`)."""

    @property
    def bounds(self) -> _BoundsLike:
        """What the search enumerates."""


class ShardLike(Protocol[_Node]):
    """The states one worker owns, searched level by level (`kvcheck.search.exhaust.Shard`
    documents each step)."""

    # Read-only here (properties): a protocol's plain attributes would have to match exactly.
    @property
    def frontier(self) -> Sized:
        """The states to expand at the next level."""

    @property
    def seen(self) -> Sized:
        """The states kept from the levels before."""

    @property
    def found(self) -> Sequence[Found]:
        """The violations this level found."""

    @property
    def scenarios(self) -> int:
        """Transitions tried so far."""

    @property
    def states(self) -> int:
        """Distinct states kept so far."""

    def expand(self, look: Callable[[], None]) -> None:
        """Expand the frontier, calling `look` every so often (limits, progress)."""

    def offers(self) -> list[dict[bytes, tuple[int, int, tuple[Any, ...]]]]:
        """Per shard, the children it owns: steps, start config, events."""

    def select(
        self, offers: Sequence[tuple[int, dict[bytes, tuple[int, int, tuple[Any, ...]]]]]
    ) -> dict[int, list[bytes]]:
        """Merge the others' offers; the keys whose states each sender is to send."""

    def give(self, owner: int, keys: Sequence[bytes], encode: Callable[[_Node], Any]) -> Any:
        """The states `owner` asked for, each as `encode` makes it."""

    def merge(
        self,
        states: Mapping[bytes, Any] | None = None,
        decode: Callable[[Candidate], _Node] | None = None,
    ) -> None:
        """Make this level's candidates the next frontier."""

    def restore(
        self, candidate: Candidate, state: tuple[FamilyEngine, ReferenceModel] | None
    ) -> _Node:
        """Another shard's candidate as a node, from its state sent or by replaying it."""

    def collect(self) -> None:
        """Collect garbage at the shard's own times."""


# How the driver makes each worker's shard: `factory(target, plan, index, shards)`.
ShardFactory = Callable[[Target, Any, int, int], ShardLike[Any]]
