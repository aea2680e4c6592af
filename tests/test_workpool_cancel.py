"""The work-pool backend settles a timed-out actor's run that nobody moved past Cancelling.

Only a real Prefect API is needed (the session's temporary one): the stuck run is made by hand.
"""

from __future__ import annotations


def test_a_timed_out_actor_run_left_cancelling_is_settled_as_cancelled(prefect_api_url):
    """A run cancelled while its process boots can be ignored by both the worker (the run has
    started) and its engine (not yet watching): the backend settles it once the actor's own
    deadline watchdog has surely ended the process."""
    import time

    from prefect import flow, get_client
    from prefect.states import Cancelling, Running

    from tasks.workpool import DEADLINE_GRACE_S, SETTLE_MARGIN_S, settle_cancelling_later

    @flow(name="stuck-actor")
    def stuck():  # never run: only its flow run exists
        pass

    with get_client(sync_client=True) as client:
        run = client.create_flow_run(stuck, state=Running())
        client.set_flow_run_state(run.id, Cancelling(message="timed out"), force=True)
        untouched = client.create_flow_run(stuck, state=Running())
        # deadline passed long enough ago: settle at once; a run not Cancelling is left alone
        passed = time.time() - DEADLINE_GRACE_S - SETTLE_MARGIN_S
        settle_cancelling_later(run.id, passed, "actor r0-a0 ran past its 2.0 s timeout").join(30)
        settle_cancelling_later(untouched.id, passed, "no").join(30)
        state = client.read_flow_run(run.id).state
        assert state.is_cancelled(), state
        assert "ended on its own deadline" in state.message
        assert client.read_flow_run(untouched.id).state.is_running()
