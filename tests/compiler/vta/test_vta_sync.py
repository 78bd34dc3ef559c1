"""CoProcSync on hand-built IR: where the dependence tokens go (TVM's CoProcInstDepDetector)."""

from vtakit.compiler import ir
from vtakit.compiler.lower.vthread import inject_virtual_thread
from vtakit.compiler.vta.coproc_sync import inject_coproc_sync
from vtakit.compiler.vta.env import DEP_POP, DEP_PUSH, VTA_AXIS


def cmd(q, name):
    return ir.AttrStmt(VTA_AXIS, "coproc_scope", ir.IntImm("int32", q), ir.Evaluate(ir.Call("int32", name, ())))


def loop(body, n=4, tag=""):
    kind = ir.ForKind.THREAD_BINDING if tag else ir.ForKind.SERIAL
    return ir.For(ir.Var("t" if tag else "k"), ir.IntImm("int32", 0), ir.IntImm("int32", n), kind, body, thread_tag=tag)


def trace(stmt):
    """Commands and tokens in program order; loops as '[' ... ']'."""
    out = []

    def visit(s):
        if isinstance(s, ir.For):
            out.append("[")
            visit(s.body)
            out.append("]")
        elif isinstance(s, ir.Evaluate):
            c = s.value
            if c.op in (DEP_PUSH, DEP_POP):
                out.append(f"{'push' if c.op == DEP_PUSH else 'pop'}{c.args[0].value}{c.args[1].value}")
            else:
                out.append(c.op)
        elif isinstance(s, ir.SeqStmt):
            for c in s.stmts:
                visit(c)
        else:
            visit(s.body)

    visit(stmt)
    return out


def sync(body):
    return inject_coproc_sync(ir.PrimFunc("f", (), body)).body


def test_sequence_and_loop_carried_tokens():
    body = ir.seq(cmd(2, "reset"), loop(ir.seq(cmd(1, "load"), cmd(2, "gemm"))), cmd(3, "store"))
    assert trace(sync(body)) == [
        "reset", "push21",                       # the first iteration's load token
        "[", "pop21", "load", "push12", "pop12", "gemm", "push21", "]",
        "push23", "pop21",                       # to the store; drain the last iteration's load token
        "pop23", "store"]


def test_prologue_and_epilogue_at_top_level():
    body = loop(ir.seq(cmd(2, "gemm"), cmd(3, "store")))
    assert trace(sync(body)) == ["push32", "[", "pop32", "gemm", "push23", "pop23", "store", "push32", "]", "pop32"]


def test_load_store_dependence_relayed_through_compute():
    body = loop(ir.seq(cmd(1, "load"), cmd(2, "gemm"), cmd(3, "store")))
    out = trace(sync(body))
    assert "push31" not in out and "pop31" not in out
    assert out[out.index("store"):] == ["store", "push32", "pop32", "push21", "]", "pop21"]


def test_virtual_threads_get_their_own_prologue():
    body = loop(loop(ir.seq(cmd(2, "gemm"), cmd(3, "store"))), n=2, tag="cthread")
    out = trace(inject_virtual_thread(ir.PrimFunc("f", (), sync(body))).body)
    assert out[:2] == ["push32", "push32"] and out[-2:] == ["pop32", "pop32"]
    assert out.count("gemm") == 2 and out.count("store") == 2
