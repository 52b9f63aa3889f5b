"""The table of a turn-based game, between a dmrpc_gym server and a dmrpc_gym client.

A PettingZoo AEC env shows more than one agent's view: after any step, the
user reads ``agent_selection``, ``agents`` and every agent's ``rewards``,
``_cumulative_rewards``, ``terminations``, ``truncations`` and ``infos``.
dm_env_rpc carries one agent's view per connection, so a dmrpc_gym client of a
turn-based world (:mod:`dmrpc_gym.server.worlds.aec_world`) also asks for one extra
observation, :data:`TURN_UID`, that no spec lists (as ``info`` travels,
:mod:`dmrpc_gym.protocol.info`): the table of the game at the answered turn, as
one string in the info format. A foreign client never asks for it.

Keys of a table: ``turn`` (``env.step`` calls in the episode so far: each answer
has its own), ``agent_selection``, ``agents``, ``rewards``, ``cumulative``,
``terminations``, ``truncations``, ``infos``, ``observations`` (every agent in
``agents``) and, for an answer that ends the agent's sequence, ``after``: the
table once the world has taken that agent's dead step (without observations).

>>> from dmrpc_gym.protocol.info import pack_info, unpack_info
>>> table = {"turn": 0, "agent_selection": "a", "rewards": {"a": 0, "b": 0.5}}
>>> unpack_info(pack_info(table)) == table
True
"""
from __future__ import annotations

from dmrpc_gym.protocol.info import INFO_UID

__all__ = ["TURN_UID", "TABLE_KEYS"]

#: The observation UID a turn's table travels under (beside ``info``'s; no spec lists it).
TURN_UID = INFO_UID - 1
#: What a table holds of the env, by table key -> the AEC env's attribute.
TABLE_KEYS = {"rewards": "rewards", "cumulative": "_cumulative_rewards", "terminations": "terminations",
              "truncations": "truncations", "infos": "infos"}
