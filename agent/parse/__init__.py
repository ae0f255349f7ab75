"""Plain-language planning requests read into fields, deterministically (:mod:`.request`), one reader per field
family."""
