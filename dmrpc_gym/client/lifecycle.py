"""How the remote envs end and travel: closing when collected, pickling as their arguments."""
from __future__ import annotations

from typing import Any

__all__ = ["RemoteResource"]


class RemoteResource:
    """Mixin for envs that hold connections: ``DmRpcEnv``, ``DmRpcParallelEnv``, vector envs.

    Subclasses keep their constructor arguments in ``self._kwargs`` and define
    ``close()``. Pickling sends the arguments, and unpickling calls the
    constructor again: a fresh connection (and a world of its own), which is
    what SubprocVecEnv, SuperSuit and Ray need to ship an env elsewhere.
    A garbage-collected env closes itself.

    Why not gymnasium's ``EzPickle``, which also pickles constructor arguments:
    its ``__setstate__`` builds a second object and copies that one's
    ``__dict__`` into the unpickled one; the second object is then collected,
    and closing itself when collected (which these envs must do, or worlds
    leak on the server) would close the connection both now share. We would
    also have to override ``__getstate__`` to refuse ``channel=`` (a channel
    cannot travel). Overriding both leaves nothing of ``EzPickle`` to use.

    >>> class Thing(RemoteResource):
    ...     def __init__(self, address):
    ...         self._kwargs = {"address": address}
    ...     def close(self):
    ...         pass
    >>> state = Thing("h:1").__getstate__()
    >>> state
    {'kwargs': {'address': 'h:1'}}
    >>> copy = Thing.__new__(Thing)
    >>> copy.__setstate__(state)      # what unpickling does: the constructor again
    >>> copy._kwargs
    {'address': 'h:1'}
    """

    _kwargs: dict[str, Any]

    def close(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __getstate__(self) -> dict:
        if self._kwargs.get("channel") is not None:
            raise TypeError(f"a {type(self).__name__} made with channel= cannot be pickled "
                            "(a channel does not travel); pass address= instead")
        return {"kwargs": self._kwargs}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state["kwargs"])
