"""Whether an answerer's host tool uses show it reached the answers: see rules.py for the rules."""
