"""After the run: reports, comparisons and plots from the raw records of runs (`python -m analysis`).

The end-of-run summary that the live run prints is `loadlib.report.summary.render_summary`;
`python -m analysis report` prints it too, after the manifest, so the two can never disagree.
"""
