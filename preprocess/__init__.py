"""Raw telemetry in, compact evidence out (the nightly half of the pipeline).

- ``layout`` / ``readers``: the real release layout (CST file names, UTC inside, every
  variant of data-contract.md) read into the canonical frames of ``schema``.
- ``detect``: the detector contract (build / score, frozen ``Params``) and the ``DETECTORS``
  registry that ``index/`` loops over.
- ``detect_metric`` / ``detect_log`` / ``detect_trace``: robust baselines and ruptures
  change points, Drain3 templates, call-graph edge latency and errors.
Never calls an LLM and never reads ground truth.
"""
