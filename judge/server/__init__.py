"""The judge server: the 2025 challenge submission protocol over HTTP, scoring off the request path.

See judge/README.md ("Judge server") for the protocol, limits and guarantees.
"""
