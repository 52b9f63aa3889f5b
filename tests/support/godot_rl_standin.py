"""A stand-in for a Godot 4 game with the Godot RL Agents plugin: the game side of the protocol in
Python, run as its own process and connecting over TCP as a game does (Debian has no Godot 4).

It sends the newer message forms: spaces as a list (one per agent, here not all alike),
``agent_policy_names`` and ``info``. Three agents: ``chaser_0``, ``chaser_1``, ``runner_2``.
``--mode=`` misbehaves on purpose: ``crash`` exits (code 5) on the third action, ``silent``
stops answering on the third action, ``garbage`` sends a frame that is not JSON, ``legacy``
sends the Godot 3 forms (one shared space dict, no names, no info; three alike agents).

Deterministic: each agent's state starts from ``--env_seed`` and moves with its actions.
"""
from __future__ import annotations

import json
import random
import socket
import struct
import sys
import time


def args() -> dict:
    out = {"port": "11008", "env_seed": "0", "action_repeat": "8", "mode": ""}
    for arg in sys.argv[1:]:
        key, _, value = arg.lstrip("-").partition("=")
        out[key] = value
    return out


def send(sock: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    sock.sendall(struct.pack("<I", len(data)) + data)


def receive(sock: socket.socket) -> dict | None:
    def exactly(n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data
    head = exactly(4)
    if head is None:
        return None
    return json.loads(exactly(struct.unpack("<I", head)[0]))


CHASER_OBS = {"obs": {"space": "box", "size": [3], "low": -10, "high": 10}, "lane": {"space": "discrete", "size": 4}}
RUNNER_OBS = {"obs": {"space": "box", "size": [2]}, "eyes_2d": {"space": "box", "size": [2, 2, 3]}}
CHASER_ACT = {"turn": {"size": 3, "action_type": "discrete"}}
RUNNER_ACT = {"legs": {"size": 2, "action_type": "continuous"}}


def main() -> int:
    options = args()
    legacy = options["mode"] == "legacy"
    rng = random.Random(int(options["env_seed"]))
    repeat = int(options["action_repeat"])
    print(f"standin: mode {options['mode'] or 'normal'}, seed {options['env_seed']}, port {options['port']}", flush=True)
    sock = socket.create_connection(("127.0.0.1", int(options["port"])))
    hello = receive(sock)
    assert hello and hello["type"] == "handshake", hello
    request = receive(sock)
    assert request and request["type"] == "env_info", request
    if legacy:
        send(sock, {"type": "env_info", "observation_space": CHASER_OBS, "action_space": CHASER_ACT, "n_agents": 3})
    else:
        send(sock, {"type": "env_info", "observation_space": [CHASER_OBS, CHASER_OBS, RUNNER_OBS],
                    "action_space": [CHASER_ACT, CHASER_ACT, RUNNER_ACT], "n_agents": 3,
                    "agent_policy_names": ["chaser", "chaser", "runner"]})
    state = [0.0, 0.0, 0.0]
    steps = [0, 0, 0]

    def reset_agent(i: int) -> None:
        state[i] = round(rng.uniform(-1, 1), 6)
        steps[i] = 0

    def observe(i: int) -> dict:
        if i < 2 or legacy:
            return {"obs": [state[i], state[i] * 2, float(steps[i])], "lane": steps[i] % 4}
        shade = int((state[i] + 1) * 100) % 256
        return {"obs": [max(-1.0, min(1.0, state[i])), 0.5], "eyes_2d": bytes([shade] * 12).hex()}

    for i in range(3):
        reset_agent(i)
    actions_seen = 0
    while True:
        message = receive(sock)
        if message is None or message["type"] == "close":
            print("standin: closing", flush=True)
            return 0
        if message["type"] == "reset":
            for i in range(3):
                reset_agent(i)
            send(sock, {"type": "reset", "obs": [observe(i) for i in range(3)]})
        elif message["type"] == "call":
            send(sock, {"type": "call", "returns": [f"{message['method']}:{i}" for i in range(3)]})
        elif message["type"] == "action":
            actions_seen += 1
            if actions_seen == 3 and options["mode"] == "crash":
                print("standin: crashing mid-episode", flush=True)
                sock.close()
                return 5
            if actions_seen == 3 and options["mode"] == "silent":
                print("standin: no longer answering", flush=True)
                time.sleep(120)
            if actions_seen == 3 and options["mode"] == "garbage":
                data = b"this is not json"
                sock.sendall(struct.pack("<I", len(data)) + data)
                continue
            rewards, dones = [], []
            for i, action in enumerate(message["action"]):
                if "turn" in action:
                    state[i] += (action["turn"] - 1) * 0.25 * repeat / 8
                else:
                    state[i] += sum(action["legs"]) * 0.1
                steps[i] += 1
                rewards.append(round(-abs(state[i]), 6))
                dones.append(steps[i] >= 3 + i)
            obs = []
            for i in range(3):
                if dones[i]:
                    reset_agent(i)           # the game resets a done agent itself
                obs.append(observe(i))
            reply = {"type": "step", "obs": obs, "reward": rewards, "done": dones}
            if not legacy:
                reply["info"] = [{"steps": steps[i]} for i in range(3)]
            send(sock, reply)


if __name__ == "__main__":
    sys.exit(main())
