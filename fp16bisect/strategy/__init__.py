"""What steers the search without being it: the order candidates are tried in (ranking), the build-noise
tolerance (build_noise), and the prior, a cheap search on the emulator certified on the judge (prior; whether
it runs: prior_choice; its other answers when its set fails: alternatives; the line on how they agree: agreement)."""
