"""Readable text for the loop IR: what ``vtakit.lower`` prints and error messages quote."""

from __future__ import annotations

from typing import Any

from vtakit.compiler import ir

__all__ = ["expr_str", "stmt_str", "func_str"]

_FUNCTION_STYLE = (ir.Min, ir.Max, ir.FloorMod)

# While a statement or function prints, distinct variables that share a name get suffixes.
_names: dict[ir.Var, str] | None = None


def _unique_names(node: Any) -> dict[ir.Var, str]:
    names: dict[ir.Var, str] = {}
    taken: set[str] = set()

    def visit(n: Any) -> None:
        if isinstance(n, ir.Var) and n not in names:
            name, k = n.name, 0
            while name in taken:
                k += 1
                name = f"{n.name}_{k}"
            names[n] = name
            taken.add(name)

    ir.walk(node, visit)
    return names


def _with_names(node: Any, fn: Any) -> str:
    global _names
    if _names is not None:
        return fn()
    _names = _unique_names(node)
    try:
        return fn()
    finally:
        _names = None


def expr_str(e: Any) -> str:
    if isinstance(e, ir.IntImm):
        return str(e.value) if e.dtype in ("int32", "bool") else f"{e.dtype}({e.value})"
    if isinstance(e, ir.FloatImm):
        return f"{e.value!r}f" if e.dtype == "float32" else f"{e.dtype}({e.value!r})"
    if isinstance(e, ir.Var):
        return _names.get(e, e.name) if _names is not None else e.name
    if isinstance(e, _FUNCTION_STYLE):
        return f"{e.symbol}({expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, ir.BinaryOp):
        return f"({expr_str(e.a)} {e.symbol} {expr_str(e.b)})"
    if isinstance(e, ir.Not):
        return f"!{expr_str(e.a)}"
    if isinstance(e, ir.Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.true_value)}, {expr_str(e.false_value)})"
    if isinstance(e, ir.Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, ir.Call):
        return f"{e.op}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, ir.Let):
        return f"(let {expr_str(e.var)} = {expr_str(e.value)} in {expr_str(e.body)})"
    if isinstance(e, ir.Ramp):
        return f"ramp({expr_str(e.base)}, {expr_str(e.stride)}, {e.lanes})"
    if isinstance(e, ir.Broadcast):
        return f"x{e.lanes}({expr_str(e.value)})"
    if isinstance(e, ir.BufferLoad):
        return f"{e.buffer.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, ir.ProducerLoad):
        return f"{e.producer.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, ir.Reduce):
        axes = ", ".join(f"{iv.var.name}:[{expr_str(iv.dom.min)}, {expr_str(iv.dom.extent)})" for iv in e.axis)
        cond = "" if isinstance(e.condition, ir.IntImm) and e.condition.value else f", where={expr_str(e.condition)}"
        return f"{e.combiner.name}({expr_str(e.source)}, axis=[{axes}]{cond})"
    if isinstance(e, ir.Buffer):
        return e.name
    return repr(e) if not isinstance(e, str) else repr(e)


def stmt_str(s: ir.Stmt, indent: int = 0) -> str:
    return _with_names(s, lambda: "\n".join(_stmt_lines(s, indent)))


def _stmt_lines(s: ir.Stmt, depth: int) -> list[str]:
    pad = "  " * depth
    if isinstance(s, ir.SeqStmt):
        return [line for child in s.stmts for line in _stmt_lines(child, depth)]
    if isinstance(s, ir.For):
        kind = "" if s.kind is ir.ForKind.SERIAL else f"{s.kind.value} "
        tag = f" \"{s.thread_tag}\"" if s.thread_tag else ""
        head = (f"{pad}for {kind}({expr_str(s.loop_var)}, {expr_str(s.min)}, {expr_str(s.extent)}){tag}:")
        return [head, *_stmt_lines(s.body, depth + 1)]
    if isinstance(s, ir.Allocate):
        b = s.buffer
        shape = ", ".join(expr_str(x) for x in b.shape)
        return [f"{pad}allocate {b.name}[{b.dtype} * ({shape})] in {b.scope}", *_stmt_lines(s.body, depth)]
    if isinstance(s, ir.BufferStore):
        idx = ", ".join(expr_str(i) for i in s.indices)
        return [f"{pad}{s.buffer.name}[{idx}] = {expr_str(s.value)}"]
    if isinstance(s, ir.IfThenElse):
        lines = [f"{pad}if {expr_str(s.cond)}:", *_stmt_lines(s.then_case, depth + 1)]
        if s.else_case is not None:
            lines += [f"{pad}else:", *_stmt_lines(s.else_case, depth + 1)]
        return lines
    if isinstance(s, ir.AttrStmt):
        node = expr_str(s.node) if isinstance(s.node, (ir.PrimExpr, ir.Buffer)) else repr(s.node)
        value = expr_str(s.value) if isinstance(s.value, ir.PrimExpr) else repr(s.value)
        return [f"{pad}// attr [{node}] {s.key} = {value}", *_stmt_lines(s.body, depth)]
    if isinstance(s, ir.Evaluate):
        return [f"{pad}{expr_str(s.value)}"]
    if isinstance(s, ir.LetStmt):
        return [f"{pad}let {expr_str(s.var)} = {expr_str(s.value)}", *_stmt_lines(s.body, depth)]
    if isinstance(s, ir.AllReduce):
        c = s.combiner
        reducer = (f"comm_reducer {c.name}({expr_str(c.lhs)}, {expr_str(c.rhs)}) = {expr_str(c.result)}, "
                   f"identity {expr_str(c.identity_element)}")
        idx = ", ".join(expr_str(i) for i in s.indices)
        cond = "True" if isinstance(s.condition, ir.IntImm) and s.condition.value else expr_str(s.condition)
        return [f"{pad}// attr [{reducer}] reduce_scope",
                f"{pad}{s.buffer.name}[{idx}] = tvm_thread_allreduce({expr_str(s.value)}, where={cond}, "
                f"over={expr_str(s.thread)} \"{s.thread_tag}\")"]
    raise TypeError(f"not a statement: {s!r}")


def func_str(f: ir.PrimFunc) -> str:
    return _with_names(f.body, lambda: _func_str(f))


def _func_str(f: ir.PrimFunc) -> str:
    params = ", ".join(f"{b.name}: Buffer({b.dtype}, [{', '.join(expr_str(x) for x in b.shape)}])"
                       for b in f.params)
    return f"primfn {f.name}({params}) {{\n{stmt_str(f.body, 1)}\n}}"
