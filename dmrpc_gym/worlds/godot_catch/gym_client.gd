# A client of the GymGodot JSON protocol: connects to the Python side (the websocket
# server), runs its commands and answers them. A game extends this script and fills in
# the _gym_* functions; it sets `reward` and `done` in _gym_frame.
#
# Command line (after the scene): --serverIP=127.0.0.1 --serverPort=8000 --renderPath=DIR/
# Messages: {"cmd": "reset", "seed": s} -> {"init_observation": [...]}
#           {"cmd": "step", "action": [...]} -> {"observation": [...], "reward": r, "done": b}
#           {"cmd": "render"} -> {"render_error": "0"} after saving <renderPath><n>.png
#           {"cmd": "close"} -> the game quits (it also quits when the connection drops)
extends Node2D

# Physics frames one step lasts.
export var frames_per_step := 2
# While no command came for idle_after_usec, each loop sleeps a tenth of the time waited so
# far (at most idle_sleep_max_usec), so that a waiting game does not spin a core and a game
# that has waited long adds little latency to the next command.
export var idle_after_usec := 1000
export var idle_sleep_max_usec := 20000

var reward := 0.0
var done := false
var rng := RandomNumberGenerator.new()

var _client := WebSocketClient.new()
var _server_ip := "127.0.0.1"
var _server_port := 8000
var _render_path := "./render_frames/"
var _frames_left := 0
var _frame_count := 0
var _last_command_usec := 0
var _connected := false
var _render_pending := false


# Reset the game (seed is an int or null) and return the first observation (an Array).
func _gym_reset(_seed) -> Array:
	return []


# Take the step's action (an Array: [a] for a Discrete space).
func _gym_action(_action: Array) -> void:
	pass


# Advance one physics frame of delta seconds; add to `reward`, set `done`.
func _gym_frame(_delta: float) -> void:
	pass


# The current observation (an Array).
func _gym_observation() -> Array:
	return []


func _ready() -> void:
	for arg in OS.get_cmdline_args():
		if arg.begins_with("--serverIP="):
			_server_ip = arg.split("=", true, 1)[1]
		elif arg.begins_with("--serverPort="):
			_server_port = int(arg.split("=", true, 1)[1])
		elif arg.begins_with("--renderPath="):
			_render_path = arg.split("=", true, 1)[1]
	_client.connect("connection_established", self, "_on_connected")
	_client.connect("connection_error", self, "_on_failed")
	_client.connect("connection_closed", self, "_on_closed")
	var url := "ws://%s:%d" % [_server_ip, _server_port]
	var err := _client.connect_to_url(url)
	if err != OK:
		printerr("gym_client: cannot connect to %s (error %d)" % [url, err])
		get_tree().quit(1)
	_last_command_usec = OS.get_ticks_usec()


func _physics_process(delta: float) -> void:
	if _render_pending:		# asked last frame: _draw has run since, the frame is current
		_render_pending = false
		_send({"render_error": str(_render())})
	_client.poll()
	# One command at a time, in order: the next is read only when this one is answered.
	while _connected and _frames_left == 0 and not _render_pending \
			and _client.get_peer(1).get_available_packet_count() > 0:
		_run(_client.get_peer(1).get_packet().get_string_from_utf8())
	if _frames_left > 0:
		_gym_frame(delta)
		_frames_left -= 1
		if _frames_left == 0 or done:
			_frames_left = 0
			_send({"observation": _gym_observation(), "reward": reward, "done": done})
	elif _connected:
		var waited := OS.get_ticks_usec() - _last_command_usec
		if waited > idle_after_usec:
			OS.delay_usec(int(min(waited / 10, idle_sleep_max_usec)))


func _on_connected(_protocol: String) -> void:
	_connected = true
	_client.get_peer(1).set_write_mode(WebSocketPeer.WRITE_MODE_TEXT)


func _on_failed() -> void:
	printerr("gym_client: could not connect to ws://%s:%d" % [_server_ip, _server_port])
	get_tree().quit(1)


func _on_closed(_was_clean: bool) -> void:
	_connected = false
	get_tree().quit(0)


func _run(text: String) -> void:
	_last_command_usec = OS.get_ticks_usec()
	var parsed := JSON.parse(text)
	if parsed.error != OK or typeof(parsed.result) != TYPE_DICTIONARY:
		printerr("gym_client: not a JSON object: " + text)
		return
	var message: Dictionary = parsed.result
	match message.get("cmd"):
		"reset":
			_frames_left = 0
			_frame_count = 0
			reward = 0.0
			done = false
			_send({"init_observation": _gym_reset(message.get("seed"))})
		"step":
			reward = 0.0
			_gym_action(message.get("action", []))
			_frames_left = int(max(frames_per_step, 1))
		"render":
			if OS.can_draw():
				_render_pending = true
				update()
			else:
				_send({"render_error": str(ERR_UNAVAILABLE)})
		"close":
			_connected = false
			_client.disconnect_from_host()
			get_tree().quit(0)
		_:
			printerr("gym_client: unknown command: " + text)


# Save the current frame as <renderPath><n>.png; a Godot error code (OK is 0).
func _render() -> int:
	VisualServer.force_draw(true, 0.0)
	var image := get_viewport().get_texture().get_data()
	image.flip_y()
	var err := image.save_png("%s%d.png" % [_render_path, _frame_count])
	_frame_count += 1
	return err


func _send(message: Dictionary) -> void:
	_client.get_peer(1).put_packet(to_json(message).to_utf8())
