"""dm_env worlds: gym worlds whose envs are ``dm_env.Environment`` s (through :class:`DmEnvGym`).

Everything but two things is a gym world's (:mod:`dmrpc_gym.server.worlds.gym_world`):

- the ``reward`` and ``discount`` observations carry the env's own
  ``reward_spec()`` / ``discount_spec()``;
- the discount sent is the env's: FIRST starts a sequence (RUNNING), MID is
  RUNNING, a LAST step with discount 0 is TERMINATED, and a LAST step with a
  non-zero discount (dm_env's truncation, a time limit) is **INTERRUPTED** with
  that discount. The official ``DmEnvAdaptor`` reads both as a LAST TimeStep
  with the ``discount`` observation, so the TimeSteps come back as the env gave
  them; gymnasium clients see ``terminated`` and ``truncated`` respectively.

>>> DmEnvWorld.kind, DmEnvWorld.agent_class.__name__
('dm_env', 'DmEnvAgent')
"""
from __future__ import annotations

from typing import Any, Mapping

from dmrpc_gym import spaces
from dmrpc_gym.protocol.fidelity import exact_step
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.server.serving import status
from dmrpc_gym.server.envs.dm_env_gym import space_of
from dmrpc_gym.server.worlds.gym_world import GymAgent, GymWorld
from dmrpc_gym.server.worlds.fidelity import say_losses
from dmrpc_gym.server.worlds.interface import DISCOUNT, REWARD, AgentInterface, sequence_state
from dmrpc_gym.server.worlds.rendering import rgb_shape

__all__ = ["DmEnvWorld", "DmEnvAgent"]


def _scalar_spec(spec: Any, name: str, who: str) -> pb.TensorSpec:
    if tuple(getattr(spec, "shape", ())) != ():
        raise status.failed_precondition(f"{who} cannot be served: its {name} spec has shape "
                                         f"{tuple(spec.shape)}; only scalar {name}s can")
    try:
        return spaces.specs_from_space(space_of(spec, f"{name}_spec()"), name)[name]
    except (TypeError, ValueError) as exc:
        raise status.failed_precondition(f"{who} cannot be served: {exc}") from None


class DmEnvAgent(GymAgent):
    """A gym agent that sends its dm_env's discount (see the module doc)."""

    def _outcome(self, terminated: bool, truncated: bool) -> tuple[int, float]:
        return sequence_state(terminated, truncated)[0], float(self.env.discount)

    def _exact(self, plan: Any, raw: Any, ends: tuple) -> dict | None:
        """The step's exact extras, with the type of the env's own discount (a Python float unless said)."""
        return exact_step(raw, *ends, self.interface.scalar_kinds.of(self._obs) if plan.env else None,
                          self.env.discount) if plan.exact else None


class DmEnvWorld(GymWorld):
    """A world of independent agents, each with its own dm_env (see the module doc)."""

    kind = "dm_env"
    agent_class = DmEnvAgent

    def _describe(self, env: Any, recipe: Mapping[str, Any], seed: int | None) -> AgentInterface:
        rgb = rgb_shape(self.factory, env, recipe, seed)
        who = self.factory.name
        scalars = {REWARD: _scalar_spec(env.reward_spec, REWARD, who),
                   DISCOUNT: _scalar_spec(env.discount_spec, DISCOUNT, who)}
        dm = env.dm_env
        interface = AgentInterface(env.observation_space, env.action_space, rgb, who=who, scalar_specs=scalars,
                                   dm_specs={"observation": dm.observation_spec(), "action": dm.action_spec(),
                                             "reward": env.reward_spec, "discount": env.discount_spec})
        say_losses(self.factory, interface)
        return interface
