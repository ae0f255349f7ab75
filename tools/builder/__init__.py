"""Strategy to DAG (:mod:`.build`)."""
