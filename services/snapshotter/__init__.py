"""The snapshotter: periodic state snapshots of the fold, off the scheduler's path."""
