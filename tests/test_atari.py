import numpy as np
import pytest

from models.envs.atari import RecordGameScore, game_score_of, is_atari, make_atari_env

GAMES = ["QbertNoFrameskip-v4", "SpaceInvadersNoFrameskip-v4", "GravitarNoFrameskip-v4"]
OBS_SHAPE = (4, 84, 84)


def find_wrapper(env, cls):
    while not isinstance(env, cls):
        env = env.env
    return env


def play(env, seed, max_steps, stop_at_game_end=True):
    """Random play; yields (reward, terminated, truncated, info) and resets like EnvBatch does."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    for _ in range(max_steps):
        _, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        yield reward, terminated, truncated, info
        if terminated or truncated:
            if stop_at_game_end and "game_score" in info:
                return
            env.reset()


@pytest.mark.parametrize("env_id", GAMES)
def test_training_env_obs_and_clipped_rewards(env_id):
    env = make_atari_env(env_id, training=True)
    assert env.observation_space.shape == OBS_SHAPE and env.observation_space.dtype == np.uint8
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    obs, _ = env.reset(seed=1)
    assert obs.shape == OBS_SHAPE and obs.dtype == np.uint8
    rng = np.random.default_rng(1)
    rewards = []
    for _ in range(300):
        obs, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        assert obs.shape == OBS_SHAPE and obs.dtype == np.uint8
        rewards.append(reward)
        if terminated or truncated:
            obs, _ = env.reset()
    assert set(rewards) <= {-1.0, 0.0, 1.0}
    env.close()


def test_qbert_true_score_is_unclipped():
    env = make_atari_env("QbertNoFrameskip-v4", training=True)
    clipped_sum, life_losses, info = 0.0, 0, {}
    for reward, terminated, _, info in play(env, seed=0, max_steps=2000):
        clipped_sum += reward
        life_losses += terminated and "game_score" not in info
    score = game_score_of(info)
    assert score is not None, "a random Qbert game ends within 2000 steps"
    assert life_losses == 3  # Qbert has 4 lives: 3 lost lives end training episodes, then the game
    assert clipped_sum >= 2
    # every Qbert reward is a multiple of 25: the true score is unclipped and spans all lives
    assert score % 25 == 0
    assert score >= 25 * clipped_sum
    assert info["game_length"] > 0
    env.close()


def test_eval_env_rewards_are_raw_and_sum_to_game_score():
    env = make_atari_env("QbertNoFrameskip-v4", training=False)
    total, info, terminations = 0.0, {}, 0
    for reward, terminated, truncated, step_info in play(env, seed=0, max_steps=3000):
        total += reward
        terminations += terminated or truncated
        info = step_info
    assert terminations == 1  # no episodic life: only the real game end terminates
    assert info["lives"] == 0
    assert game_score_of(info) == total and total > 25 and total % 25 == 0
    env.close()


def test_episodic_life_ends_training_episode_but_game_score_accumulates():
    env = make_atari_env("QbertNoFrameskip-v4", training=True)
    recorder = find_wrapper(env, RecordGameScore)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    lives_before = env.unwrapped.ale.lives()
    losses = []
    for _ in range(2000):
        _, _, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        if not (terminated or truncated):
            continue
        if "game_score" in info:
            break
        assert terminated and info["lives"] == lives_before - 1
        score, length = recorder.score, recorder.length
        env.reset()
        # a life-loss reset does not restart the game: lives, score and length carry on
        assert env.unwrapped.ale.lives() == info["lives"]
        assert recorder.score >= score and recorder.length > length
        lives_before = info["lives"]
        losses.append(score)
    assert len(losses) == 3
    assert info["game_score"] >= losses[-1] and info["game_score"] == recorder.score
    env.reset()  # after the real end, reset restarts the game
    assert env.unwrapped.ale.lives() == 4 and recorder.score == 0.0
    env.close()


def test_same_seed_same_trajectory():
    def trajectory():
        env = make_atari_env("SpaceInvadersNoFrameskip-v4", training=True)
        obs, _ = env.reset(seed=7)
        frames = [obs]
        for t in range(50):
            frames.append(env.step(t % env.action_space.n)[0])
        env.close()
        return np.stack(frames)

    np.testing.assert_array_equal(trajectory(), trajectory())


def test_seeded_reset_restarts_the_game():
    env = make_atari_env("QbertNoFrameskip-v4", training=True)
    first, _ = env.reset(seed=3)
    for _ in range(40):
        env.step(2)
    again, _ = env.reset(seed=3)
    np.testing.assert_array_equal(again, first)
    env.close()


def test_batch_of_observations_is_one_byte_per_pixel():
    env = make_atari_env("QbertNoFrameskip-v4", training=True)
    obs, _ = env.reset(seed=0)
    batch = [obs]
    for _ in range(31):
        batch.append(env.step(0)[0])
    stacked = np.stack(batch)
    assert stacked.dtype == np.uint8 and stacked.nbytes == 32 * 4 * 84 * 84
    assert not np.shares_memory(batch[-1], batch[-2])  # each step's observation is its own array
    env.close()


def test_is_atari():
    assert is_atari("QbertNoFrameskip-v4") and is_atari("ALE/Pong-v5")
    assert not is_atari("CartPole-v1") and not is_atari("NoSuchGame-v0")
    with pytest.raises(ValueError):
        make_atari_env("CartPole-v1")


def test_reused_envs_sample_what_new_envs_sample():
    """Warm workers keep their built Atari envs (0.17 s each to build): a reused env that was left
    mid-game (after lost lives) samples exactly what a new one does from the same seed."""
    from models.envs.batch import EnvBatch, close_idle_envs
    from models.rl.rollout import sample_fragment

    def random_policy(seed):
        rng = np.random.default_rng(seed)
        return lambda obs: (rng.integers(0, 6, size=len(obs)), np.zeros(len(obs), np.float32))

    def fragment(seed, steps, reuse):
        envs = EnvBatch("QbertNoFrameskip-v4", 2, seed=seed, reuse=reuse)
        kept = [id(env) for env in envs.envs]
        try:
            return sample_fragment(random_policy(seed), envs, steps), kept
        finally:
            envs.close()

    close_idle_envs()
    new, _ = fragment(3, 300, reuse=False)
    _, built = fragment(11, 400, reuse=True)  # builds the envs, plays them into a later game state
    reused, kept = fragment(3, 300, reuse=True)
    close_idle_envs()
    assert kept == built
    assert new.terminated.any()  # the fragment crosses lost lives
    for name in ("obs", "actions", "rewards", "terminated", "truncated", "last_obs"):
        np.testing.assert_array_equal(getattr(reused, name), getattr(new, name), err_msg=name)
