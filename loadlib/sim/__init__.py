"""A built-in stand-in for an SGLang server with speculative decoding.

`python -m loadlib.sim` serves the OpenAI chat API over HTTP with SGLang's wire shapes and a
continuous-batching engine that runs on simulated time, so that the tool has a target (and a
test bed) on machines without a GPU. `loadlib.sim.process.start_simulator` starts it as a
subprocess for locustfiles, tests and benchmarks.
"""
