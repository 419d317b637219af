"""One search from start to end: its typed options, the pipeline (samples, backend, oracle, search), its outcome,
the override JSON's sections taken from that outcome (the file is built by artifacts/override_json.py), and the
paths of the files written beside -o."""
