"""Config spaces: the choices a template offers, and one point of them (AutoTVM's ``task/space.py``).

A template is written once and run in two modes. Given a :class:`ConfigSpace` it *declares* its
knobs (``cfg.define_split(...)``, ``define_knob``, ``define_reorder``, ``define_annotate``) and
is built with each knob's first choice; given a :class:`ConfigEntity` (one point of the space)
the same calls do nothing and ``cfg["name"]`` returns the chosen entity, which the template
applies to its schedule. A space's size is the product of its knobs' sizes; a config's index is
a mixed-radix number over the knobs in the order they were defined, so an index names the same
config in every process that builds the same space.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from vtakit.errors import ScheduleError

__all__ = ["SplitEntity", "ReorderEntity", "AnnotateEntity", "OtherOptionEntity", "Knob", "ConfigSpace",
           "ConfigEntity", "ANNOTATIONS"]

#: The annotations ``define_annotate`` chooses from (their one-hot position is a knob feature).
ANNOTATIONS = ("none", "unroll", "vec")
_SPLIT_POLICIES = ("factors", "power2", "verbose", "candidate")
_REORDER_POLICIES = ("identity", "all", "candidate")
_ANNOTATE_POLICIES = {"try_unroll": ("none", "unroll"), "try_vec": ("none", "vec"),
                      "try_unroll_vec": ("none", "unroll", "vec")}


@dataclass(frozen=True)
class SplitEntity:
    """Split factors, outermost first; the first is ``-1`` (whatever is left of the extent)."""

    size: tuple[int, ...]

    def apply(self, s: Any, stage: Any, axis: Any) -> list[Any]:
        """Split ``axis`` of ``stage`` by these factors; returns the axes, outermost first."""
        axes = []
        for factor in reversed(self.size[1:]):
            axis, inner = s[stage].split(axis, factor=factor)
            axes.append(inner)
        return [axis, *reversed(axes)]

    def to_json(self) -> list[int]:
        return list(self.size)


@dataclass(frozen=True)
class ReorderEntity:
    """A permutation of axes: position ``i`` holds the index of the axis that goes there."""

    perm: tuple[int, ...]

    def apply(self, s: Any, stage: Any, axes: Sequence[Any]) -> list[Any]:
        order = [axes[i] for i in self.perm]
        s[stage].reorder(*order)
        return order

    def to_json(self) -> list[int]:
        return list(self.perm)


@dataclass(frozen=True)
class AnnotateEntity:
    """One annotation per axis, from :data:`ANNOTATIONS`."""

    anns: tuple[str, ...]

    def apply(self, s: Any, stage: Any, axes: Sequence[Any]) -> None:
        for axis, ann in zip(axes, self.anns):
            if ann == "unroll":
                s[stage].unroll(axis)
            elif ann == "vec":
                s[stage].vectorize(axis)

    def to_json(self) -> list[str]:
        return list(self.anns)


@dataclass(frozen=True)
class OtherOptionEntity:
    """One value of a :meth:`ConfigSpace.define_knob` knob."""

    val: Any

    def to_json(self) -> Any:
        return self.val


_KIND_OF = {SplitEntity: "sp", ReorderEntity: "re", AnnotateEntity: "an", OtherOptionEntity: "ot"}
_FROM_JSON: dict[str, Callable[[Any], Any]] = {
    "sp": lambda v: SplitEntity(tuple(v)), "re": lambda v: ReorderEntity(tuple(v)),
    "an": lambda v: AnnotateEntity(tuple(v)), "ot": lambda v: OtherOptionEntity(v)}


@dataclass(frozen=True)
class Knob:
    """One dimension of a space: its name, kind (``sp``/``re``/``an``/``ot``) and its choices."""

    name: str
    kind: str
    entities: tuple[Any, ...]

    def __len__(self) -> int:
        return len(self.entities)

    def index_of(self, entity: Any) -> int:
        try:
            return self.entities.index(entity)
        except ValueError:
            raise ScheduleError(f"knob {self.name!r} has no choice {entity!r}; expected one of "
                                f"{[e.to_json() for e in self.entities][:20]}") from None


def _factors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _split_candidates(extent: int, policy: str, max_factor: int | None) -> list[int]:
    if policy == "factors":
        cands = _factors(extent)
    elif policy == "power2":
        cands = [1 << i for i in range(extent.bit_length()) if 1 << i <= extent]
    else:  # verbose: divisors and powers of two
        cands = sorted(set(_factors(extent)) | {1 << i for i in range(extent.bit_length()) if 1 << i <= extent})
    return [c for c in cands if max_factor is None or c <= max_factor]


def _extent_of(axis_or_extent: Any) -> int:
    if isinstance(axis_or_extent, int) and not isinstance(axis_or_extent, bool):
        return axis_or_extent
    dom = getattr(axis_or_extent, "dom", None)
    extent = getattr(getattr(dom, "extent", None), "value", None)
    if isinstance(extent, int):
        return extent
    raise ScheduleError(f"define_split needs an axis of constant extent or an int extent, got {axis_or_extent!r}")


class ConfigSpace:
    """The space of a template: knobs in definition order. ``len(space)`` configs, ``space.get(i)``
    or ``space[i]`` the ``i``-th; while the template declares knobs, ``space["name"]`` is the
    knob's first choice, so the template can be built once."""

    def __init__(self) -> None:
        self.knobs: dict[str, Knob] = {}
        self.flop = 0
        self._fallback: dict[str, Any] | None = None
        self._defaults: dict[str, Any] = {}
        self._filter: Callable[["ConfigEntity"], str | None] | None = None
        self._invalid: frozenset[int] | None = None

    # ------------------------------------------------------------------ declaring knobs
    def define_split(self, name: str, axis_or_extent: Any, policy: str = "factors", num_outputs: int = 2,
                     max_factor: int | None = None, filter: Callable[[SplitEntity], bool] | None = None,
                     candidate: Sequence[Sequence[int]] | None = None) -> None:
        """Split an axis (or an extent) into ``num_outputs`` factors whose product is the extent
        (``factors``: exact divisors; ``power2``/``verbose`` allow a tail: the outer factor covers it)."""
        extent = _extent_of(axis_or_extent)
        if policy not in _SPLIT_POLICIES:
            raise ScheduleError(f"define_split {name!r}: unknown policy {policy!r}; expected one of {_SPLIT_POLICIES}")
        if not isinstance(num_outputs, int) or num_outputs < 2:
            raise ScheduleError(f"define_split {name!r}: num_outputs must be an int >= 2, got {num_outputs!r}")
        if policy == "candidate":
            if not candidate:
                raise ScheduleError(f"define_split {name!r}: policy 'candidate' needs a candidate list")
            entities = [SplitEntity((-1, *c[1:])) for c in candidate]
        else:
            entities = []
            for inner in self._split_sizes(extent, policy, max_factor, num_outputs - 1):
                entities.append(SplitEntity((-1, *inner)))
        if filter is not None:
            entities = [e for e in entities if filter(e)]
        self._add(Knob(name, "sp", tuple(entities)))

    @staticmethod
    def _split_sizes(extent: int, policy: str, max_factor: int | None, n: int) -> Iterator[tuple[int, ...]]:
        """Inner factors (n of them, outermost first) whose product fits ``extent``."""
        if n == 0:
            yield ()
            return
        for last in _split_candidates(extent, policy, max_factor):
            rest = extent // last if policy == "factors" else math.ceil(extent / last)
            for head in ConfigSpace._split_sizes(rest, policy, max_factor, n - 1):
                yield (*head, last)

    def define_reorder(self, name: str, axes: Sequence[Any], policy: str = "all",
                       candidate: Sequence[Sequence[int]] | None = None) -> None:
        """Orders of ``axes``: ``identity``, ``all`` permutations, or the ``candidate`` permutations."""
        n = len(axes)
        if policy not in _REORDER_POLICIES:
            raise ScheduleError(f"define_reorder {name!r}: unknown policy {policy!r}; expected one of "
                                f"{_REORDER_POLICIES}")
        if policy == "identity":
            perms = [tuple(range(n))]
        elif policy == "all":
            perms = list(itertools.permutations(range(n)))
        else:
            perms = [tuple(c) for c in candidate or ()]
            for p in perms:
                if sorted(p) != list(range(n)):
                    raise ScheduleError(f"define_reorder {name!r}: {list(p)} is not a permutation of {n} axes")
        self._add(Knob(name, "re", tuple(ReorderEntity(p) for p in perms)))

    def define_annotate(self, name: str, axes: Sequence[Any], policy: str) -> None:
        """Per-axis annotations: ``try_unroll``, ``try_vec`` or ``try_unroll_vec`` (none or each)."""
        if policy not in _ANNOTATE_POLICIES:
            raise ScheduleError(f"define_annotate {name!r}: unknown policy {policy!r}; expected one of "
                                f"{sorted(_ANNOTATE_POLICIES)}")
        choices = _ANNOTATE_POLICIES[policy]
        self._add(Knob(name, "an", tuple(AnnotateEntity(a) for a in itertools.product(choices, repeat=len(axes)))))

    def define_knob(self, name: str, values: Sequence[Any], default: Any = None) -> None:
        """A knob with explicit values (JSON-serialisable: ints, floats, strings, bools). ``default``:
        a knob added after logs were written; a record without it means ``default`` (see
        :meth:`entity_from_json`)."""
        self._add(Knob(name, "ot", tuple(OtherOptionEntity(v) for v in values)))
        if default is not None:
            if default not in values:
                raise ScheduleError(f"define_knob {name!r}: default {default!r} is not one of {list(values)}")
            self._defaults[name] = default

    def define_filter(self, predicate: Callable[["ConfigEntity"], str | None]) -> None:
        """Static validity: ``predicate(cfg)`` is ``None`` for a config the template can build, else
        the reason it cannot (tiles overflowing an SRAM, too many threads). Tuners never propose
        an invalid config (:meth:`invalid_indices`: they start with them visited), so no trial
        is spent on one; ``len(space)`` still counts them (indices stay those of the full product)."""
        self._filter = predicate
        self._invalid = None

    def invalid_reason(self, cfg: "ConfigEntity | int") -> str | None:
        """Why config ``cfg`` (an entity or an index) is statically invalid, or ``None``."""
        if self._filter is None:
            return None
        return self._filter(self.get(cfg) if isinstance(cfg, int) else cfg)

    def invalid_indices(self) -> frozenset[int]:
        """The indices the filter rejects (computed once per space)."""
        if self._invalid is None:
            self._invalid = frozenset() if self._filter is None else \
                frozenset(i for i in range(len(self)) if self._filter(self.get(i)) is not None)
        return self._invalid

    def valid_count(self) -> int:
        """How many configs the filter accepts."""
        return len(self) - len(self.invalid_indices())

    def add_flop(self, flop: int) -> None:
        self.flop += int(flop)

    def _add(self, knob: Knob) -> None:
        if knob.name in self.knobs:
            raise ScheduleError(f"knob {knob.name!r} is defined twice in one template")
        self.knobs[knob.name] = knob

    # ------------------------------------------------------------------ reading
    @property
    def is_fallback(self) -> bool:
        return False

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            if key not in self.knobs:
                raise ScheduleError(f"no knob {key!r}; the template defined {list(self.knobs)}")
            entities = self.knobs[key].entities
            if not entities:
                raise ScheduleError(f"knob {key!r} has no choices (an empty config space)")
            return entities[0]
        return self.get(key)

    def __len__(self) -> int:
        return math.prod(len(k) for k in self.knobs.values())

    def __iter__(self) -> Iterator["ConfigEntity"]:
        return (self.get(i) for i in range(len(self)))

    @property
    def dims(self) -> list[int]:
        """The number of choices of each knob, in definition order."""
        return [len(k) for k in self.knobs.values()]

    def index_to_point(self, index: int) -> list[int]:
        """The choice of each knob (definition order) that config ``index`` makes."""
        point = []
        for d in self.dims:
            point.append(index % d)
            index //= d
        return point

    def point_to_index(self, point: Sequence[int]) -> int:
        index, scale = 0, 1
        for p, d in zip(point, self.dims):
            index += p * scale
            scale *= d
        return index

    def get(self, index: int) -> "ConfigEntity":
        """Config ``index`` (0 <= index < len)."""
        n = len(self)
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
            raise ScheduleError(f"config index {index!r} is out of range; the space has {n} configs (0..{n - 1})")
        point = self.index_to_point(index)
        return ConfigEntity(self, index, {name: k.entities[p] for (name, k), p in zip(self.knobs.items(), point)})

    def entity_from_json(self, entity: Sequence[Sequence[Any]]) -> "ConfigEntity":
        """The config that a record's ``entity`` list (``[[name, kind, value], ...]``) names."""
        values = {name: _FROM_JSON[kind](value) for name, kind, value in entity}
        for name, default in self._defaults.items():    # knobs added after the record was written
            values.setdefault(name, OtherOptionEntity(default))
        if set(values) != set(self.knobs):
            raise ScheduleError(f"a config of knobs {sorted(values)} does not belong to a space of {sorted(self.knobs)}")
        point = [k.index_of(values[name]) for name, k in self.knobs.items()]
        return self.get(self.point_to_index(point))

    # ------------------------------------------------------------------ fallback
    def set_fallback(self, **choices: Any) -> None:
        """The config to use when no tuning record exists (entities or plain values per knob)."""
        self._fallback = choices

    @property
    def fallback(self) -> "ConfigEntity":
        """The template's default config (its hand-chosen knobs), else config 0."""
        if not self._fallback:
            return self.get(0)
        point = []
        for name, knob in self.knobs.items():
            choice = self._fallback.get(name)
            if choice is None:
                point.append(0)
                continue
            if not isinstance(choice, (SplitEntity, ReorderEntity, AnnotateEntity, OtherOptionEntity)):
                choice = _FROM_JSON[knob.kind](choice)
            point.append(knob.index_of(choice))
        cfg = self.get(self.point_to_index(point))
        cfg.is_fallback = True
        return cfg

    def __repr__(self) -> str:
        lines = [f"ConfigSpace ({len(self)} configs):"]
        for name, k in self.knobs.items():
            lines.append(f"  {name} ({k.kind}, {len(k)}): {[e.to_json() for e in k.entities[:8]]}"
                         + (" ..." if len(k) > 8 else ""))
        return "\n".join(lines)


class ConfigEntity:
    """One config of a space: ``cfg["name"]`` is the chosen entity; ``define_*`` do nothing."""

    def __init__(self, space: ConfigSpace, index: int, entity_map: dict[str, Any]) -> None:
        self.space = space
        self.index = index
        self.entity_map = entity_map
        self.is_fallback = False

    def __getitem__(self, name: str) -> Any:
        try:
            return self.entity_map[name]
        except KeyError:
            raise ScheduleError(f"no knob {name!r}; the template defined {list(self.entity_map)}") from None

    def _noop(self, *args: Any, **kwargs: Any) -> None:
        return None

    define_split = define_reorder = define_annotate = define_knob = define_filter = add_flop = _noop

    def to_json(self) -> list[list[Any]]:
        """``[[name, kind, value], ...]``: what a record stores (stable across processes and runs)."""
        return [[name, _KIND_OF[type(e)], e.to_json()] for name, e in self.entity_map.items()]

    def knob_values(self) -> dict[str, Any]:
        """Each knob's value (split: the inner factors; others: the value) for reports."""
        return {name: (list(e.size[1:]) if isinstance(e, SplitEntity) else e.to_json())
                for name, e in self.entity_map.items()}

    def get_flatten_feature(self) -> list[float]:
        """The 'knob' feature: split factors, permutations, one-hot annotations, numeric knob values."""
        out: list[float] = []
        for name, e in self.entity_map.items():
            if isinstance(e, SplitEntity):
                out.extend(float(f) for f in e.size[1:])
            elif isinstance(e, ReorderEntity):
                out.extend(float(p) for p in e.perm)
            elif isinstance(e, AnnotateEntity):
                for a in e.anns:
                    out.extend(1.0 if a == kind else 0.0 for kind in ANNOTATIONS)
            else:
                v = e.val
                numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
                out.append(float(v) if numeric else float(self.space.knobs[name].entities.index(e)))
        return out

    def __repr__(self) -> str:
        return f"ConfigEntity({self.index}: {self.knob_values()})"
