"""Pydantic contracts of shardplan, and the plain arithmetic over them (model sizes, buildability, node packing):
light to import, no I/O."""
