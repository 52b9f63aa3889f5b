"""The RLlib env creators of the ``dmrpc/...`` names, and :func:`register` that registers them.

Each creator takes RLlib's ``env_config`` (an ``EnvContext``): the env's
keyword arguments, plus ``addresses`` (a list of servers the sub-envs are
spread over, see :mod:`~dmrpc_gym.integrations.rllib.spread`). Every env
comes in the flat-spaces view (:class:`~dmrpc_gym.integrations.flat_spaces.FlatSpaces`), so
RLlib's default models take it as it is.

>>> env = catch_env({"world_settings": {"rows": 5}})     # Catch on this process's embedded server
>>> env.observation_space, env.action_space
(Box(0.0, 1.0, (50,), float32), Discrete(3))
>>> env.close()
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

import gymnasium as gym

from dmrpc_gym.integrations.rllib.spread import pick_address, pick_addresses, runner_context
from dmrpc_gym.integrations.flat_spaces import FlatSpaces, FlatSpacesVector
from dmrpc_gym._extras import install_hint

__all__ = ["register", "ENV_CREATORS", "remote_env", "catch_env", "tag_env", "godot_env"]


def _check_keys(name: str, kwargs: Mapping[str, Any], target: Callable) -> None:
    """A clear error for an env_config key ``target`` does not take (``addresses`` is popped before)."""
    parameters = inspect.signature(target).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = sorted(set(kwargs) - set(parameters))
    if unknown:
        allowed = sorted(set(parameters) - {"self"} | {"addresses"})
        raise ValueError(f"{name}: env_config has unknown keys {unknown}; expected some of {allowed}")


def _single_agent(name: str, env_config: Mapping[str, Any], default_address: Callable[[], str] | None,
                  defaults: Mapping[str, Any]) -> gym.Env | gym.vector.VectorEnv:
    """One env, or (``num_envs`` in env_config: RLlib's ``vector_entry_point`` mode) a
    :class:`~dmrpc_gym.client.vector.DmRpcVectorEnv` whose steps are all in flight at once."""
    from dmrpc_gym import DmRpcEnv, DmRpcVectorEnv

    kwargs = dict(env_config)
    num_envs = kwargs.pop("num_envs", None)
    if num_envs is None:
        addresses = [pick_address(env_config, kwargs)]
    else:
        addresses = pick_addresses(runner_context(env_config), kwargs, int(num_envs))
    _check_keys(name, kwargs, DmRpcEnv.__init__)
    if addresses[0] is None and kwargs.get("channel") is None:
        if default_address is None:
            raise ValueError(f"{name} needs env_config['address'] ('host:port') or "
                             "env_config['addresses'] (a list of them)")
        addresses = [default_address()] * len(addresses)
    for key, value in defaults.items():
        kwargs.setdefault(key, value)
    if num_envs is None:
        return FlatSpaces(DmRpcEnv(addresses[0], **kwargs))
    return FlatSpacesVector(DmRpcVectorEnv(len(addresses), addresses=addresses, **kwargs))


def remote_env(env_config: Mapping[str, Any]) -> gym.Env:
    """``dmrpc/Remote-v0``: any dm_env_rpc world; env_config holds ``DmRpcEnv``'s keywords.

    ``address`` (one server) or ``addresses`` (the sub-envs spread over them) is required.
    """
    return _single_agent("dmrpc/Remote-v0", env_config, None, {})


def _embedded(world: str) -> Callable[[], str]:
    def address() -> str:
        from dmrpc_gym.worlds.embedded import embedded_server
        return embedded_server(world).address
    return address


def catch_env(env_config: Mapping[str, Any]) -> gym.Env:
    """``dmrpc/Catch-v0``: the bundled Catch world (``world_settings``: rows, columns).

    Without ``addresses`` each env runner serves it in-process (the embedded
    server); with them, it joins servers started as
    ``dmrpc-gym serve dmrpc_gym.worlds:Catch``. Seeds reach the world.
    """
    return _single_agent("dmrpc/Catch-v0", env_config, _embedded("catch"), {"seed_setting": "seed"})


def tag_env(env_config: Mapping[str, Any]) -> Any:
    """``dmrpc/Tag-v0``: the bundled multi-agent Tag world as an RLlib ``MultiAgentEnv``.

    env_config holds ``DmRpcParallelEnv``'s keywords; ``world_settings`` are
    Tag's (size, pursuers, evaders, max_steps, homogeneous); ``agents`` defaults
    to the world's own names (``pursuer_0``.., ``evader_0``..). Without
    ``addresses`` each env runner serves Tag in-process; with them, it joins
    servers started as ``dmrpc-gym serve dmrpc_gym.worlds:Tag``.
    """
    from dmrpc_gym import DmRpcParallelEnv
    from dmrpc_gym.integrations.rllib.multiagent import DmRpcMultiAgentEnv
    from dmrpc_gym.worlds.tag import agents_of

    kwargs = dict(env_config)
    address = pick_address(env_config, kwargs) or _embedded("tag")()
    _check_keys("dmrpc/Tag-v0", kwargs, DmRpcParallelEnv.__init__)
    settings = dict(kwargs.pop("world_settings", None) or {})
    if "agents" not in kwargs:
        try:
            kwargs["agents"] = agents_of(settings)
        except ValueError as err:
            raise ValueError(f"dmrpc/Tag-v0: {err}") from None
    return DmRpcMultiAgentEnv(DmRpcParallelEnv(address, world_settings=settings, **kwargs))


def godot_env(env_config: Mapping[str, Any]) -> gym.Env:
    """``dmrpc/Godot-v0``: a Godot game (``dmrpc_gym.integrations.godot.GodotEnv``) run by each env runner.

    env_config holds ``GodotEnv``'s keywords. A Godot game served over
    dm_env_rpc is a world like any other: use ``dmrpc/Remote-v0`` with ``addresses``.
    """
    kwargs = dict(env_config)
    if "addresses" in kwargs:
        raise ValueError("dmrpc/Godot-v0 runs the game inside each env runner; to spread runners over "
                         "served Godot games use dmrpc/Remote-v0 with env_config['addresses']")
    from dmrpc_gym.integrations.godot import GodotEnv     # imported by the runners that use it
    return FlatSpaces(GodotEnv(**kwargs))


#: RLlib env name -> its creator (an ``env_config -> env`` function).
ENV_CREATORS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "dmrpc/Remote-v0": remote_env,
    "dmrpc/Catch-v0": catch_env,
    "dmrpc/Tag-v0": tag_env,
    "dmrpc/Godot-v0": godot_env,
}


def register() -> list[str]:
    """Register every name of :data:`ENV_CREATORS` with ``ray.tune.registry.register_env``; returns the names.

    Call it in the driver before building the algorithm (needs ``ray[rllib]``);
    the env runners find the names through Ray's registry.
    """
    try:
        from ray.tune.registry import register_env
    except ImportError as err:
        raise ImportError(f"dmrpc_gym.integrations.rllib.register() needs Ray RLlib: "
                          f"{install_hint('rllib')} ({err})") from err
    for name, creator in ENV_CREATORS.items():
        register_env(name, creator)
    return list(ENV_CREATORS)
