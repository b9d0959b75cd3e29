// Running tasks: LocalExecution is the one path that runs a split's tasks on a kernel (the
// supervisor's host, a held-out VM's guest, a worker node); the executors choose where.
