"""Environments: a synchronous batch of gymnasium envs for one actor, the Atari (DeepMind) setting, an
episode carried from one round's actor to the next (MuJoCo), and what a MuJoCo body did in an
episode. Pure: gymnasium, ale-py and mujoco; no Prefect, no MLflow.
"""
