"""The diagnoser: case -> candidates (index) -> SOPs (knowledge) -> prompt -> LLM -> answer.

- ``cases``: input.json parsing and the UTC window of a description.
- ``prompt`` / ``decide``: the prompt within budget (each candidate with its evidence and the
  SOP signal check), the constrained decision, its repair turn and the optional second turn.
- ``trace`` / ``answer``: the reasoning trace and the answer in the task's format.
- ``pipeline`` / ``runner`` / ``cli``: one case end to end, resumable batches, ``diagnose``.
- ``tools``: the agent-cloud observation tools (``Toolbox``: metrics, logs, traces of the raw
  window vs its baseline, index candidates, SOP search); bad calls become observations.
- ``agents`` / ``react`` / ``team``: ``--mode react`` (a tool loop) and ``--mode team``
  (controller, metric/log/trace specialists, judge); prompts in ``prompts/*.md``;
  docs/agentic.md compares the modes.
The LLM chooses component and fault type; code prepares evidence and validates. Never
reads ground truth.
"""
