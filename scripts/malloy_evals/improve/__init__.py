"""eval-improve: from a diagnosed model defect to an accepted (or rolled back) model change: the
journal, the checkpoint, the checks on a change, a provider's draft, and the gate."""
