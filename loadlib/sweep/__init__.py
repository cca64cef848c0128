"""Server-configuration sweeps: a profile's `[server]` (`spec`), its configurations in order
(`grid`), and each server started, checked and stopped as a child process (`launch`)."""
