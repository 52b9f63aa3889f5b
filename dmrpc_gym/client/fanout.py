"""The fan-out engine: N joined agents stepped together, every request sent before any answer is read.

:class:`Batch` owns N :class:`~dmrpc_gym.client.env.DmRpcEnv` sub-envs (one
connection, one world and one agent each). A batched step checks every action
first, then sends every sub-env's request before it reads any answer, so N
sub-envs cost about one round trip of latency and the server works on all of
them at once. Both vector envs (gymnasium's and SB3's) stand on it.
"""
from __future__ import annotations

import contextlib
import enum
import threading
from collections import deque
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from dmrpc_gym.client.env import DmRpcEnv
from dmrpc_gym.client.exchanges import first_ready, receive_all, submit_all
from dmrpc_gym.client.steady_batch import SteadyBatch
from dmrpc_gym.protocol.errors import DmRpcError
from dmrpc_gym.transport import SharedConnections

__all__ = ["Batch", "Restart", "RESTART", "StepResult"]

#: One sub-env's ``(observation, reward, terminated, truncated, info)``.
StepResult = tuple[Any, float, bool, bool, dict]


class Owed(enum.Enum):
    """What a sub-env's submitted request was, so that its answer is read as what it is."""

    RESET = "reset"
    STEP = "step"


_RESET, _STEP = Owed.RESET, Owed.STEP    # (each sub-env's step reads them: globals, not enum lookups)


def _with_index(err: Exception, index: int) -> Exception:
    """The same kind of error, saying which sub-env it came from."""
    if isinstance(err, DmRpcError):
        request = f"{err.request} of sub-env {index}" if err.request else f"sub-env {index}"
        return DmRpcError(err.code, err.message, err.details, request=request)
    if isinstance(err, (ConnectionError, TimeoutError)):
        return type(err)(f"sub-env {index}: {err}")
    return err


class Batch:
    """N ``DmRpcEnv`` sub-envs stepped together: the machinery both vector envs share.

    Args:
        num_envs: how many sub-envs (default: one per address).
        address: the server every sub-env connects to (or a list of servers to fail over along, which
            every sub-env is given whole: see :class:`~dmrpc_gym.client.env.DmRpcEnv`), or
        addresses: a list of servers, used in turn (sub-env ``i`` uses ``addresses[i % len]``; an entry
            may itself be a list to fail over along).
        max_episode_steps: truncate an episode on the client after this many steps.
        share_connections: sub-envs of one server share one HTTP/2 connection, a stream each
            (:mod:`~dmrpc_gym.transport.client.pool`): a step's requests leave together, in a few
            ``send`` calls. False: a connection per sub-env. (A grpcio ``channel=`` shares its own
            connection either way.)
        **env_kwargs: :class:`~dmrpc_gym.client.env.DmRpcEnv` arguments, the same for every sub-env.

    Requests are pipelined: :meth:`submit` sends every sub-env's request, and
    :meth:`receive` reads every answer. Answers left unread by an error or an
    interrupt are read (and dropped) before the next submit, so every
    connection stays in step.

    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> batch = Batch(2, embedded_server("catch").address)
    >>> [obs.shape for obs, info in batch.reset([0, 1], seeds=[None, None])]
    [(10, 10), (10, 10)]
    >>> batch.close()
    """

    def __init__(self, num_envs: int | None = None, address: str | Sequence[str] | None = None, *,
                 addresses: Sequence[str] | None = None, max_episode_steps: int | None = None,
                 share_connections: bool = True, **env_kwargs: Any):
        if address is not None and addresses is not None:
            raise ValueError("give address= or addresses=, not both")
        if addresses is not None:
            targets = [a if isinstance(a, (list, tuple)) else str(a) for a in addresses]   # a list: to fail over along
            if not targets:
                raise ValueError("addresses= is empty; expected at least one 'host:port'")
        else:
            targets = [address]
        if num_envs is None:
            num_envs = len(targets)
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, not {num_envs!r}")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be None or a positive int, not {max_episode_steps!r}")
        self.num_envs = int(num_envs)
        self.max_episode_steps = max_episode_steps
        self.env_kwargs = dict(env_kwargs)
        if share_connections and env_kwargs.get("channel") is None and env_kwargs.get("credentials") is None:
            self.env_kwargs.setdefault("connections", SharedConnections())
        self.envs: list[DmRpcEnv] = []
        self.closed = False
        # Per sub-env: the kinds of the submitted requests whose answers are not read yet, in order.
        self._owed: list[deque[Owed]] = [deque() for _ in range(self.num_envs)]
        # Sub-envs whose step was submitted and not yet received, in order (index -> restarted?).
        self._flying: dict[int, bool] = {}
        self._elapsed = [0] * self.num_envs
        self._unsettled = False     # answers may be left unread: read them before the next exchange
        try:
            for i in range(self.num_envs):
                self.envs.append(DmRpcEnv(targets[i % len(targets)], **self.env_kwargs))
        except BaseException:
            self.close()
            raise
        # Each sub-env's agent (a DmRpcEnv keeps its one agent, restored in place after a reconnect): read
        # here, not through the property, by each step (two calls a sub-env fewer).
        self._agents = [env.agent for env in self.envs]
        # A step of sub-envs whose answers' layouts are learned: one send and one read loop per connection.
        self._steady = SteadyBatch(self._agents)
        first = self.envs[0]
        self.observation_space = first.observation_space
        self.action_space = first.action_space
        for i in range(1, self.num_envs):
            try:
                self._check_spaces(i)
            except RuntimeError:
                self.close()
                raise

    def _check_spaces(self, i: int) -> None:
        """``RuntimeError`` unless sub-env ``i`` has the spaces of the batch (sub-env 0's when it was made)."""
        env, first = self.envs[i], self.envs[0]
        for kind, ours, theirs in (("observation", env.observation_space, self.observation_space),
                                   ("action", env.action_space, self.action_space)):
            if ours != theirs:
                raise RuntimeError(f"sub-env {i} ({env.connection.address}) has {kind} space {ours}; "
                                   f"sub-env 0 ({first.connection.address}) has {theirs}")

    @property
    def reconnect(self) -> bool:
        """Whether the sub-envs were made with ``reconnect=True``."""
        return bool(self.env_kwargs.get("reconnect"))

    def restore(self, i: int, why: str | None = None) -> None:
        """Connect sub-env ``i`` again after its connection was lost (``DmRpcEnv.restore``);
        its spaces must still be the batch's."""
        try:
            self.envs[i].restore(why)
        except Exception as err:
            raise _with_index(err, i) from None
        self._owed[i].clear()
        self._elapsed[i] = 0
        self._check_spaces(i)

    def _raise_failures(self, failures: dict[int, BaseException], lost: dict[int, BaseException] | None) -> None:
        """Raise the first failure (naming its sub-env); with ``lost``, a lost connection is put
        there instead (its sub-env owes nothing more) and the others go on."""
        if lost is not None:
            for i, err in list(failures.items()):
                if isinstance(err, ConnectionError):
                    lost[i] = _with_index(err, i)
                    self._owed[i].clear()
                    del failures[i]
        if failures:
            i, err = next(iter(failures.items()))
            raise _with_index(err, i)

    # -- pipelined exchanges -------------------------------------------------------
    def submit(self, jobs: Mapping[int, Any], lost: dict[int, BaseException] | None = None) -> dict[int, bool]:
        """Send one step per sub-env in ``jobs`` (index -> action, or a :class:`Restart`).

        Every action is checked before anything is sent (a ``ValueError`` names
        the sub-env). A ``Restart`` starts a new sequence: a ResetRequest when the
        sub-env is running or has reset settings, then a step with no actions.
        Returns the plan :meth:`receive` needs (index -> restarted?). With ``lost``
        (a dict), a sub-env whose connection is lost goes there instead of raising.
        """
        self._check_open()
        busy = [i for i in jobs if i in self._flying]
        if busy:
            raise RuntimeError(f"sub-envs {busy} already have a step in flight: receive their answers first")
        if self._unsettled:
            self._settle()
        self._unsettled = True
        requests, framed, envs, agents, steady = {}, {}, self.envs, self._agents, self._steady
        for i, action in jobs.items():
            try:
                if type(action) is not Restart:
                    found = steady.frame(i, action)
                elif not agents[i].needs_reset(self._reset_settings(i, action)):
                    found = steady.frame(i, None)    # a new sequence with no ResetRequest: the step with no actions
                else:
                    found = None
                if found is None:
                    requests[i] = self._request(i, action)
                else:
                    framed[i] = found
            except ValueError as err:
                raise ValueError(f"sub-env {i}: {err}") from None
        sent: list[int] = []
        failed: dict[int, BaseException] = {}
        if framed:
            sent = steady.send(framed, failed)
            for i in sent:
                self._owed[i].append(_STEP)
            if len(sent) < len(framed):          # a connection that sent nothing: its requests the general way
                done = {*sent, *failed}
                for i in framed:
                    if i not in done:
                        requests[i] = self._request(i, jobs[i])

        def send(i: int) -> bool:
            env, owed, job = envs[i], self._owed[i], jobs[i]
            if isinstance(job, Restart) and agents[i].submit_reset(self._reset_settings(i, job)):
                owed.append(_RESET)
            env.connection.submit(*requests[i])
            owed.append(_STEP)
            return True

        shared = self.env_kwargs.get("connections")
        if not requests:                         # (all sent the steady way)
            owed, failures = [], {}
        else:
            with shared.corked() if shared is not None else contextlib.nullcontext():
                owed, failures = submit_all(requests, send)
        failures.update(failed)
        if failures:                           # raised: what was sent is settled before the next exchange
            self._raise_failures(failures, lost)
        plan = {i: isinstance(jobs[i], Restart) for i in (*sent, *owed)}
        self._flying.update(plan)
        return plan

    def _request(self, i: int, job: Any) -> tuple:
        """Sub-env ``i``'s request for ``job`` (an action, or a :class:`Restart`: the step with no actions), the
        general way (:meth:`~dmrpc_gym.client.agent.RemoteAgent.step_request`)."""
        return self._agents[i].step_request(None if type(job) is Restart else job)

    def _reset_settings(self, i: int, job: Restart) -> Mapping[str, Any] | None:
        """The settings of sub-env ``i``'s ResetRequest for ``job``: its own, or the sub-env's ``reset_settings``."""
        return self.envs[i].reset_settings if job.settings is None else job.settings

    def receive(self, plan: Mapping[int, bool], lost: dict[int, BaseException] | None = None) -> dict[int, StepResult]:
        """Read the answers to :meth:`submit`'s requests: index -> 5-tuple.

        A restarted sub-env answers with its first observation, reward 0.0 and
        both flags False. Every answer is read even when one fails; then the
        first error is raised (naming its sub-env). With ``lost`` (a dict), a
        sub-env whose connection is lost goes there instead of raising.
        """
        failures: dict[int, BaseException] = {}
        try:
            if self._steady.flying:
                self._steady.take(plan)
            results = receive_all(plan, self._read, failures)
        finally:          # received, failed or abandoned (interrupt): no longer in flight
            for i in plan:
                self._flying.pop(i, None)
            self._unsettled = self._stray_answers()
        elapsed, limit = self._elapsed, self.max_episode_steps
        for i, result in results.items():
            if plan[i]:
                elapsed[i] = 0
                obs, _, _, _, info = result
                results[i] = (obs, 0.0, False, False, info)
            else:
                elapsed[i] += 1
                if limit is not None and elapsed[i] >= limit and not result[2]:
                    results[i] = result[:3] + (True,) + result[4:]
        if failures:
            self._raise_failures(failures, lost)
        return results

    def step(self, jobs: Mapping[int, Any], lost: dict[int, BaseException] | None = None) -> dict[int, StepResult]:
        """:meth:`submit` then :meth:`receive`."""
        return self.receive(self.submit(jobs, lost), lost)

    def reset(self, indices: Iterable[int], seeds: Sequence[int | None],
              options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None
              ) -> list[tuple[Any, dict]]:
        """Reset the sub-envs ``indices`` (``seeds[i]`` each), pipelined: ``[(obs, info)]``.

        Same semantics as ``DmRpcEnv.reset``: ``options["settings"]`` adds reset
        settings, ``options["world_settings"]`` first resets the world, and the
        seed travels as the ``seed_setting`` reset setting when one is named.
        ``options`` is one mapping for all, or a sequence of one per sub-env.
        With ``reconnect=True`` a sub-env whose connection was lost connects again first.
        """
        self._check_open()
        indices = list(indices)
        if self.reconnect:
            for i in indices:
                if self.envs[i].connection.failure is not None:
                    self.restore(i)
        if self._unsettled:
            self._settle()

        def restart_all() -> dict[int, StepResult]:
            jobs = {}
            for i in indices:
                opts = (options[i] if isinstance(options, (list, tuple)) else options) or {}
                try:
                    jobs[i] = Restart(self.envs[i].prepare_reset(seeds[i], opts))
                except Exception as err:
                    raise _with_index(err, i) from None
            return self.step(jobs)

        try:
            results = restart_all()
        except ConnectionError:
            lost = [i for i in indices if self.envs[i].connection.failure is not None]
            if not self.reconnect or not lost:
                raise
            for i in lost:                     # lost between episodes, found by this reset
                self.restore(i)
            results = restart_all()
        return [(results[i][0], results[i][4]) for i in indices]

    def _read(self, i: int) -> StepResult:
        """Read sub-env ``i``'s owed answers; the last is its step."""
        agent, owed = self._agents[i], self._owed[i]
        if i in self._steady.taken:              # taken by the steady read (its only request owed)
            owed.popleft()
            return self._steady.answer(i)
        while owed:
            kind = owed.popleft()
            if kind is _RESET:
                agent.receive_reset()
            elif not owed:
                return agent.receive_step()
            else:
                agent.receive_step()
        raise RuntimeError(f"sub-env {i} has no step in flight")

    def _settle(self) -> None:
        """Read and drop answers a failed or interrupted exchange left behind."""
        self._steady.forget()                    # (the answers it took lie on their streams: read the general way)
        try:
            for i, owed in enumerate(self._owed):
                if i in self._flying:          # a step sent on purpose (async batches): its answer is owed
                    continue
                agent = self.envs[i].agent
                while owed:
                    kind = owed.popleft()
                    try:
                        if kind is Owed.RESET:
                            agent.receive_reset()
                        else:
                            agent.receive_step()
                    except DmRpcError:
                        pass
                    except Exception as err:
                        owed.clear()
                        raise _with_index(err, i) from None
        finally:
            self._unsettled = self._stray_answers()

    def _stray_answers(self) -> bool:
        """Whether answers are owed that no exchange will read (left by a failed or interrupted
        one): the sub-envs in flight are owed theirs on purpose."""
        flying = self._flying
        for i, owed in enumerate(self._owed):   # (a loop, not any(): a vector step's calls are counted)
            if owed and i not in flying:
                return True
        return False

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this vector env is closed")

    @property
    def in_flight(self) -> dict[int, bool]:
        """The sub-envs with a step submitted and not yet received, in order (index -> restarted?)."""
        return dict(self._flying)

    def first_ready(self, indices: Sequence[int], n: int) -> list[int]:
        """The first ``n`` of ``indices`` (sub-envs in flight) whose answers have come, in the order
        they came, waiting until that many have (:func:`~dmrpc_gym.client.exchanges.first_ready`)."""
        timeout = self.envs[indices[0]].connection.timeout if indices else None
        return first_ready({i: self.envs[i].connection for i in indices}, n, timeout)

    # -- the rest ------------------------------------------------------------------
    def render(self) -> tuple:
        """Every sub-env's latest frame (``None`` without ``render_mode``)."""
        return tuple(env.render() for env in self.envs)

    def close(self) -> None:
        """Close every sub-env at once (each bounded in time). Idempotent; never hangs."""
        if self.closed:
            return
        self.closed = True
        envs = list(self.envs)
        # A hung server costs each sub-env a bounded wait; closing in parallel keeps it one
        # wait. At interpreter exit no thread can start (Thread.start would block): close in turn.
        if len(envs) <= 1 or not threading.main_thread().is_alive():
            for env in envs:
                env.close()
            return
        threads = [threading.Thread(target=env.close, name="dmrpc-close", daemon=True) for env in envs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10.0)


class Restart:
    """A :meth:`Batch.submit` job: start the sub-env's next sequence.

    ``settings`` are the ResetRequest settings (``None``: the sub-env's ``reset_settings``).

    >>> Restart({"seed": 3}).settings
    {'seed': 3}
    """

    __slots__ = ("settings",)

    def __init__(self, settings: Mapping[str, Any] | None = None):
        self.settings = settings

    def __repr__(self) -> str:
        return f"Restart({self.settings!r})"


#: Restart with the sub-env's own ``reset_settings`` (what autoreset does).
RESTART = Restart()
