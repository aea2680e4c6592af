"""One training run: its configuration (every parameter, validated, filled from the workload presets),
the workload it is asked to do, its state across rounds and stop rules, per-round metrics, the
checkpoint and the round journal that make it resumable, and the wire format between processes. Pure
Python; no Prefect, no MLflow.
"""
