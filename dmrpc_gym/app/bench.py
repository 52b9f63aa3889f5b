"""``dmrpc-gym bench ADDRESS``: steps per second of a dm_env_rpc world with random actions.

Measures the client as users run it: :class:`~dmrpc_gym.client.env.DmRpcEnv` one step
at a time, and with ``num_envs > 1`` also :class:`~dmrpc_gym.client.vector.DmRpcVectorEnv`
(every sub-env's step in flight at once); a multi-agent world as a
:class:`~dmrpc_gym.client.parallel.DmRpcParallelEnv` (a step is a round of every agent). Actions are sampled before the clock
starts, so the numbers are the round trips, packing and unpacking.
"""
from __future__ import annotations

import math
import time
from typing import Any, Mapping

from dmrpc_gym.client.env import DmRpcEnv

__all__ = ["bench", "bench_env", "bench_parallel_env", "bench_vector_env", "format_bench"]


def _timed(step, reset, actions: list, warmup: int) -> dict[str, Any]:
    """Run ``step(action)`` over ``actions`` (after ``warmup`` untimed steps); ``reset()`` when done."""
    episodes = 0
    for action in actions[:warmup]:
        if step(action):
            reset()
    start = time.perf_counter()
    for action in actions[warmup:]:
        if step(action):
            episodes += 1
            reset()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "episodes": episodes}


def bench_env(address: str, steps: int = 2000, *, seed: int = 0, warmup: int = 20,
              **env_kwargs: Any) -> dict[str, Any]:
    """``DmRpcEnv`` steps per second with random actions (``env_kwargs`` go to ``DmRpcEnv``)."""
    env = DmRpcEnv(address, **env_kwargs)
    try:
        env.reset(seed=seed)
        env.action_space.seed(seed)
        actions = [env.action_space.sample() for _ in range(warmup + steps)]

        def step(action) -> bool:
            _, _, terminated, truncated, _ = env.step(action)
            return terminated or truncated
        result = _timed(step, env.reset, actions, warmup)
    finally:
        env.close()
    return {"steps": steps, **result, "steps_per_second": steps / result["seconds"]}


def bench_parallel_env(address: str, steps: int = 2000, *, seed: int = 0, warmup: int = 5,
                       join_settings: Any = None, **env_kwargs: Any) -> dict[str, Any]:
    """``DmRpcParallelEnv`` rounds per second (every agent acts in a round) with random actions."""
    from dmrpc_gym.client.parallel import DmRpcParallelEnv
    if join_settings:
        raise ValueError("--join is for single-agent worlds; a multi-agent world is joined as every agent")
    env = DmRpcParallelEnv(address, **env_kwargs)
    try:
        env.reset(seed=seed)
        for i, agent in enumerate(env.possible_agents):
            env.action_space(agent).seed(seed + i)
        actions = [{a: env.action_space(a).sample() for a in env.possible_agents} for _ in range(warmup + steps)]

        def step(action) -> bool:
            env.step({a: action[a] for a in env.agents})
            return not env.agents
        result = _timed(step, env.reset, actions, warmup)
        agents = list(env.possible_agents)
    finally:
        env.close()
    return {"steps": steps, **result, "steps_per_second": steps / result["seconds"], "agents": agents}


def bench_vector_env(address: str, num_envs: int, steps: int = 2000, *, seed: int = 0, warmup: int = 5,
                     **env_kwargs: Any) -> dict[str, Any]:
    """``DmRpcVectorEnv`` env-steps per second (``steps`` env-steps over ``num_envs`` sub-envs)."""
    from dmrpc_gym.client.vector import DmRpcVectorEnv
    envs = DmRpcVectorEnv(num_envs, address, **env_kwargs)
    try:
        envs.reset(seed=seed)
        envs.action_space.seed(seed)
        vector_steps = math.ceil(steps / num_envs)
        actions = [envs.action_space.sample() for _ in range(warmup + vector_steps)]

        def step(action) -> bool:   # NEXT_STEP autoreset: never reset by hand
            _, _, terminated, truncated, _ = envs.step(action)
            step.episodes += int(terminated.sum() + truncated.sum())
            return False
        step.episodes = 0
        result = _timed(step, envs.reset, actions, warmup)
    finally:
        envs.close()
    env_steps = vector_steps * num_envs
    return {"num_envs": num_envs, "steps": env_steps, "seconds": result["seconds"],
            "episodes": step.episodes, "steps_per_second": env_steps / result["seconds"]}


def format_bench(result: Mapping[str, Any]) -> str:
    """The one-line summary :func:`bench` prints."""
    env = result["env"]
    if "agents" in env:
        return (f"{result['address']}: DmRpcParallelEnv ({len(env['agents'])} agents) "
                f"{env['steps_per_second']:,.0f} rounds/s ({env['steps']} rounds, {env['episodes']} episodes)")
    line = (f"{result['address']}: DmRpcEnv {env['steps_per_second']:,.0f} steps/s "
            f"({env['steps']} steps, {env['episodes']} episodes)")
    vector = result.get("vector")
    if vector is not None:
        line += (f"; DmRpcVectorEnv x{vector['num_envs']} {vector['steps_per_second']:,.0f} env-steps/s "
                 f"({vector['steps_per_second'] / env['steps_per_second']:.1f}x)")
    return line


def bench(address: str, steps: int = 2000, world_settings: Mapping[str, Any] | None = None, *,
          world_name: str | None = None, join_settings: Mapping[str, Any] | None = None,
          num_envs: int = 1, seed: int = 0, connect_timeout: float = 5.0, step_timeout: float | None = 10.0,
          quiet: bool = False, tls: Any = None, token: str | None = None,
          compression: str | None = None, name: str | None = None) -> dict[str, Any]:
    """Measure steps/s of the world at ``address`` with random actions; prints a one-line summary.

    Creates a world with ``world_settings`` (or joins ``world_name``) for each
    env. With ``num_envs > 1`` a ``DmRpcVectorEnv`` of that many sub-envs is
    measured too. An unreachable address raises ``ConnectionError`` naming it.
    A multi-agent world is measured as a ``DmRpcParallelEnv`` (``"env"`` then has
    ``"agents"``; ``num_envs`` does not apply). ``tls``, ``token`` and ``compression``
    go to every connection (see ``DmRpcEnv``); ``name`` is how the summary names the
    world (default: ``address``).

    Returns ``{"address", "env": {steps, seconds, episodes, steps_per_second},
    "vector": {num_envs, steps, seconds, episodes, steps_per_second} or None}``.

    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> result = bench(embedded_server("catch").address, steps=50, quiet=True)
    >>> result["env"]["steps"], result["env"]["steps_per_second"] > 0
    (50, True)
    """
    from dmrpc_gym.app.report import inspect_world
    kwargs = dict(world_settings=world_settings, world_name=world_name, join_settings=join_settings,
                  connect_timeout=connect_timeout, step_timeout=step_timeout, tls=tls, token=token,
                  compression=compression)
    report = inspect_world(address, world_settings=world_settings, world_name=world_name,
                           join_settings=join_settings, connect_timeout=connect_timeout,
                           tls=tls, token=token, compression=compression)
    measure = bench_parallel_env if report.agents else bench_env
    result: dict[str, Any] = {"address": name or address, "env": measure(address, steps, seed=seed, **kwargs),
                              "vector": None}
    if num_envs > 1 and not report.agents:
        result["vector"] = bench_vector_env(address, num_envs, steps, seed=seed, **kwargs)
    if not quiet:
        print(format_bench(result), flush=True)
    return result
