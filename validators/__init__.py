"""Validators: every rule of the knowledge base that a machine can check, run over a parallel strategy DAG.

:func:`.validate.validate` runs the registry (one check per knowledge rule ID) and returns a ValidationReport;
:func:`.schema_check.validate_json` first checks outside JSON against the DAG JSON Schema. Rules with
nothing to check in a graph are listed in :data:`.registry.INFORMATIONAL` with the reason.
"""
