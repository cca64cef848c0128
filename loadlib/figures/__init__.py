"""The figures, defined once and used both live and by the post-processor: per-request formulas,
the protocol's tables, the free-running modes' tables, and the live counters."""
