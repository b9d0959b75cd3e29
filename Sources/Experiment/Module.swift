// Experiments and the gate; see ExperimentLayout.swift.
