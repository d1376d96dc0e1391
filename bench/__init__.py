"""Benchmarks in the spirit of AIOpsLab: problem sets, agents behind one interface, reports.

- ``problems``: a problem is a case (task + window) with its solution (ground truth);
  problem sets come from simulated datasets, with schedules covering every fault type.
- ``agents``: anything that turns cases into an answer file (the LLM diagnoser here).
- ``report``: challenge score through ``judge/`` plus cost figures from run records.
"""
