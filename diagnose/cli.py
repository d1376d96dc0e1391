"""Command line of the diagnoser (placeholder until implemented)."""


def rca_diagnose() -> None:
    """Diagnose cases."""


def main() -> None:
    raise SystemExit("diagnose: not implemented yet")
