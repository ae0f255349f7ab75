"""What can be served on what: the bundled and user model configs, the GPU and cluster catalog, the published
JSON Schemas of the contracts."""
