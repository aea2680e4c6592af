"""IMPACT (Luo et al., ICLR 2020), the asynchronous baseline: V-trace, its circular fragment buffer,
target network and learner, and its run's progress and stop rules. It shares the policy, the
sampling loop and the clipped surrogate with models/rl, the run configuration's machinery with
models/run and its bill with models/billing. Pure torch and numpy.
"""
