//! The `dque` command, run as a real binary against real queues.
