"""One answer scored end to end: transcripts into attempts, re-execution, scoring, retrieval recall
and model coverage; and the harness (`answer.harness`) that puts a set's questions to a blind
answerer and records every attempt."""
