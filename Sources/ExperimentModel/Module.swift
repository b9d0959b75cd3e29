// An experiment's model: where its files live (Layout), its config, its records, the
// benchmark kinds and task images, the failure book and the gate's rules. Nothing here runs
// a task: Execution does, and Experiment's operations put the two together.
