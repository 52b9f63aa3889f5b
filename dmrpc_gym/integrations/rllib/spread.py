"""Which server an RLlib sub-env steps on: the spread rule over ``env_config["addresses"]``.

RLlib hands each env creator an ``EnvContext`` (a dict with ``worker_index``,
``vector_index`` and ``num_workers`` attributes). The rule is::

    runner = max(worker_index - 1, 0)         # remote env runners are numbered 1..num_workers
    index  = vector_index * max(num_workers, 1) + runner
    address = addresses[index % len(addresses)]

so the first sub-env of every runner is placed before any runner's second one.
With as many runners as servers (or a multiple), each runner steps all its
sub-envs on one server: 64 runners on 16 servers put 4 runners on each, and a
slow server slows only its own runners. With more servers than runners, a
runner's sub-envs go to different servers. List a server twice to give it
twice the share. The local env runner (``worker_index`` 0, which steps envs
only when there are no remote runners) counts as runner 1.

RLlib's new API stack builds a runner's sub-envs one after the other from one
shared context whose ``vector_index`` is always 0, so the sub-env's position is
counted on that context object (:func:`next_vector_index`): the first call with
a context is sub-env 0, the next sub-env 1, and so on. (With RLlib's ASYNC
vectorize mode every sub-env is built in its own process from a copy of the
context, so a runner's sub-envs all go to one server.) A plain ``dict`` config
(the creator called by hand) is sub-env 0 of runner 1.

>>> class Context(dict):                       # stands in for RLlib's EnvContext
...     def __init__(self, config, worker_index, num_workers):
...         super().__init__(config)
...         self.worker_index, self.vector_index, self.num_workers = worker_index, 0, num_workers
>>> servers = ["a:1", "b:1"]
>>> runner_1, runner_2 = Context({}, 1, 2), Context({}, 2, 2)
>>> [spread_address(servers, context) for context in (runner_1, runner_1, runner_2, runner_2)]
['a:1', 'a:1', 'b:1', 'b:1']
>>> spread_index(worker_index=2, vector_index=1, num_workers=4)
5
"""
from __future__ import annotations

import sys
from typing import Any, Mapping, Sequence

__all__ = ["spread_index", "spread_address", "next_vector_index", "pick_address", "pick_addresses",
           "runner_context"]

#: The attribute of an EnvContext that counts the sub-envs already built from it.
_COUNTER = "_dmrpc_sub_envs"


def spread_index(worker_index: int, vector_index: int, num_workers: int | None) -> int:
    """The position of a sub-env in the spread: ``vector_index * max(num_workers, 1) + runner``."""
    for name, value in (("worker_index", worker_index), ("vector_index", vector_index)):
        if int(value) < 0:
            raise ValueError(f"{name}={value}; expected a number >= 0")
    runners = max(int(num_workers or 0), 1)
    return int(vector_index) * runners + max(int(worker_index) - 1, 0)


def next_vector_index(env_config: Mapping[str, Any]) -> int:
    """This sub-env's index within its env runner, counted on the shared context object.

    The context's own ``vector_index`` (set by RLlib's old API stack, 0 on the new
    one) is added to the number of sub-envs already built from the same object.
    """
    base = int(getattr(env_config, "vector_index", 0) or 0)
    try:
        built = getattr(env_config, _COUNTER, 0)
        setattr(env_config, _COUNTER, built + 1)
    except AttributeError:                      # a plain dict: no context to count on
        built = 0
    return base + built


def spread_address(addresses: Sequence[str], env_config: Mapping[str, Any], vector_index: int | None = None) -> str:
    """The server of the next sub-env built from ``env_config`` (see the module doc for the rule),
    or of sub-env ``vector_index`` when given."""
    if isinstance(addresses, str) or not isinstance(addresses, Sequence) or not addresses:
        raise ValueError(f"env_config['addresses']={addresses!r}; expected a non-empty list of "
                         "'host:port' strings")
    bad = [a for a in addresses if not isinstance(a, str) or not a]
    if bad:
        raise ValueError(f"env_config['addresses'] holds {bad!r}; expected 'host:port' strings")
    if vector_index is None:
        vector_index = next_vector_index(env_config)
    index = spread_index(getattr(env_config, "worker_index", 0) or 0, vector_index,
                         getattr(env_config, "num_workers", 0))
    return addresses[index % len(addresses)]


def runner_context(env_config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The env runner's EnvContext: ``env_config`` itself, or the one RLlib's vector entry point dropped.

    RLlib (2.60) calls a creator in ``vector_entry_point`` mode with
    ``env_ctx | {"num_envs": n}``, a plain dict without ``worker_index``;
    the runner's context is then the ``env_ctx`` of that calling lambda, found
    in the caller's frame. Without one, ``env_config`` (runner 1) is used.
    """
    if hasattr(env_config, "worker_index"):
        return env_config
    frame = sys._getframe(1)
    for _ in range(4):
        frame = frame.f_back
        if frame is None:
            break
        found = frame.f_locals.get("env_ctx")
        if hasattr(found, "worker_index"):
            return found
    return env_config


def pick_addresses(context: Mapping[str, Any], kwargs: dict[str, Any], num_envs: int) -> list[str | None]:
    """As :func:`pick_address` for the ``num_envs`` sub-envs of one runner's vector env (``context``:
    the runner's EnvContext): sub-env ``j`` takes the rule's address for ``vector_index = j``."""
    if num_envs < 1:
        raise ValueError(f"num_envs={num_envs}; expected at least 1")
    addresses, address = _pop_addresses(kwargs)
    if addresses is None:
        return [address] * num_envs
    return [spread_address(addresses, context, j) for j in range(num_envs)]


def _pop_addresses(kwargs: dict[str, Any]) -> tuple[Any, str | None]:
    """Pop ``addresses`` and ``address`` from ``kwargs``; a clear error when both are there."""
    addresses = kwargs.pop("addresses", None)
    address = kwargs.pop("address", None)
    if addresses is not None and address is not None:
        raise ValueError("env_config has both 'address' and 'addresses'; give one "
                         "(a single server, or a list to spread the sub-envs over)")
    return addresses, address


def pick_address(env_config: Mapping[str, Any], kwargs: dict[str, Any]) -> str | None:
    """Pop ``addresses`` / ``address`` from ``kwargs``: the spread address, the one address, or None."""
    addresses, address = _pop_addresses(kwargs)
    if addresses is not None:
        return spread_address(addresses, env_config)
    return address
