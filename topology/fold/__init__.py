"""The fold adapter: a batch of command records through the pure core, the stores behind it."""
