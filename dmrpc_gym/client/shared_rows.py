"""A vector env's one shared-memory region: each large observation of every sub-env as a row of one
``[N, *shape]`` array, so that a batch is the region itself (``copy=False``) or one copy of it.

Each sub-env's connection first lays out a region of its own (:mod:`~dmrpc_gym.transport.shared_memory`);
where all N did, with the same large tensors, :class:`SharedRows` makes one region for them all and
moves every connection onto it (each gives it to its own server stream: the servers write sub-env ``i``'s
observations into row ``i``). Actions keep a span per sub-env. Where anything differs (a sub-env
without shared memory, another layout), nothing is shared and the batch is stacked as before.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dmrpc_gym.protocol.dtypes import BY_DATA_TYPE
from dmrpc_gym.transport import MAX_SHARED, TARGET_ALIGN, Region, RegionError, aligned

__all__ = ["SharedRows", "rows_of"]

def _data(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


class SharedRows:
    """One region for the large tensors of ``envs`` (:class:`~dmrpc_gym.client.env.DmRpcEnv` s), when they all
    use shared memory with the same layout; :attr:`rows` maps the address of each observation's row 0 to
    its ``[N, nbytes]`` view (empty when nothing is shared, :attr:`why` then says why). :meth:`close` releases
    the region.

    >>> from dmrpc_gym.server import Server
    >>> from dmrpc_gym.client.env import DmRpcEnv
    >>> import gymnasium as gym
    >>> class Frames(gym.Env):
    ...     observation_space, action_space = gym.spaces.Box(0, 255, (1 << 16,), np.uint8), gym.spaces.Discrete(2)
    ...     def reset(self, seed=None, options=None): return np.zeros(1 << 16, np.uint8), {}
    ...     def step(self, a): return np.full(1 << 16, 9, np.uint8), 0.0, False, False, {}
    >>> with Server(Frames) as server:
    ...     envs = [DmRpcEnv(server.address) for _ in range(2)]
    ...     shared = SharedRows(envs)
    ...     _ = [env.reset() for env in envs]
    ...     obs = [env.step(0)[0] for env in envs]
    ...     print(len(shared.rows), rows_of(obs, shared.rows).shape, np.shares_memory(obs[0], obs[1]))
    ...     for env in envs: env.close()
    ...     shared.close()
    1 (2, 65536) False
    """

    def __init__(self, envs: Sequence[Any]):
        self.region: Region | None = None
        self.rows: dict[int, np.ndarray] = {}
        #: Why nothing is shared ("" where something is).
        self.why = ""
        links = [env.connection.regions for env in envs]
        off = [(i, link.state) for i, link in enumerate(links) if link.state != "on" or link.reads is None]
        if not links or off:
            self.why = f"sub-env {off[0][0]}'s shared memory is {off[0][1]!r}" if off else "no sub-envs"
            return
        observations = {uid: (n, dt) for uid, (_, n, dt) in links[0].reads.items()}
        actions = {uid: n for uid, (_, n) in links[0].writes.items()}
        if any({u: (n, dt) for u, (_, n, dt) in link.reads.items()} != observations
               or {u: n for u, (_, n) in link.writes.items()} != actions for link in links):
            self.why = "the sub-envs' large tensors differ"
            return
        odd = [uid for uid, (n, _) in observations.items() if n % TARGET_ALIGN]
        if odd:          # rows back to back would put row 1 where no target may be
            self.why = (f"observation {odd[0]}'s {observations[odd[0]][0]} bytes are not a multiple of {TARGET_ALIGN}, "
                        "so its rows cannot lie back to back")
            return
        count, size, bases = len(links), 0, {}
        for uid, (n, _) in observations.items():
            bases["o", uid], size = size, size + aligned(n * count)
        for uid, n in actions.items():
            bases["a", uid], size = size, size + aligned(n) * count
        if not observations or size > MAX_SHARED:
            self.why = "no large observation" if not observations else f"{size} bytes would pass {MAX_SHARED}"
            return
        try:
            region = Region.create(size, "dmrpc_gym-client")
        except (OSError, RegionError) as err:
            self.why = f"no region: {err}"
            return
        self.region = region
        for i, env in enumerate(envs):
            at = {("o", uid): bases["o", uid] + i * n for uid, (n, _) in observations.items()}
            at.update({("a", uid): bases["a", uid] + i * aligned(n) for uid, n in actions.items()})
            env.share_region(region, at)
        for uid, (n, dt) in observations.items():
            wire = BY_DATA_TYPE[dt].wire
            view = region.array(bases["o", uid], wire, (count, n // wire.itemsize), copy=False)
            self.rows[_data(view)] = view

    def close(self) -> None:
        """Release the region (views still held keep its memory until they go)."""
        self.rows = {}
        if self.region is not None:
            self.region.close()
            self.region = None


def rows_of(items: Sequence[Any], rows: dict[int, np.ndarray]) -> np.ndarray | None:
    """``items`` (one array per sub-env) as the ``[N, *shape]`` view of the region they are the rows of, in
    order; None where they are not (then they are stacked)."""
    first = items[0]
    if type(first) is not np.ndarray:
        return None
    full = rows.get(_data(first))
    if full is None or len(items) != len(full) or first.nbytes != full.shape[1] * full.itemsize:
        return None
    start, step = _data(first), first.nbytes
    for i, item in enumerate(items):
        if type(item) is not np.ndarray or item.dtype != full.dtype or item.shape != first.shape \
                or _data(item) != start + i * step or not item.flags.c_contiguous:
            return None
    return full.reshape(len(items), *first.shape)
