"""Graph passes: each is checked for equivalence by evaluating the graph before and after it, and for
doing its rewrite; the pass manager's contract (names, requirements, disabling, debug verify, dumps)."""

from __future__ import annotations

import numpy as np
import pytest

from vtakit.compiler.graph import evaluate
from vtakit.compiler.graph.fused import FUSED
from vtakit.compiler.graph.ir import Graph, Node, TensorType
from vtakit.compiler.graph.op import normalize_attrs
from vtakit.compiler.graph.passes import get_pass, graph_pass, plan_memory, registered_passes, run_passes
from vtakit.compiler.graph.passes import registry as pass_registry
from vtakit.compiler.graph.targets import LLVM_PASSES
from vtakit.errors import GraphError

RNG = np.random.default_rng(7)


def _typed(g: Graph) -> Graph:
    return get_pass("InferType")(g)


def _equivalent(before: Graph, after: Graph, seeds: int = 2) -> None:
    after.verify()
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        inputs = {n: rng.standard_normal(before.type_of(n).shape).astype(before.type_of(n).dtype)
                  for n in before.inputs}
        want, got = evaluate(before, inputs), evaluate(after, inputs)
        assert list(got) == list(want)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5 * np.abs(want[name]).max())


def _conv_bn_graph() -> Graph:
    """conv -> BN -> relu, conv -> BN (shared input), add, relu; and a Gemm -> BN head."""
    c = {"w1": RNG.standard_normal((32, 3, 3, 3)).astype(np.float32),
         "b1": RNG.standard_normal(32).astype(np.float32),
         "w2": RNG.standard_normal((32, 3, 1, 1)).astype(np.float32),
         "fc": RNG.standard_normal((32 * 6 * 6, 5)).astype(np.float32)}
    for k in ("1", "2", "3"):
        n = 5 if k == "3" else 32
        c[f"s{k}"] = (1 + 0.2 * RNG.standard_normal(n)).astype(np.float32)
        c[f"t{k}"] = RNG.standard_normal(n).astype(np.float32)
        c[f"m{k}"] = RNG.standard_normal(n).astype(np.float32)
        c[f"v{k}"] = (1 + np.abs(RNG.standard_normal(n))).astype(np.float32)
    bn = {"epsilon": 1e-3}
    conv = {"pads": [1, 1, 1, 1]}
    nodes = [Node("Conv", ["x", "w1", "b1"], ["c1"], dict(conv), "conv1"),
             Node("BatchNormalization", ["c1", "s1", "t1", "m1", "v1"], ["n1"], dict(bn), "bn1"),
             Node("Relu", ["n1"], ["r1"], name="relu1"),
             Node("Conv", ["x", "w2"], ["c2"], dict(conv, pads=[0, 0, 0, 0]), "conv2"),
             Node("BatchNormalization", ["c2", "s2", "t2", "m2", "v2"], ["n2"], dict(bn), "bn2"),
             Node("Add", ["r1", "n2"], ["a"], name="add"),
             Node("Relu", ["a"], ["r"], name="relu"),
             Node("Flatten", ["r"], ["f"], {"axis": 1}, "flatten"),
             Node("Gemm", ["f", "fc"], ["g"], {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}, "gemm"),
             Node("BatchNormalization", ["g", "s3", "t3", "m3", "v3"], ["y"], dict(bn), "bn3")]
    g = Graph(nodes, ["x"], ["y"], {"x": TensorType((1, 3, 6, 6), "float32")}, c)
    for node in g.nodes:
        node.attrs = normalize_attrs(node.op, node.attrs)
    return _typed(g)


def test_infer_types_recomputes_every_type():
    g = _conv_bn_graph()
    stale = g.copy()
    stale.types = {n: t for n, t in g.types.items() if n in g.inputs}
    assert _typed(stale).types == g.types


def test_fold_batch_norm_removes_every_bn_after_conv_and_gemm():
    g = _conv_bn_graph()
    folded = get_pass("FoldBatchNorm")(g)
    assert [n.op for n in folded.nodes].count("BatchNormalization") == 0
    _equivalent(g, folded)


def test_fold_batch_norm_keeps_a_bn_whose_producer_has_other_readers():
    g = _conv_bn_graph()
    g.outputs.append("c1")  # the conv's own output is needed: it cannot change
    folded = get_pass("FoldBatchNorm")(g)
    assert [n.name for n in folded.nodes if n.op == "BatchNormalization"] == ["bn1"]
    _equivalent(g, folded)


def _shape_chain_graph() -> Graph:
    """x -> Shape -> Gather(0) / constant -> Concat -> Reshape(x): the exporter's flatten."""
    nodes = [Node("Shape", ["x"], ["s"], {"start": 0, "end": None}),
             Node("Relu", ["x"], ["r"]),
             Node("Add", ["r", "x"], ["dead"])]
    g = Graph(nodes, ["x"], ["r"], {"x": TensorType((2, 3, 4), "float32")}, {})
    return _typed(g)


def test_fold_constants_folds_shape_and_dead_nodes_go():
    g = _shape_chain_graph()
    g.outputs.append("s")
    folded = get_pass("FoldConstant")(g)
    assert "s" in folded.constants and [n.op for n in folded.nodes] == ["Relu", "Add"]
    np.testing.assert_array_equal(folded.constants["s"], [2, 3, 4])
    _equivalent(g, folded)
    clean = get_pass("DeadCodeElimination")(folded)
    assert [n.op for n in clean.nodes] == ["Relu"]
    _equivalent(g, clean)


def test_fusion_follows_tvms_rule():
    g = get_pass("FoldBatchNorm")(_conv_bn_graph())
    fused = get_pass("FuseOps")(g)
    kernels = [(n.attrs["body"].ops if n.op == FUSED else (n.op,)) for n in fused.nodes]
    # the add joins the group of its first input (conv1+relu1, read by the add alone) and takes the
    # relu after it; the 1x1 conv is read by that group, so it stays alone; Flatten stays a view
    assert kernels == [("Conv",), ("Conv", "Relu", "Add", "Relu"), ("Flatten",), ("Gemm",)]
    _equivalent(g, fused)


def test_fusion_never_swallows_a_value_read_elsewhere():
    g = get_pass("FoldBatchNorm")(_conv_bn_graph())
    g.outputs.append("r1")  # relu1's output must stay a kernel output
    fused = get_pass("FuseOps")(g)
    producers = fused.producers()
    assert "r1" in producers and "r1" in producers["r1"].outputs
    _equivalent(g, fused)


def test_alter_layout_packs_conv_weights_once():
    g = get_pass("FoldBatchNorm")(_conv_bn_graph())
    packed = get_pass("AlterOpLayout")(g)
    ops = [n.op for n in packed.nodes]
    assert "Conv" not in ops and ops.count("PackedConv") == 2
    weight = packed.constants[packed.nodes[0].inputs[1]]
    assert weight.ndim == 5 and weight.shape[0] * weight.shape[-1] == 32
    _equivalent(g, packed)


def test_alter_layout_folds_matmul_batches_into_a_dense():
    """MatMul by a matrix (a Linear layer) becomes PackedMatMul: a constant float32 weight packed here
    into [N/b, K, b] panels, a run-time one (block 0) packed by the kernel; attention's batched MatMul
    and a 1-D lhs keep the MatMul."""
    c = {"w": RNG.standard_normal((8, 40)).astype(np.float32)}
    nodes = [Node("MatMul", ["x", "w"], ["h"], name="linear"),
             Node("MatMul", ["x", "v"], ["u"], name="runtime_rhs"),
             Node("MatMul", ["x", "xt"], ["a"], name="attention"),
             Node("MatMul", ["r", "w"], ["z"], name="vector_lhs")]
    types = {"x": TensorType((2, 3, 5, 8), "float32"), "v": TensorType((8, 24), "float32"),
             "xt": TensorType((2, 3, 8, 5), "float32"), "r": TensorType((8,), "float32")}
    g = get_pass("InferType")(Graph(nodes, ["x", "v", "xt", "r"], ["h", "u", "a", "z"], types, c))
    packed = get_pass("AlterOpLayout")(g)
    assert [n.op for n in packed.nodes] == ["PackedMatMul", "PackedMatMul", "MatMul", "MatMul"]
    linear, runtime = packed.nodes[:2]
    weight = packed.constants[linear.inputs[1]]
    assert linear.attrs["block"] == weight.shape[-1] and weight.shape == (40 // weight.shape[-1], 8, weight.shape[-1])
    assert runtime.attrs["block"] == 0 and runtime.inputs[1] == "v"
    _equivalent(g, packed)


def test_the_whole_pipeline_is_equivalent():
    g = _conv_bn_graph()
    _equivalent(g, run_passes(g, LLVM_PASSES, debug=True))


# -- the pass manager ---------------------------------------------------------------------------
def test_pass_manager_skips_disabled_passes_and_dumps_by_name(tmp_path):
    g = _conv_bn_graph()
    out = run_passes(g, ["InferType", "FoldConstant", "FoldBatchNorm"], disabled=["FoldBatchNorm"],
                     dump_dir=tmp_path)
    assert [n.op for n in out.nodes].count("BatchNormalization") == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00_InferType.txt", "01_FoldConstant.txt"]
    assert "Conv(" in (tmp_path / "01_FoldConstant.txt").read_text()


def test_pass_manager_errors():
    g = _conv_bn_graph()
    with pytest.raises(GraphError, match="unknown graph pass 'NoSuchPass'"):
        run_passes(g, ["NoSuchPass"])
    with pytest.raises(GraphError, match="unknown graph pass 'Typo'"):
        run_passes(g, ["InferType"], disabled=["Typo"])
    with pytest.raises(GraphError, match=r"FoldBatchNorm requires \['FoldConstant'\]"):
        run_passes(g, ["InferType", "FoldConstant", "FoldBatchNorm"], disabled=["FoldConstant"])


def test_debug_mode_verifies_after_each_pass(monkeypatch):
    monkeypatch.setattr(pass_registry, "_PASSES", dict(pass_registry._PASSES))

    @graph_pass("TestBreaksTheGraph")
    def broken(graph: Graph) -> Graph:
        g = graph.copy()
        g.nodes.reverse()
        return g
    assert "TestBreaksTheGraph" in registered_passes()
    run_passes(_conv_bn_graph(), ["TestBreaksTheGraph"], debug=False)
    with pytest.raises(GraphError, match="malformed after pass TestBreaksTheGraph"):
        run_passes(_conv_bn_graph(), ["TestBreaksTheGraph"], debug=True)


# -- memory planning ----------------------------------------------------------------------------
def test_memory_plan_shares_storage_of_dead_tensors_and_meets_the_lower_bound():
    # a chain x -> a -> b -> c -> y: at most two tensors live at once
    steps = [(["x"], ["a"]), (["a"], ["b"]), (["b"], ["c"]), (["c"], ["y"])]
    sizes = {n: 1000 for n in "xabcy"}
    plan = plan_memory(steps, sizes, ["x"], ["y"])
    assert plan.lower_bound == 2000 and plan.arena_bytes <= 1.5 * plan.lower_bound
    for k, (reads, writes) in enumerate(steps):  # a step's inputs and outputs never overlap
        for r in reads:
            for w in writes:
                assert abs(plan.offsets[r] - plan.offsets[w]) >= 1000


def test_memory_plan_keeps_outputs_and_views_alive():
    steps = [(["x"], ["a"]), (["v"], ["b"]), (["b"], ["c"])]
    plan = plan_memory(steps, {"x": 64, "a": 64, "v": 64, "b": 64, "c": 64}, ["x"], ["a", "c"], {"v": "a"})
    assert plan.offsets["v"] == plan.offsets["a"]
    assert plan.offsets["c"] not in (plan.offsets["a"], plan.offsets["b"])  # a is an output: never reused
