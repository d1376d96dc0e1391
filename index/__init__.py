"""The evidence index: on-disk day partitions plus a manifest (see README.md), and the
query ``index.query.query_window`` that ranks guilty-looking components for a window."""
