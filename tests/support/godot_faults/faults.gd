# A GymGodot client that fails in the way --fault=MODE says:
#   quit       exits with code 3 before connecting
#   idle       never connects
#   malformed  answers steps with text that is not JSON
#   missing    answers steps without "done"
#   exit       exits when asked to step (mid-episode)
#   silent     never answers steps
# Resets are always answered with {"init_observation": [0.5, 0.5, 0.5]}.
extends Node

var fault := ""
var port := 8000
var client := WebSocketClient.new()


func _ready() -> void:
	for arg in OS.get_cmdline_args():
		if arg.begins_with("--fault="):
			fault = arg.split("=", true, 1)[1]
		elif arg.begins_with("--serverPort="):
			port = int(arg.split("=", true, 1)[1])
	print("faults: mode ", fault)
	if fault == "quit":
		printerr("faults: giving up before connecting")
		get_tree().quit(3)
		return
	if fault == "idle":
		print("faults: idling, never connecting")
		return
	client.connect("connection_established", self, "_on_connected")
	client.connect("connection_closed", self, "_on_closed")
	client.connect("connection_error", self, "_on_error")
	client.connect("data_received", self, "_on_data")
	client.connect_to_url("ws://127.0.0.1:%d" % port)


func _process(_delta: float) -> void:
	client.poll()


func _on_connected(_protocol: String) -> void:
	client.get_peer(1).set_write_mode(WebSocketPeer.WRITE_MODE_TEXT)


func _on_closed(_clean: bool) -> void:
	get_tree().quit(0)


func _on_error() -> void:
	get_tree().quit(1)


func _on_data() -> void:
	var message: Dictionary = JSON.parse(client.get_peer(1).get_packet().get_string_from_utf8()).result
	var cmd = message.get("cmd")
	if cmd == "reset":
		_send(to_json({"init_observation": [0.5, 0.5, 0.5]}))
	elif cmd == "step":
		if fault == "malformed":
			_send("{observation: [0.5, oops")
		elif fault == "missing":
			_send(to_json({"observation": [0.5, 0.5, 0.5], "reward": 1.0}))
		elif fault == "exit":
			printerr("faults: exiting mid-episode")
			get_tree().quit(4)
		elif fault == "silent":
			print("faults: not answering this step")
	elif cmd == "close":
		get_tree().quit(0)


func _send(text: String) -> void:
	client.get_peer(1).put_packet(text.to_utf8())
