"""Seeing a plan: a self-contained HTML report (:mod:`.html`) and a Chrome/Perfetto trace of its simulated
schedule (:mod:`.timeline`)."""
