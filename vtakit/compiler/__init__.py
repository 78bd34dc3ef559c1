"""The tensor compiler: TVM classic TE on one shared loop IR (docs/architecture.md §5).

- :mod:`.te` -- tensor expressions (``placeholder``, ``compute``, reductions) and schedules
  (``create_schedule``, split/fuse/reorder/tile, compute_at/inline/root, cache_read/write,
  bind, vectorize/unroll/parallel, pragma, tensorize with ``decl_tensor_intrin``).
- :mod:`.ir`, :mod:`.printer`, :mod:`.ir_builder` -- the loop IR, its text form and a builder.
- :mod:`.lower` -- ``lower(schedule, args)``: bound inference, loop nests, flattening and the
  phased passes; :mod:`.transform` (PassContext) and :mod:`.scope` (memory scopes) are the
  extension points targets use.
- :mod:`.arith` -- the integer simplifier and bound analysis.
- :mod:`.interpreter` -- executes any lowered function on numpy arrays (the reference).
- :mod:`.build` -- ``build(schedule, args, target=...)`` dispatching to registered backends
  (``backend.llvm`` for CPUs, ``vta`` for the accelerator).
- :mod:`.testing` -- schedule variants with numpy references shared by the backends' tests.
"""
