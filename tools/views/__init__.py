"""Views of a DAG and its figures: JSON, Mermaid and DOT drawings, the layer-collapsed view, the names of the
per-phase columns."""
