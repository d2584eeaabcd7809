"""The worker process: polls for ready tasks, runs them under a lease, reports, drains."""
