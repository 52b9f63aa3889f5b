# The game side of the Godot RL Agents protocol, for Godot 3.2: connects to the Python side over
# TCP (each message a 4-byte little-endian length and UTF-8 JSON), answers env_info, reset,
# action (with a step after action_repeat physics frames), call and close. The agents are the
# nodes of group "AGENT", in tree order.
#
# Command line: --port=P --env_seed=S --action_repeat=N --speedup=X (each optional), and
# --agents=N to play with the first N agents only (--agents=1: a one-agent game), and
# --frame_cost_usec=U to spend U microseconds of CPU on each physics frame of an action (standing
# for the physics of a larger game, in benchmarks).
# An agent whose step ends with done resets itself before its observation is taken, so that
# observation is its next episode's (the protocol's rule).
extends Node

const MAJOR_VERSION := "0"
const MINOR_VERSION := "7"

var port := 11008
var seed_value := 0
var action_repeat := 8
var speedup := 1.0
var agents_wanted := 0
var frame_cost_usec := 0
var rng := RandomNumberGenerator.new()

var _stream := StreamPeerTCP.new()
var _agents := []
var _connected := false
var _frames_left := 0
var _reply_reset := false


func _ready() -> void:
	for arg in OS.get_cmdline_args():
		var parts: PoolStringArray = arg.split("=", true, 1)
		if parts.size() != 2:
			continue
		match parts[0]:
			"--port": port = int(parts[1])
			"--env_seed": seed_value = int(parts[1])
			"--action_repeat": action_repeat = max(1, int(parts[1]))
			"--speedup": speedup = max(0.01, float(parts[1]))
			"--agents": agents_wanted = max(1, int(parts[1]))
			"--frame_cost_usec": frame_cost_usec = max(0, int(parts[1]))
	# Arguments are read first, then applied (the speedup takes effect).
	Engine.iterations_per_second = int(round(60 * speedup))
	Engine.time_scale = speedup
	rng.seed = seed_value
	_agents = get_tree().get_nodes_in_group("AGENT")
	while agents_wanted > 0 and _agents.size() > agents_wanted:
		var extra = _agents.pop_back()
		extra.remove_from_group("AGENT")
		extra.queue_free()
	for agent in _agents:
		agent.sync = self
		agent.reset()
	print("walkers: seed %d, action_repeat %d, speedup %s, port %d" % [seed_value, action_repeat, speedup, port])
	_connected = _connect()
	if not _connected:
		printerr("walkers: no Python side on port %d; quitting" % port)
		get_tree().quit(2)
		return
	var handshake := _receive()
	if handshake.get("type") != "handshake":
		_fail("expected a handshake, got %s" % str(handshake))
		return
	if handshake.get("major_version") != MAJOR_VERSION:
		print("walkers: the Python side speaks version %s.%s, this game %s.%s" % [
			handshake.get("major_version"), handshake.get("minor_version"), MAJOR_VERSION, MINOR_VERSION])
	var env_info := _receive()
	if env_info.get("type") != "env_info":
		_fail("expected env_info, got %s" % str(env_info))
		return
	var names := []
	for agent in _agents:
		names.append(agent.policy_name)
	_send({"type": "env_info", "observation_space": _agents[0].get_obs_space(),
		"action_space": _agents[0].get_action_space(), "n_agents": _agents.size(),
		"agent_policy_names": names})
	_handle_messages()


func _connect() -> bool:
	if _stream.connect_to_host("127.0.0.1", port) != OK:
		return false
	var waited := 0
	while _stream.get_status() == StreamPeerTCP.STATUS_CONNECTING and waited < 5000:
		OS.delay_msec(5)
		waited += 5
	if _stream.get_status() != StreamPeerTCP.STATUS_CONNECTED:
		return false
	_stream.set_no_delay(true)
	return true


func _fail(why: String) -> void:
	printerr("walkers: " + why)
	_connected = false
	get_tree().quit(3)


func _send(message: Dictionary) -> void:
	_stream.put_utf8_string(to_json(message))


func _receive() -> Dictionary:
	# Blocks until a whole message came; an empty Dictionary when the Python side has gone.
	while _stream.get_available_bytes() < 4:
		if _stream.get_status() != StreamPeerTCP.STATUS_CONNECTED:
			return {}
		OS.delay_usec(50)
	var text: String = _stream.get_utf8_string()
	var parsed = parse_json(text)
	if typeof(parsed) != TYPE_DICTIONARY:
		return {"type": "invalid", "text": text}
	return parsed


func _observations() -> Array:
	var obs := []
	for agent in _agents:
		obs.append(agent.get_obs())
	return obs


func _physics_process(delta: float) -> void:
	if not _connected:
		return
	if _reply_reset:
		_reply_reset = false
		_send({"type": "reset", "obs": _observations()})
		_handle_messages()
		return
	if _frames_left <= 0:
		return
	for agent in _agents:
		agent.tick(delta)
	if frame_cost_usec > 0:
		var until := OS.get_ticks_usec() + frame_cost_usec
		while OS.get_ticks_usec() < until:
			pass
	_frames_left -= 1
	if _frames_left > 0:
		return
	var rewards := []
	var dones := []
	for agent in _agents:
		agent.end_step()
		rewards.append(agent.get_reward())
		dones.append(agent.get_done())
		agent.zero_reward()
		if agent.get_done():
			agent.reset()
	_send({"type": "step", "obs": _observations(), "reward": rewards, "done": dones})
	_handle_messages()


func _handle_messages() -> void:
	# Read messages until one needs physics frames (reset, action), or the game quits.
	while true:
		var message := _receive()
		var kind = message.get("type")
		if kind == null:
			print("walkers: the Python side has gone; quitting")
			_connected = false
			get_tree().quit(0)
			return
		elif kind == "close":
			_connected = false
			get_tree().quit(0)
			return
		elif kind == "reset":
			for agent in _agents:
				agent.reset()
			_reply_reset = true
			return
		elif kind == "action":
			var actions: Array = message["action"]
			for i in range(_agents.size()):
				_agents[i].set_action(actions[i])
			_frames_left = action_repeat
			return
		elif kind == "call":
			var returns := []
			for agent in _agents:
				returns.append(agent.call(message["method"]) if agent.has_method(message["method"]) else null)
			_send({"type": "call", "returns": returns})
		else:
			_fail("unexpected message %s" % str(message))
			return
