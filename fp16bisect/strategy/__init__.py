"""What steers the search without being it: the order candidates are tried in (ranking), the build-noise
tolerance of a nondeterministic backend (build_noise), and the prior: a cheap search on the emulator,
certified on the judge (prior: its record and its run; prior_choice: whether it runs, ``--prior``;
alternatives: the emulator's other answers when its set fails on the judge; agreement: the line saying
how the judge's answer relates to the prior's)."""
