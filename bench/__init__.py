"""drainpipe benchmarks: ``python -m bench.run --help``."""
