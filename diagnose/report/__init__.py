"""Pictures of a diagnosis: the case page an SRE reads at a glance, and reusable figures.

- ``plots``: matplotlib (Agg) figures as inline PNGs; generic ones (bars, lines, heatmaps,
  confusion matrices) are shared with ``bench``'s report.
- ``units``: the unit of a KPI, for axis labels.
- ``evidence``: what the page shows, read from the run record and the evidence index.
- ``case``: the self-contained HTML page of one case and the index page of a batch.
"""
