"""The reinforcement learning itself: networks and action heads, the actor-critic policy, observation
and reward normalisation merged across actors, an actor's sampling loop and its timings, GAE and the
PPO learner (flat parameter buffers), evaluation on whole episodes and the trained policy as a
function. Pure torch and numpy; no Prefect, no MLflow.
"""
