"""Integrations of dmrpc_gym with other software: :mod:`~dmrpc_gym.integrations.godot` (GymGodot games)."""
