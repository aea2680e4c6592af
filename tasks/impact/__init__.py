"""IMPACT's always-on actors and its learner's chunk loop (flows/impact.py wraps each chunk in a
Prefect task). Every actor runs models/impact/actor.py `ImpactActor.sample` in a loop; the pools
differ only in where it runs and how weights and fragments travel:

- local_pool.py: persistent worker processes on this machine (weights in shared memory read under
  a lock, fragments over pipes; no pickle of anything an actor can write);
- dask_pool.py: long-running Dask tasks (weights through a Dask Variable, fragments through a Dask
  Queue as models/run/wire.py bytes);
- inbox.py: what both share (fragments on a local queue, health checks);
- learn_chunk.py: the learner's loop for one chunk of learner steps.

The work-pool backend is refused by design: its actors are one flow run per job, ephemeral and
one-shot per round, the opposite of IMPACT's always-on actors (models/impact/config.py validates it).
"""
