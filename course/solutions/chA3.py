"""Written answers to appendix A3's exercises (the tensor-parallel process pool)."""

__all__ = ["EXPLANATIONS"]

EXPLANATIONS = {
    "A3.1": (
        "Two worker processes (ranks 1 and 2; rank 0 is the caller), so worker_pids has two entries.\n"
        "The layout: header_bytes 8 (the message length), readers [1, 2] (every worker reads the same\n"
        "segment), wakeups 2 (one semaphore per worker, so one frozen worker cannot hold the others up)\n"
        "and heartbeat_slots 2 (one per worker; rank 0 needs none, it is the one watching)."),
    "A3.2": (
        "Both pools run: each has its own FileStore in its own private directory, its own shared-memory\n"
        "segment and its own group object. init_process_group installs the process's one default group;\n"
        "a second engine would fail with 'trying to initialize the default process group twice', or\n"
        "would have to share the first engine's group and ranks. A fixed TCP port is one resource per\n"
        "machine: the second engine's rank 0 cannot bind it while the first one holds it (address in\n"
        "use). A file in a fresh private directory has neither problem, and it opens no socket at all."),
}
