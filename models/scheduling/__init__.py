"""Choosing each round's actor count: the heuristic schedulers (Fixed, Max, Adapt, Increase, Decrease,
Switch), the learned scheduler (its observed features, reward, PPO agent, checkpoints and their
provenance) and what a scheduler training records. Pure torch and numpy.
"""
