"""Where ``reset(seed=...)`` goes: the reset setting that carries a seed to the world.

dm_env_rpc has no seed of its own; a world takes one, if at all, as a reset
setting whose name it chooses. A dmrpc_gym server names itself in its response
headers and takes ``seed`` in every world, so by default (``seed_setting="auto"``)
the seed travels there as ``seed``. Any other server is not guessed at: the seed
then seeds only the client's RNG, and the first seeded reset says so once, with
the way to send it (``seed_setting=``).
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping

__all__ = ["AUTO", "SEED", "SeedRoute"]

#: ``seed_setting``'s default: ``SEED`` on a dmrpc_gym server, nothing elsewhere (said once).
AUTO = "auto"
#: The reset setting a dmrpc_gym server's worlds take the seed from.
SEED = "seed"


class SeedRoute:
    """The ResetRequest settings of one env: its ``reset_settings``, the reset options' settings
    and the seed under its setting.

    Args:
        choice: ``seed_setting`` as given: ``AUTO``, a setting name, or ``None`` (never sent).
        ours: whether the server named itself as a dmrpc_gym server.
        where: the server, as named in the warning.

    >>> SeedRoute(AUTO, ours=True, where="localhost:1").settings({"level": 2}, {}, 7)
    {'level': 2, 'seed': 7}
    >>> SeedRoute("rng", ours=False, where="localhost:1").settings({}, {"settings": {"x": 1}}, 7)
    {'x': 1, 'rng': 7}
    """

    def __init__(self, choice: str | None, *, ours: bool, where: str):
        if choice is not None and not (isinstance(choice, str) and choice):
            raise TypeError(f"seed_setting must be a reset setting's name, {AUTO!r} or None, not {choice!r}")
        self.name = (SEED if ours else None) if choice == AUTO else choice
        self._unsent = choice == AUTO and self.name is None
        self.where = where

    def settings(self, base: Mapping[str, Any], options: Mapping[str, Any], seed: int | None) -> dict[str, Any]:
        """``base``, then ``options["settings"]``, then ``seed`` under the setting's name."""
        settings = {**base, **(options.get("settings") or {})}
        if seed is None:
            return settings
        if self.name is not None:
            settings[self.name] = int(seed)
        elif self._unsent:
            self._unsent = False
            warnings.warn(
                f"reset(seed=...) seeds only this client's RNG: the server at {self.where} is not a "
                "dmrpc_gym server, so which reset setting (if any) takes a seed is unknown and none "
                "is sent. Pass seed_setting='NAME' to send the seed as the reset setting NAME "
                "(seed_setting=None: never send it, without this warning)", stacklevel=4)
        return settings
