"""`python -m fp16bisect`: the command line."""
from fp16bisect.cli.main import main

raise SystemExit(main())
