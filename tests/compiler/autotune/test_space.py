"""Config spaces: knob kinds, size, mixed-radix indexing, JSON round trip, fallback, errors."""

import pytest

from vtakit.compiler.autotune.space import (AnnotateEntity, ConfigSpace, OtherOptionEntity, ReorderEntity,
                                            SplitEntity)
from vtakit.errors import ScheduleError


def _space():
    s = ConfigSpace()
    s.define_split("tile", 12, num_outputs=3)
    s.define_reorder("order", [0, 1, 2], policy="all")
    s.define_annotate("ann", [0, 1], policy="try_unroll_vec")
    s.define_knob("unroll", [0, 512, 1500])
    return s


def test_split_factors_multiply_to_the_extent():
    s = ConfigSpace()
    s.define_split("tile", 12, num_outputs=3)
    sizes = [e.size for e in s.knobs["tile"].entities]
    # (-1, a, b) with a * b dividing 12: 18 ordered pairs
    assert len(sizes) == 18 and all(12 % (a * b) == 0 for _, a, b in sizes)
    assert len(set(sizes)) == len(sizes)


def test_split_policies_and_filter():
    s = ConfigSpace()
    s.define_split("p2", 12, policy="power2")
    s.define_split("v", 12, policy="verbose")
    s.define_split("f", 64, filter=lambda e: e.size[-1] <= 8)
    assert [e.size[1] for e in s.knobs["p2"].entities] == [1, 2, 4, 8]
    assert [e.size[1] for e in s.knobs["v"].entities] == [1, 2, 3, 4, 6, 8, 12]
    assert [e.size[1] for e in s.knobs["f"].entities] == [1, 2, 4, 8]


def test_size_is_the_product_and_indices_are_mixed_radix():
    s = _space()
    assert s.dims == [18, 6, 9, 3]
    assert len(s) == 18 * 6 * 9 * 3
    for index in (0, 1, 17, 18, 1234, len(s) - 1):
        cfg = s.get(index)
        assert cfg.index == index
        assert s.point_to_index(s.index_to_point(index)) == index
        assert s.entity_from_json(cfg.to_json()).index == index
    assert s[5].entity_map == s.get(5).entity_map
    assert isinstance(s.get(0)["order"], ReorderEntity) and isinstance(s.get(0)["ann"], AnnotateEntity)


def test_knob_feature_is_flat_and_numeric():
    s = _space()
    feat = s.get(len(s) - 1).get_flatten_feature()
    # split: 2 factors, reorder: 3 positions, annotate: 2 axes x 3 one-hot, knob: its value
    assert len(feat) == 2 + 3 + 6 + 1
    assert feat[-1] == 1500.0


def test_while_declaring_a_knob_reads_as_its_first_choice():
    s = _space()
    assert s["tile"] == SplitEntity((-1, 1, 1))
    assert s["unroll"] == OtherOptionEntity(0)


def test_fallback_names_the_default_config():
    s = _space()
    assert s.fallback.index == 0 and not s.fallback.is_fallback
    s.set_fallback(tile=[-1, 2, 3], unroll=512)
    fb = s.fallback
    assert fb.is_fallback and fb["tile"].size == (-1, 2, 3) and fb["unroll"].val == 512


def test_split_entity_applies_the_factors():
    from vtakit.compiler import te

    a = te.placeholder((12,), "float32", name="a")
    b = te.compute((12,), lambda i: a[i] + 1, name="b")
    s = te.create_schedule(b.op)
    from vtakit.compiler.autotune.tuner.features import loop_stats
    from vtakit.compiler.lower.schedule_ops import schedule_to_primfunc

    axes = SplitEntity((-1, 2, 3)).apply(s, b, b.op.axis[0])
    assert len(axes) == 3
    extents = [2 ** st[0] for st in loop_stats(schedule_to_primfunc(s, [a, b], "f"))]
    assert extents == [2, 2, 3]


@pytest.mark.parametrize("call, match", [
    (lambda s: s.define_split("t", 8, policy="nope"), "unknown policy 'nope'"),
    (lambda s: s.define_split("t", 8, num_outputs=1), "num_outputs must be an int >= 2"),
    (lambda s: s.define_split("t", object()), "constant extent"),
    (lambda s: s.define_reorder("r", [0, 1], policy="sideways"), "unknown policy 'sideways'"),
    (lambda s: s.define_reorder("r", [0, 1], policy="candidate", candidate=[[0, 0]]), "not a permutation"),
    (lambda s: s.define_annotate("a", [0], policy="try_fly"), "unknown policy 'try_fly'"),
    (lambda s: s.get(10 ** 9), "out of range; the space has"),
    (lambda s: s["missing"], "no knob 'missing'"),
    (lambda s: s.define_knob("unroll", [1]), "defined twice"),
    (lambda s: s.entity_from_json([["unroll", "ot", 7]]), "has no choice"),
    (lambda s: s.entity_from_json([["other", "ot", 1]]), "does not belong"),
])
def test_bad_space_use_is_a_schedule_error(call, match):
    s = ConfigSpace()
    s.define_knob("unroll", [0, 1])
    with pytest.raises(ScheduleError, match=match):
        call(s)
