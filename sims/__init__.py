"""Simulated environments for vla-wmrl, registered in gymnasium's registry with lazy entry points.

Select one by short name::

    from sims import make_env, make_vector_env
    env = make_env("robosuite_lift", image_size=64)
    envs = make_vector_env("robosuite_lift", num_envs=2)

``sims`` never imports ``vla_wmrl``.
"""

from __future__ import annotations

import logging
import os

os.environ.setdefault("MUJOCO_GL", "egl")  # headless offscreen rendering (Mesa's software EGL on CPU machines)
logging.getLogger("robosuite_logs").setLevel(logging.ERROR)  # robosuite warns about optional extras on import

import gymnasium as gym

# short name -> (gymnasium id, entry point, default kwargs)
SIMS: dict[str, tuple[str, str, dict]] = {
    "robosuite_lift": ("vla_wmrl/RobosuiteLift-v0", "sims.robosuite_env:RobosuiteEnv", {"task": "Lift", "horizon": 100}),
    "robosuite_stack": ("vla_wmrl/RobosuiteStack-v0", "sims.robosuite_env:RobosuiteEnv", {"task": "Stack", "horizon": 150}),
    "mujoco_reach": ("vla_wmrl/MujocoReach-v0", "sims.mujoco_reach:MujocoReachEnv", {"horizon": 50}),
}

for _name, (_id, _entry, _kwargs) in SIMS.items():
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_entry, kwargs=_kwargs, disable_env_checker=True)


def gym_id(name: str) -> str:
    """The gymnasium id of a short sim name.

    Raises:
        ValueError: unknown name; the message lists the valid names.
    """
    if name not in SIMS:
        raise ValueError(f"unknown sim {name!r}; valid sims: {sorted(SIMS)}")
    return SIMS[name][0]


def make_env(name: str, **kwargs) -> gym.Env:
    """Make one environment by short name; ``kwargs`` override the registered defaults."""
    return gym.make(gym_id(name), **kwargs).unwrapped


def _env_fn(name: str, kwargs: dict):
    def fn():
        logging.getLogger("robosuite_logs").setLevel(logging.ERROR)
        return make_env(name, **kwargs)
    return fn


def make_vector_env(name: str, num_envs: int, asynchronous: bool = True, **kwargs) -> gym.vector.VectorEnv:
    """Several copies of an environment, each in its own process (``asynchronous``) or in this one.

    Autoreset is disabled: the caller resets finished sub-environments with their own seeds through
    ``reset(seed=[...], options={"reset_mask": mask})``, which keeps every episode individually seeded.
    """
    gym_id(name)  # fail early on an unknown name
    fns = [_env_fn(name, kwargs) for _ in range(num_envs)]
    mode = gym.vector.AutoresetMode.DISABLED
    if asynchronous:
        # The instruction is a Text space, which shared memory cannot hold; "forkserver" avoids forking EGL state.
        return gym.vector.AsyncVectorEnv(fns, shared_memory=False, autoreset_mode=mode, context="forkserver")
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
