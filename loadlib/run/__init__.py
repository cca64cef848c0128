"""The run: its lifecycle and the one writer of its manifest, options, Locust's shape, users and
workers, the live figures and the web UI."""
