"""The ``shardplan`` command line (typer + rich): one module per command, loaded when its command runs."""
