"""The scheduler process: the transactional fold runtime, the ticker, and the after relay."""
