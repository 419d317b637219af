"""The command line: argument parsing, the subcommands and their exit codes, batch manifests."""
