"""One search from start to end: the pipeline (samples, backend, oracle, search), its outcome, and the override
JSON built from that outcome."""
