"""The cold archive of run history: run-events past the hot window, as Parquet (docs/history.md)."""
