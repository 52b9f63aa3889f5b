"""Who plays a multi-agent world: each agent's join settings, and the agents a world names itself.

A PettingZoo env needs its agents' names before it joins. They come from the
caller (``agents=``: a count, names, or names with join settings) or, from a
dmrpc_gym server, from the world itself (its ``agents`` property).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Sequence, Union

import numpy as np

from dmrpc_gym.client.connection import Connection
from dmrpc_gym.client.properties import Properties
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.protocol.wire import pb

__all__ = ["AgentsArg", "join_settings", "world_agents", "per_agent"]

AgentsArg = Union[int, Sequence[str], Mapping[str, Any], None]


def join_settings(agents: AgentsArg) -> dict[str, dict[str, Any]]:
    """Agent name -> the JoinWorld settings it sends, from ``agents=``.

    - ``n`` (int): agents ``agent_0`` .. ``agent_{n-1}``, each sending ``{"agent": name}``;
    - a list of names: each sends ``{"agent": name}``;
    - a dict: name -> a dict of join settings (sent as given), ``None``
      (``{"agent": name}``) or a str/int (``{"agent": value}``, the server's name
      for the agent, e.g. ``{"red": "pursuer_0"}``).

    >>> join_settings(2)
    {'agent_0': {'agent': 'agent_0'}, 'agent_1': {'agent': 'agent_1'}}
    >>> join_settings({"red": {"team": 0}, "blue": "b"})
    {'red': {'team': 0}, 'blue': {'agent': 'b'}}
    """
    if isinstance(agents, bool) or agents is None:
        raise TypeError(f"agents={agents!r}; expected a count, a list of names or a dict name -> join settings")
    if isinstance(agents, (int, np.integer)):
        if agents < 1:
            raise ValueError(f"agents={agents}; expected at least one agent")
        agents = [f"agent_{i}" for i in range(int(agents))]
    if isinstance(agents, Mapping):
        out = {}
        for name, value in agents.items():
            if value is None:
                out[name] = {"agent": name}
            elif isinstance(value, Mapping):
                out[name] = dict(value)
            elif isinstance(value, (str, int, np.integer)) and not isinstance(value, bool):
                out[name] = {"agent": value}
            else:
                raise TypeError(f"agents[{name!r}]={value!r}; expected join settings (a dict), a name or None")
    elif isinstance(agents, str):
        raise TypeError(f"agents={agents!r}; give a list of names, not one string")
    else:
        out = {name: {"agent": name} for name in agents}
        if len(out) != len(list(agents)):
            raise ValueError(f"agents={list(agents)} has duplicate names")
    if not out:
        raise ValueError("agents is empty; expected at least one agent")
    bad = [name for name in out if not isinstance(name, str)]
    if bad:
        raise TypeError(f"agent names must be strings, not {bad}")
    return out


def world_agents(connection: Connection, world_name: str, where: str) -> list[str]:
    """The agents of world ``world_name`` not joined by anyone else: join it as any agent,
    read its ``agents`` / ``missing_agents`` properties (servers built with
    :mod:`dmrpc_gym.server` offer them), and leave.

    ``ValueError`` naming the world when it does not say (another server, a single-agent world).
    """
    connection.send(pb.JoinWorldRequest(world_name=world_name))
    try:
        if connection.server_software is None:
            raise ValueError("it is not a dmrpc_gym server")
        props = Properties(connection)
        free = {str(a) for a in props["missing_agents"].reshape(-1).tolist()} | {str(props["agent"].item())}
        return [str(a) for a in props["agents"].reshape(-1).tolist() if str(a) in free]
    except (DmRpcError, KeyError, ValueError, TypeError) as exc:
        raise ValueError(f"world {world_name!r} at {where} does not say which agents it has ({exc}); "
                         "pass agents= naming them (a list, or a dict name -> join settings)") from None
    finally:
        connection.send(pb.LeaveWorldRequest())


def per_agent(value: Any, agent: str) -> Any:
    """A per-agent option: a Mapping keyed by agent name, or one value for all."""
    if isinstance(value, Mapping):
        return value.get(agent)
    return value
