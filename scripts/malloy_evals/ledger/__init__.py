"""The run folder: run.json, the append-only event ledger and its live view, validation, and write-
once artifacts."""
