"""Raw telemetry in, compact evidence out (the nightly half of the pipeline).

- ``layout`` / ``readers``: the real release layout (CST file names, UTC inside, every
  variant of data-contract.md) read into the canonical frames of ``schema``.
- ``topology``: services, pods, nodes, pod->node placement and call edges, from the data.
- ``detect_metric`` / ``detect_log`` / ``detect_trace``: robust baselines and ruptures
  change points, Drain3 templates, call-graph edge latency and errors.
- ``nightly`` / ``cli``: ``rca preprocess``, writing day partitions into ``index/``.
Never calls an LLM and never reads ground truth.
"""
