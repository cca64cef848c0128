"""Load modes: how requests are scheduled (rounds, closed, ladder, open, trace, search)."""
