"""Engine audits: real inference engines' speculative decoding certified against their own laws (docs/audit.md).

- :mod:`.base`     the ``Engine`` interface every engine implements, its registry, ``EngineUnavailable``
- :mod:`.tiny`     the tiny local checkpoints every engine converts; their float64 logits (the independent law)
- :mod:`.audit`    the loop (``audit``), the report (``AuditReport``), ``resispec audit``'s engine table
- :mod:`.mutants`  planted engine bugs (negative controls: ``resispec audit ENGINE --plant BUG``)
- one module per engine: ``transformers_engine``, ``ortgenai``, ``mlxlm``, ``llamacpp`` (imported by name, lazily)

Nothing here is imported by ``import exactness``.
"""
