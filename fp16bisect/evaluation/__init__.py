"""A plan becomes a verdict: the oracle (plan -> Evaluation: pass, fail or could not evaluate, on every sample)
and the journal that records each evaluation before and after it runs."""
