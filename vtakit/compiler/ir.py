"""The loop IR every compiler backend shares (docs/architecture.md §5).

A small TIR: scalar/vector expressions, buffers, and statements (For with a kind, Allocate with
a scope, BufferLoad/BufferStore, IfThenElse, AttrStmt, Evaluate of intrinsic calls, SeqStmt,
LetStmt, AllReduce across GPU threads). Tensor expressions lower to it; passes rewrite it; the
interpreter executes it; the llvm, nvptx and vta backends generate code from it.

Nodes are immutable and compared by identity; ``==`` on expressions builds an ``EQ`` node, as in
TVM, so use :func:`structural_equal` to compare trees. Python numbers mix freely with expressions
(``i * 4 + 1``) and take the other operand's dtype.

Dtypes are TVM-style strings: ``int8``, ``int32``, ``int64``, ``uint8``, ``float32``, ``bool``;
vectors append lanes (``float32x8``).

Conventions of lowered functions (what ``vtakit.lower`` hands to backends):

- ``PrimFunc.params`` are the argument buffers with their N-d shapes (extents may be shape
  variables). After StorageFlatten every access has exactly one index into a 1-D buffer that
  shares its ``data`` variable with the parameter or ``Allocate`` it views; identify storage by
  ``buffer.data``.
- Loops start at 0 unless a pass says otherwise; ``For.kind`` is serial, parallel, unrolled
  (explicit unrolling already done by UnrollLoop) or thread binding (``thread_tag`` blockIdx.*,
  threadIdx.*; vthread/cthread loops are gone after InjectVirtualThread). Vectorized loops are
  gone too: their bodies use ``Ramp``/``Broadcast`` vectors.
- ``Call("if_then_else", cond, a, b)`` evaluates only the taken branch (padding reads rely on
  it); ``Select`` may evaluate both. ``tvm_access_ptr(dtype, data, offset, extent, rw_mask)``
  is a pointer into a buffer (offset/extent in elements, mask 1 read | 2 write). ``shift_left``,
  ``shift_right`` and math calls (``exp``, ``log``, ...) are intrinsics; anything else is a
  target intrinsic.
- ``AllReduce`` appears only inside a loop bound to its ``threadIdx.*`` (a cross-thread reduction);
  backends without GPU threads reject it with the thread loop.
- ``AttrStmt`` keys: ``pragma_<key>`` wraps the loop it annotates; targets add their own
  (``coproc_scope``, ...).
"""

from __future__ import annotations

import enum
import numbers
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Iterator, Sequence

from vtakit.errors import CompileError

__all__ = [
    "PrimExpr", "IntImm", "FloatImm", "Var", "BinaryOp", "Add", "Sub", "Mul", "Div", "Mod", "FloorDiv",
    "FloorMod", "Min", "Max", "EQ", "NE", "LT", "LE", "GT", "GE", "And", "Or", "Not", "Select", "Cast",
    "Call", "Let", "Ramp", "Broadcast", "BufferLoad", "Buffer", "ProducerLoad", "Reduce",
    "Stmt", "ForKind", "For", "Allocate", "BufferStore", "IfThenElse", "AttrStmt", "Evaluate", "SeqStmt",
    "LetStmt", "AllReduce", "PrimFunc",
    "const", "convert", "seq", "lanes_of", "element_of", "with_lanes", "is_float", "is_int",
    "children", "walk", "contains", "structural_equal", "IRMutator", "substitute", "uses_var",
    "conjuncts", "int_value",
]


# ---------------------------------------------------------------------------- dtypes
def lanes_of(dtype: str) -> int:
    base = element_of(dtype)
    return int(dtype[len(base) + 1:]) if len(dtype) > len(base) else 1


def element_of(dtype: str) -> str:
    """The element type of a vector type (``"int8x16"`` -> ``"int8"``, ``"boolx4"`` -> ``"bool"``)."""
    head, sep, tail = dtype.rpartition("x")
    return head if sep and tail.isdigit() and (head[-1:].isdigit() or head == "bool") else dtype


def with_lanes(dtype: str, lanes: int) -> str:
    base = element_of(dtype)
    return base if lanes == 1 else f"{base}x{lanes}"


def is_float(dtype: str) -> bool:
    return element_of(dtype).startswith("float")


def is_int(dtype: str) -> bool:
    return element_of(dtype).startswith(("int", "uint"))


def _bits(dtype: str) -> int:
    base = element_of(dtype)
    return 1 if base == "bool" else int(base.lstrip("uintfloat"))


# ---------------------------------------------------------------------------- expressions
class PrimExpr:
    """Base of scalar and vector expressions; Python operators build IR."""

    dtype: str
    __hash__ = object.__hash__

    def __add__(self, o): return Add.make(self, o)
    def __radd__(self, o): return Add.make(o, self)
    def __sub__(self, o): return Sub.make(self, o)
    def __rsub__(self, o): return Sub.make(o, self)
    def __mul__(self, o): return Mul.make(self, o)
    def __rmul__(self, o): return Mul.make(o, self)
    def __truediv__(self, o): return Div.make(self, o)
    def __rtruediv__(self, o): return Div.make(o, self)
    def __floordiv__(self, o): return FloorDiv.make(self, o)
    def __rfloordiv__(self, o): return FloorDiv.make(o, self)
    def __mod__(self, o): return FloorMod.make(self, o)
    def __rmod__(self, o): return FloorMod.make(o, self)
    def __neg__(self): return Sub.make(const(0, self.dtype), self)
    def __lt__(self, o): return LT.make(self, o)
    def __le__(self, o): return LE.make(self, o)
    def __gt__(self, o): return GT.make(self, o)
    def __ge__(self, o): return GE.make(self, o)
    def __eq__(self, o): return EQ.make(self, o)  # type: ignore[override]
    def __ne__(self, o): return NE.make(self, o)  # type: ignore[override]
    # On integers ``& | ^ ~`` are bitwise (as in TVM); on booleans ``& | ~`` are logical.
    def __and__(self, o): return _bitwise("bitwise_and", And, self, o)
    def __rand__(self, o): return _bitwise("bitwise_and", And, o, self)
    def __or__(self, o): return _bitwise("bitwise_or", Or, self, o)
    def __ror__(self, o): return _bitwise("bitwise_or", Or, o, self)
    def __xor__(self, o): return _bitwise("bitwise_xor", None, self, o)
    def __rxor__(self, o): return _bitwise("bitwise_xor", None, o, self)
    def __invert__(self): return Call(self.dtype, "bitwise_not", (self,)) if is_int(self.dtype) else Not(self)
    def __rshift__(self, o): return _shift("shift_right", self, o)
    def __rrshift__(self, o): return _shift("shift_right", o, self)
    def __lshift__(self, o): return _shift("shift_left", self, o)
    def __rlshift__(self, o): return _shift("shift_left", o, self)

    def equal(self, o: Any) -> "PrimExpr":
        """``self == o`` as an expression (TVM's ``Var.equal``)."""
        return EQ.make(self, o)

    def __bool__(self) -> bool:
        raise CompileError(f"cannot use the symbolic expression {self} as a Python bool; "
                           "use te.if_then_else / te.all / te.any, or ir.structural_equal to compare")

    def astype(self, dtype: str) -> "PrimExpr":
        return Cast(dtype, self) if dtype != self.dtype else self

    def __str__(self) -> str:
        from vtakit.compiler.printer import expr_str  # noqa: PLC0415 (printer imports ir)
        return expr_str(self)

    __repr__ = __str__


@dataclass(eq=False, repr=False)
class IntImm(PrimExpr):
    dtype: str
    value: int


@dataclass(eq=False, repr=False)
class FloatImm(PrimExpr):
    dtype: str
    value: float


@dataclass(eq=False, repr=False)
class Var(PrimExpr):
    name: str
    dtype: str = "int32"


@dataclass(eq=False, repr=False)
class BinaryOp(PrimExpr):
    a: PrimExpr
    b: PrimExpr
    dtype: str = ""
    symbol = "?"

    def __post_init__(self) -> None:
        if not self.dtype:
            self.dtype = self.a.dtype

    @classmethod
    def make(cls, a: Any, b: Any) -> PrimExpr:
        a, b = _unify(a, b)
        return cls(a, b)


class Add(BinaryOp): symbol = "+"
class Sub(BinaryOp): symbol = "-"
class Mul(BinaryOp): symbol = "*"
class Div(BinaryOp): symbol = "/"          # float division; truncating division on integers
class Mod(BinaryOp): symbol = "%"          # truncating remainder on integers
class FloorDiv(BinaryOp): symbol = "//"
class FloorMod(BinaryOp): symbol = "floormod"
class Min(BinaryOp): symbol = "min"
class Max(BinaryOp): symbol = "max"


class _Compare(BinaryOp):
    def __post_init__(self) -> None:
        self.dtype = with_lanes("bool", lanes_of(self.a.dtype))


class EQ(_Compare):
    symbol = "=="

    def __bool__(self) -> bool:  # as in TVM: `x in list` and dict lookups compare identity
        return self.a is self.b


class NE(_Compare):
    symbol = "!="

    def __bool__(self) -> bool:
        return self.a is not self.b


class LT(_Compare): symbol = "<"
class LE(_Compare): symbol = "<="
class GT(_Compare): symbol = ">"
class GE(_Compare): symbol = ">="


class And(_Compare): symbol = "&&"
class Or(_Compare): symbol = "||"


@dataclass(eq=False, repr=False)
class Not(PrimExpr):
    a: PrimExpr
    dtype: str = "bool"

    def __post_init__(self) -> None:
        self.dtype = with_lanes("bool", lanes_of(self.a.dtype))


@dataclass(eq=False, repr=False)
class Select(PrimExpr):
    """``cond ? true_value : false_value``; both branches may be evaluated."""

    cond: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr
    dtype: str = ""

    def __post_init__(self) -> None:
        self.dtype = self.dtype or self.true_value.dtype


@dataclass(eq=False, repr=False)
class Cast(PrimExpr):
    dtype: str
    value: PrimExpr


@dataclass(eq=False, repr=False)
class Call(PrimExpr):
    """An intrinsic call: math (``exp``, ``log``, ``sqrt``, ``tanh``, ...), shifts, or a target intrinsic."""

    dtype: str
    op: str
    args: tuple[PrimExpr, ...]

    @classmethod
    def make(cls, dtype: str, op: str, args: Sequence[Any]) -> "Call":
        return cls(dtype, op, tuple(convert(a) if not isinstance(a, (PrimExpr, Buffer, str)) else a for a in args))


@dataclass(eq=False, repr=False)
class Let(PrimExpr):
    var: Var
    value: PrimExpr
    body: PrimExpr
    dtype: str = ""

    def __post_init__(self) -> None:
        self.dtype = self.dtype or self.body.dtype


@dataclass(eq=False, repr=False)
class Ramp(PrimExpr):
    """The vector ``base + stride * [0, lanes)``."""

    base: PrimExpr
    stride: PrimExpr
    lanes: int
    dtype: str = ""

    def __post_init__(self) -> None:
        self.dtype = with_lanes(self.base.dtype, self.lanes)


@dataclass(eq=False, repr=False)
class Broadcast(PrimExpr):
    value: PrimExpr
    lanes: int
    dtype: str = ""

    def __post_init__(self) -> None:
        self.dtype = with_lanes(self.value.dtype, self.lanes)


@dataclass(eq=False, repr=False)
class Buffer:
    """A region of memory: its data pointer, element dtype, shape, strides and scope.

    ``strides`` empty means compact row-major. ``elem_offset`` (in elements) lets a buffer view
    part of another; ``offset_factor`` constrains it as in TVM's ``decl_buffer``.
    """

    name: str
    shape: tuple[PrimExpr, ...]
    dtype: str = "float32"
    scope: str = "global"
    data: Var = None  # type: ignore[assignment]
    strides: tuple[PrimExpr, ...] = ()
    elem_offset: PrimExpr = None  # type: ignore[assignment]
    offset_factor: int = 1

    __hash__ = object.__hash__

    def __post_init__(self) -> None:
        self.shape = tuple(convert(s) for s in self.shape)
        self.strides = tuple(convert(s) for s in self.strides)
        if self.data is None:
            self.data = Var(self.name, "handle")
        if self.elem_offset is None:
            self.elem_offset = IntImm("int32", 0)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices: Any) -> "BufferLoad":
        indices = indices if isinstance(indices, tuple) else (indices,)
        return BufferLoad(self, tuple(convert(i) for i in indices))

    def vload(self, indices: Any) -> "BufferLoad":
        return self[tuple(indices) if isinstance(indices, (list, tuple)) else indices]

    def vstore(self, indices: Any, value: Any) -> "BufferStore":
        indices = tuple(indices) if isinstance(indices, (list, tuple)) else (indices,)
        return BufferStore(self, convert(value, self.dtype), tuple(convert(i) for i in indices))

    def access_ptr(self, access_mask: str | int = "rw", ptr_type: str = "handle", content_lanes: int = 1,
                   offset: Any = 0, extent: Any = None) -> "Call":
        """``tvm_access_ptr(dtype, data, elem_offset + offset, extent, mask)``: a pointer into the buffer
        (offsets and extents in elements; mask 1 = read, 2 = write), as TVM's ``Buffer.access_ptr``."""
        if isinstance(access_mask, str):
            bad = set(access_mask) - {"r", "w"}
            if bad or not access_mask:
                raise CompileError(f"access_ptr of {self.name}: access_mask must use 'r' and 'w', got {access_mask!r}")
            mask = (1 if "r" in access_mask else 0) | (2 if "w" in access_mask else 0)
        else:
            mask = int(access_mask)
        if extent is None:
            if self.strides:  # the span from the first to one past the last element
                extent = convert(1)
                for n, st in zip(self.shape, self.strides):
                    extent = extent + (n - 1) * st
            else:
                extent = convert(1)
                for s in self.shape:
                    extent = extent * s
            extent = extent - offset
        dtype = self.dtype if content_lanes == 1 else with_lanes(self.dtype, content_lanes)
        return Call.make(ptr_type, "tvm_access_ptr",
                         [dtype, self.data, self.elem_offset if isinstance(offset, int) and offset == 0
                          else self.elem_offset + offset, convert(extent), IntImm("int32", mask)])

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__


@dataclass(eq=False, repr=False)
class BufferLoad(PrimExpr):
    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    dtype: str = ""

    def __post_init__(self) -> None:
        if not self.dtype:
            lanes = max([lanes_of(i.dtype) for i in self.indices] or [1])
            self.dtype = with_lanes(self.buffer.dtype, lanes)


@dataclass(eq=False, repr=False)
class ProducerLoad(PrimExpr):
    """A read of a tensor-expression tensor (``A[i, j]`` in ``te.compute``); lowering turns it into
    a :class:`BufferLoad`. ``producer`` is a ``te.Tensor`` (anything with ``name`` and ``dtype``)."""

    producer: Any
    indices: tuple[PrimExpr, ...]
    dtype: str = ""

    def __post_init__(self) -> None:
        self.dtype = self.dtype or self.producer.dtype


@dataclass(eq=False, repr=False)
class Reduce(PrimExpr):
    """A commutative reduction of ``source`` over the iteration variables ``axis`` (``te.sum`` etc.).

    ``combiner`` is a ``te.CommReducer``; ``condition`` masks iterations out; ``init`` optionally
    replaces the combiner's identity as the start value.
    """

    combiner: Any
    source: PrimExpr
    axis: tuple[Any, ...]
    condition: PrimExpr
    init: PrimExpr | None = None
    dtype: str = ""

    def __post_init__(self) -> None:
        self.dtype = self.dtype or self.source.dtype


def const(value: int | float | bool, dtype: str | None = None) -> PrimExpr:
    """A constant; the dtype defaults to int32, float32 or bool from the Python type."""
    if dtype is None:
        dtype = "bool" if isinstance(value, bool) else "int32" if isinstance(value, int) else "float32"
    if lanes_of(dtype) > 1:
        return Broadcast(const(value, element_of(dtype)), lanes_of(dtype))
    if is_float(dtype):
        return FloatImm(dtype, float(value))
    return IntImm(dtype, int(value))


def convert(value: Any, dtype: str | None = None) -> PrimExpr:
    """A Python number or an expression, as an expression.

    Objects with an ``as_expr()`` method (``te.IterVar``) convert through it.
    """
    if isinstance(value, PrimExpr):
        return value
    as_expr = getattr(value, "as_expr", None)
    if as_expr is not None:
        return as_expr()
    if isinstance(value, numbers.Number) and not isinstance(value, (bool, int, float, complex)):
        value = value.item() if hasattr(value, "item") else float(value)  # numpy scalars
    if isinstance(value, (bool, int, float)):
        if dtype is not None and not isinstance(value, bool) and isinstance(value, float) and is_int(dtype):
            dtype = "float32"
        return const(value, dtype)
    raise CompileError(f"cannot convert {value!r} ({type(value).__name__}) to an expression")


def _unify(a: Any, b: Any) -> tuple[PrimExpr, PrimExpr]:
    """Bring two operands to one dtype: numbers take the other side's; ints widen; int mixes to float."""
    if not isinstance(a, PrimExpr) and not isinstance(b, PrimExpr):
        raise CompileError(f"at least one operand must be an expression, got {a!r} and {b!r}")
    if not isinstance(a, PrimExpr):
        a = convert(a, element_of(b.dtype) if not isinstance(a, float) or is_float(b.dtype) else "float32")
    if not isinstance(b, PrimExpr):
        b = convert(b, element_of(a.dtype) if not isinstance(b, float) or is_float(a.dtype) else "float32")
    if a.dtype == b.dtype:
        return a, b
    la, lb = lanes_of(a.dtype), lanes_of(b.dtype)
    if la != lb:
        if la == 1:
            a = Broadcast(a, lb)
        elif lb == 1:
            b = Broadcast(b, la)
        else:
            raise CompileError(f"vector lanes differ: {a.dtype} vs {b.dtype}")
    ea, eb = element_of(a.dtype), element_of(b.dtype)
    if ea == eb:
        return a, b
    if is_float(ea) != is_float(eb):
        target = ea if is_float(ea) else eb
    else:
        target = ea if _bits(ea) >= _bits(eb) else eb
    return (a if ea == target else Cast(with_lanes(target, lanes_of(a.dtype)), a),
            b if eb == target else Cast(with_lanes(target, lanes_of(b.dtype)), b))


def _bitwise(op: str, logical: type | None, a: Any, b: Any) -> PrimExpr:
    """``a op b``: the bitwise intrinsic on integers, the logical node (``logical``) on booleans."""
    a, b = _unify(a, b)
    if is_int(a.dtype):
        return Call(a.dtype, op, (a, b))
    if logical is None or element_of(a.dtype) != "bool":
        raise CompileError(f"{op} needs integer or boolean operands, got {a.dtype}")
    return logical(a, b)


def _shift(op: str, a: Any, b: Any) -> PrimExpr:
    """``a << b`` / ``a >> b`` in the dtype of ``a`` (a Python int on the left takes ``b``'s)."""
    if not isinstance(a, PrimExpr):
        a = convert(a, element_of(b.dtype))
    if not is_int(a.dtype):
        raise CompileError(f"{op} needs an integer operand, got {a} of dtype {a.dtype}")
    return Call.make(a.dtype, op, [a, convert(b, a.dtype)])


# ---------------------------------------------------------------------------- statements
class Stmt:
    __hash__ = object.__hash__

    def __str__(self) -> str:
        from vtakit.compiler.printer import stmt_str  # noqa: PLC0415
        return stmt_str(self)

    __repr__ = __str__


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"


@dataclass(eq=False, repr=False)
class For(Stmt):
    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: ForKind
    body: Stmt
    thread_tag: str = ""  # for THREAD_BINDING: blockIdx.x, threadIdx.x, vthread, cthread, ...
    annotations: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False, repr=False)
class Allocate(Stmt):
    """Storage for ``buffer`` (its scope says where) live within ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(eq=False, repr=False)
class BufferStore(Stmt):
    buffer: Buffer
    value: PrimExpr
    indices: tuple[PrimExpr, ...]


@dataclass(eq=False, repr=False)
class IfThenElse(Stmt):
    cond: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(eq=False, repr=False)
class AttrStmt(Stmt):
    """An annotation on ``body``: pragmas, coprocessor scopes, storage scopes, thread extents."""

    node: Any
    key: str
    value: Any
    body: Stmt


@dataclass(eq=False, repr=False)
class Evaluate(Stmt):
    value: PrimExpr


@dataclass(eq=False, repr=False)
class SeqStmt(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(eq=False, repr=False)
class LetStmt(Stmt):
    var: Var
    value: PrimExpr
    body: Stmt


@dataclass(eq=False, repr=False)
class AllReduce(Stmt):
    """A cross-thread reduction (TVM's ``tvm_thread_allreduce``).

    The threads of one group, those that differ only in the index ``thread`` (bound to
    ``thread_tag``, a ``threadIdx.*``), each contribute ``value`` where ``condition`` holds (the
    combiner's identity elsewhere); once every thread of the group has arrived, each one finds the
    combination in ``buffer[indices]`` (a buffer private to the thread). Every thread of the group
    must execute the statement: it is a barrier, so it may not sit under a condition that differs
    between the threads of the group. ``combiner`` is a ``te`` CommReducer.
    """

    combiner: Any
    value: PrimExpr
    condition: PrimExpr
    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    thread: Var
    thread_tag: str


def seq(*stmts: Stmt | None) -> Stmt:
    """A statement sequence, flattened, with ``None`` dropped; a single statement stands alone."""
    flat: list[Stmt] = []
    for s in stmts:
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        elif s is not None:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat))


@dataclass(eq=False, repr=False)
class PrimFunc:
    """A lowered function: parameters are buffers (TVM-style: outputs are parameters too)."""

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    attrs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        from vtakit.compiler.printer import func_str  # noqa: PLC0415
        return func_str(self)

    __repr__ = __str__


# ---------------------------------------------------------------------------- traversal
_NODE_TYPES = (PrimExpr, Stmt, Buffer)


def children(node: Any) -> Iterator[Any]:
    """The IR nodes directly below ``node`` (expressions, statements, buffers)."""
    for f in fields(node):
        value = getattr(node, f.name)
        if isinstance(value, _NODE_TYPES):
            yield value
        elif isinstance(value, tuple):
            yield from (v for v in value if isinstance(v, _NODE_TYPES))


def walk(node: Any, visit: Callable[[Any], None]) -> None:
    """Call ``visit`` on every node below and including ``node``, parents first."""
    stack = [node]
    while stack:
        current = stack.pop()
        visit(current)
        stack.extend(reversed(list(children(current))))


def contains(node: Any, types: type | tuple[type, ...]) -> bool:
    """Whether any node below and including ``node`` is an instance of ``types``."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, types):
            return True
        stack.extend(children(current))
    return False


def structural_equal(a: Any, b: Any) -> bool:
    """Whether two IR trees are the same (variables compared by identity)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (Var, Buffer)):
        return False
    if not isinstance(a, (*_NODE_TYPES,)):
        if isinstance(a, tuple):
            return len(a) == len(b) and all(structural_equal(x, y) for x, y in zip(a, b))
        return a == b
    return all(structural_equal(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))


class IRMutator:
    """Rebuilds a tree bottom-up; override ``visit_<ClassName>`` to rewrite a node kind.

    Unchanged subtrees are returned as they are, so a pass that changes nothing is cheap.
    """

    def visit(self, node: Any) -> Any:
        method = getattr(self, f"visit_{type(node).__name__}", None)
        if method is not None:
            return method(node)
        return self.generic_visit(node)

    def generic_visit(self, node: Any) -> Any:
        if not isinstance(node, _NODE_TYPES) or isinstance(node, (Var, Buffer)):
            return node
        changes = {}
        for f in fields(node):
            old = getattr(node, f.name)
            if isinstance(old, _NODE_TYPES):
                new = self.visit(old)
            elif isinstance(old, tuple) and any(isinstance(v, _NODE_TYPES) for v in old):
                new = tuple(self.visit(v) if isinstance(v, _NODE_TYPES) else v for v in old)
                new = old if all(x is y for x, y in zip(new, old)) else new
            else:
                continue
            if new is not old:
                changes[f.name] = new
        if not changes:
            return node
        kwargs = {f.name: changes.get(f.name, getattr(node, f.name)) for f in fields(node)}
        if isinstance(node, PrimExpr) and "dtype" in kwargs and not isinstance(node, (Cast, Call, IntImm, FloatImm)):
            kwargs["dtype"] = ""  # recomputed from the new operands
        return type(node)(**kwargs)


class _Substituter(IRMutator):
    def __init__(self, vmap: dict[Var, Any], bmap: dict[Buffer, Buffer] | None) -> None:
        self.vmap = vmap
        self.bmap = bmap or {}

    def visit_Var(self, node: Var) -> Any:
        return self.vmap.get(node, node)

    def visit_Buffer(self, node: Buffer) -> Any:
        return self.bmap.get(node, node)


def substitute(node: Any, vmap: dict[Var, Any], bmap: dict[Buffer, Buffer] | None = None) -> Any:
    """``node`` with variables replaced by ``vmap`` (values are expressions or numbers) and
    buffers by ``bmap``."""
    if not vmap and not bmap:
        return node
    return _Substituter({k: convert(v) if not isinstance(v, Var) else v for k, v in vmap.items()},
                        bmap).visit(node)


def uses_var(node: Any, pred: Callable[[Var], bool] | set | dict) -> bool:
    """Whether any variable under ``node`` satisfies ``pred`` (or is in the given set/dict)."""
    test = pred if callable(pred) else (lambda v: v in pred)  # noqa: E731
    found = False

    def visit(n: Any) -> None:
        nonlocal found
        if isinstance(n, Var) and test(n):
            found = True

    walk(node, visit)
    return found


def conjuncts(cond: PrimExpr) -> list[PrimExpr]:
    """The terms of ``cond``'s top-level ``&&`` chain, outermost ``likely`` hints removed:
    ``likely(a && b) && c`` gives ``[a, b, c]``."""
    if isinstance(cond, And):
        return conjuncts(cond.a) + conjuncts(cond.b)
    if isinstance(cond, Call) and cond.op == "likely":
        return conjuncts(cond.args[0])
    return [cond]


def int_value(e: Any) -> int | None:
    """The value of an integer immediate; None for anything else."""
    return e.value if isinstance(e, IntImm) else None
