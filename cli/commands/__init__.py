"""One module per command of the ``shardplan`` command line; each registers its commands on
:data:`shardplan.cli.app.app` and is imported when one of them runs."""
