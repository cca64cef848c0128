"""What the server itself says: its identity (probe), its Prometheus metrics (scrape), their
figures per cell, the watch that takes them during a run, and its prefix cache."""
