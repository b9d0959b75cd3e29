// Local benchmarks in Harbor task layout; see LocalBenchmark.swift.
