"""Walkers with 250 us of CPU per physics frame (``--frame_cost_usec=250``), standing for a larger game's
physics: what ``benchmarks/bench_godot_rl.py`` serves as ``godot_rl_heavy:WORLDS``."""
from __future__ import annotations

from dmrpc_gym.integrations.godot_rl import WALKERS_PROJECT, GodotRLWorlds

#: The microseconds of CPU each physics frame costs.
FRAME_COST_USEC = 250
EXTRA_ARGS = [f"--frame_cost_usec={FRAME_COST_USEC}"]
WORLDS = GodotRLWorlds(WALKERS_PROJECT, extra_args=EXTRA_ARGS)
