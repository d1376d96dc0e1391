"""An evaluation harness for RCA agents in the spirit of AIOpsLab (see bench/README.md).

Problems ⟨task, context, solution⟩ at four task levels (``problems``, ``tasks``), the
agent-cloud interface and sessions (``interface``, ``session``), an interactive simulated
cloud for mitigation (``cloud``), agents and baselines (``agents``), a SQLite results store
(``store``) and reports (``summary``, ``figures``); plus the full-path benchmark of
``rca demo`` (``pipeline``, ``report``).
"""
