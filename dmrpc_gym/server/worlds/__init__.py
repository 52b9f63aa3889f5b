"""The worlds a server holds and their agents: the registry by name, gymnasium, PettingZoo
(parallel and AEC) and dm_env worlds, what an agent sees (specs, settings, properties, frames)."""
