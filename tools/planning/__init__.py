"""From a request to a Plan: search, evaluate the chosen deployment (DAG, validation, figures), explain it."""
