"""A test double for an experiment whose process dies in the middle of a nested run: the run
already started in MLflow (left RUNNING), then the exception, as a killed process leaves it."""

from __future__ import annotations

from collections.abc import Callable


def dies_at_run(n: int, real_train: Callable[..., object], ran: list[str], client) -> Callable[..., object]:
    """A `train` that runs the first n trainings for real (their schedulers appended to `ran`)
    and dies in the next one with its nested MLflow run RUNNING."""

    def train(**kwargs):
        if len(ran) == n:
            parent = client.get_run(kwargs["parent_run_id"])
            client.create_run(parent.info.experiment_id, tags={"mlflow.parentRunId": kwargs["parent_run_id"]})
            raise RuntimeError("the process died")
        ran.append(kwargs["scheduler"])
        return real_train(**kwargs)

    return train
