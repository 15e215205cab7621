"""Mechanical checks that decide without a model: contamination of the answerer's tool log, the must-
not-use veto, and the reader of host tool logs."""
