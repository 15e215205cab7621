"""Why each failure happened and who owns it: selection, evidence packets, the diagnoser's replies,
issues and the mechanical first look."""
