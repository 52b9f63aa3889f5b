"""A world whose step costs ~1 ms of CPU, where a real simulator's frame sits (``bench_rllib.py --world heavy``).

Served with ``dmrpc-gym serve benchmarks/heavy_catch.py:HeavyCatch`` and run locally in the RLlib
runners alike, so the two cases differ only in the dm_env_rpc round trip.

>>> env = HeavyCatch()
>>> obs, info = env.reset(seed=0)
>>> obs.shape
(10, 10)
"""
from __future__ import annotations

import time

from dmrpc_gym.worlds.catch import Catch

STEP_COST = 0.001      # seconds of computing per step


class HeavyCatch(Catch):
    """The bundled Catch, whose step first computes for :data:`STEP_COST` seconds."""

    def step(self, action):
        end = time.perf_counter() + STEP_COST
        while time.perf_counter() < end:
            pass
        return super().step(action)
