"""The demo pipeline (placeholder until implemented)."""


def demo() -> None:
    """Run the demo."""
