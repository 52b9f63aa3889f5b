"""Bridges to other RL libraries and engines: Stable-Baselines3, Ray RLlib, Godot."""
