"""What a run's records read as: the end-of-run summary (printed live and by `python -m
analysis report`) and the documents every output format renders. The live run and the
post-processor both present through this package, so `loadlib` never imports `analysis`."""
