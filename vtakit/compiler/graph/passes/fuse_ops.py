"""Operator fusion by TVM's rule: element-wise ops fuse into the conv or dense before them, and
chains of element-wise and injective ops fuse into one kernel.

Nodes are visited in topological order. A node whose pattern is at most ``INJECTIVE`` joins the
group of a producer when that group's values are read by this node alone (so merging cannot form
a cycle or hide a value someone else needs) and the group's kind accepts it (:data:`ACCEPTS`):
a conv/dense group (``OUT_ELEMWISE_FUSABLE``) or a reduction takes element-wise and broadcast ops
of its own output shape, an element-wise/injective group takes any of them. Element-wise groups
that a diamond splits (hard-swish reads ``x`` twice) are then merged. View-only ops
(``Reshape``, ``Flatten``, ...: :data:`VIEW_OPS`) stay on their own: the build turns them into
aliases of their input's storage instead of kernels. Each group of two or more nodes becomes one
``Fused`` node (:mod:`vtakit.compiler.graph.fused`).
"""

from __future__ import annotations

from vtakit.compiler.graph.fused import FUSED, FusedBody
from vtakit.compiler.graph.ir import Graph, Node
from vtakit.compiler.graph.op import Pattern, get_op
from vtakit.compiler.graph.passes.registry import graph_pass

__all__ = ["fuse_ops", "ACCEPTS", "VIEW_OPS"]

# ops whose output is their (first) input's bytes under another shape: no kernel, an alias
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})

# group kind (its least-fusable pattern) -> the patterns of the nodes it takes, and whether a
# joining node must keep the group's output shape
ACCEPTS: dict[Pattern, tuple[frozenset[Pattern], bool]] = {
    Pattern.ELEMWISE: (frozenset({Pattern.ELEMWISE, Pattern.BROADCAST, Pattern.INJECTIVE}), False),
    Pattern.BROADCAST: (frozenset({Pattern.ELEMWISE, Pattern.BROADCAST, Pattern.INJECTIVE}), False),
    Pattern.INJECTIVE: (frozenset({Pattern.ELEMWISE, Pattern.BROADCAST, Pattern.INJECTIVE}), False),
    Pattern.COMM_REDUCE: (frozenset({Pattern.ELEMWISE, Pattern.BROADCAST}), True),
    Pattern.OUT_ELEMWISE_FUSABLE: (frozenset({Pattern.ELEMWISE, Pattern.BROADCAST}), True),
}


class _Group:
    def __init__(self, node: Node, pattern: Pattern) -> None:
        self.nodes = [node]
        self.kind = pattern

    @property
    def produced(self) -> list[str]:
        return [o for n in self.nodes for o in n.outputs]


def _pattern(node: Node) -> Pattern:
    opdef = get_op(node.op)
    return Pattern.OPAQUE if opdef.compute is None or node.op in VIEW_OPS else opdef.pattern


@graph_pass("FuseOps", required=("InferType",))
def fuse_ops(graph: Graph) -> Graph:
    g = graph.copy()
    consumers = g.consumers()
    group_of: dict[str, _Group] = {}
    groups: list[_Group] = []
    for node in g.nodes:
        pattern = _pattern(node)
        target = None
        if pattern <= Pattern.INJECTIVE:
            for name in node.inputs:
                group = group_of.get(name)
                if group is not None and _can_join(g, group, node, pattern, consumers):
                    target = group
                    break
        if target is None:
            target = _Group(node, pattern)
            groups.append(target)
        else:
            target.nodes.append(node)
            target.kind = max(target.kind, pattern)
        for out in node.outputs:
            group_of[out] = target
    groups = _merge_diamonds(g, groups, group_of, consumers)
    order = {id(n): k for k, n in enumerate(g.nodes)}
    for group in groups:
        group.nodes.sort(key=lambda n: order[id(n)])
    last = {id(group.nodes[-1]): group for group in groups}
    g.nodes = [_fused_node(g, last[id(n)], consumers) for n in g.nodes if id(n) in last]
    return g


def _merge_diamonds(g: Graph, groups: list[_Group], group_of: dict[str, _Group],
                    consumers: dict[str, list[Node]]) -> list[_Group]:
    """Merge an element-wise group into its element-wise producer group when the producer's values are
    read by that group alone (a diamond such as hard-swish's ``x * clip(x + 3, 0, 6) / 6``, whose two
    paths rejoin): every path out of the producer enters the consumer at once, so the merge cannot
    form a cycle. Groups around a conv, dense or reduction are left alone: their CPU schedules take
    a chain of element-wise stages after the anchor, not a diamond."""
    merged = True
    while merged:
        merged = False
        for group in groups:
            readers = {id(group_of[o]): group_of[o] for v in group.produced if v not in g.outputs
                       for c in consumers.get(v, []) for o in c.outputs[:1] if group_of[o] is not group}
            if len(readers) != 1 or any(v in g.outputs for v in group.produced):
                continue
            (other,) = readers.values()
            if group.kind > Pattern.INJECTIVE or any(_pattern(n) > Pattern.INJECTIVE for n in other.nodes):
                continue  # the CPU's conv/dense/reduction schedules take a chain of element-wise stages only
            group.nodes.extend(other.nodes)
            for node in other.nodes:
                for out in node.outputs:
                    group_of[out] = group
            groups = [x for x in groups if x is not other]
            merged = True
            break
    return groups


def _can_join(g: Graph, group: _Group, node: Node, pattern: Pattern, consumers: dict[str, list[Node]]) -> bool:
    accepted = ACCEPTS.get(group.kind)
    if accepted is None or pattern not in accepted[0]:
        return False
    inside = {id(n) for n in group.nodes}
    for value in group.produced:
        if value in g.outputs or any(c is not node and id(c) not in inside for c in consumers.get(value, [])):
            return False
    if accepted[1]:
        shape = g.type_of(group.nodes[-1].outputs[0]).shape
        if any(g.type_of(o).shape != shape for o in node.outputs):
            return False
    return True


def _fused_node(g: Graph, group: _Group, consumers: dict[str, list[Node]]) -> Node:
    if len(group.nodes) == 1:
        return group.nodes[0]
    inside = {id(n) for n in group.nodes}
    produced = set(group.produced)
    params: list[str] = []
    consts: dict = {}
    for node in group.nodes:
        opdef = get_op(node.op)
        for k, name in enumerate(node.inputs):
            if not name or name in produced:
                continue
            if k in opdef.const_inputs:
                consts[name] = g.constants[name]
            elif name not in params:
                params.append(name)
    results = [v for v in group.produced
               if v in g.outputs or any(id(c) not in inside for c in consumers.get(v, []))]
    body = FusedBody(list(group.nodes), params, results, consts)
    anchor = body.anchor
    return Node(FUSED, list(params), list(results), {"body": body}, anchor.name or anchor.op)
