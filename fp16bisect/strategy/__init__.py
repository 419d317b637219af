"""What steers the search without being it: the order candidates are tried in (ranking), the build-noise
tolerance of a nondeterministic backend, and the prior (a cheap search on the emulator, certified on the judge)."""
