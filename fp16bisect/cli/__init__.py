"""The command line: argument groups defined once (args), the subcommands (commands), the entry point and its exit
codes (main), batch manifests (batch)."""
