"""The application shell: the umbrella ``rca`` command and the demo. Sits on top of every package."""
