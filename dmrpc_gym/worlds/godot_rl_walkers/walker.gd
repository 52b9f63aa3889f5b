# One agent of Walkers: it walks on a line in [-5, 5] toward a goal. The Sync node (sync.gd)
# drives it: tick() each physics frame of an action, and the protocol's get_obs/get_reward/...
#
# Observation: "position" box [x, goal - x] in [-5, 5]; "zone" discrete 3 (the third of the
# line it stands in); "line_2d" a 2x10x1 uint8 image (row 0: its cell, row 1: the goal's).
# Action: "move" continuous 1 (velocity, -1..1); "run" discrete 2 (1: twice as fast, at a cost).
# Reward per step: -0.1 * |goal - x| - 0.05 * run, +10 on reaching the goal (then done);
# an episode also ends (done) after 40 steps. Goals come from the game's seeded generator.
extends Node

export var policy_name := "walker"
export var start_cell := 0

var sync: Node = null
var x := 0.0
var goal := 0.0
var velocity := 0.0
var running := 0
var reward := 0.0
var done := false
var steps := 0
var episodes := 0


func reset() -> void:
	x = -4.5 + start_cell
	goal = sync.rng.randf_range(-4.5, 4.5)
	velocity = 0.0
	running = 0
	reward = 0.0
	done = false
	steps = 0
	episodes += 1


func tick(_delta: float) -> void:
	# One physics frame with the current action (frames, not seconds: deterministic).
	x = clamp(x + velocity * (2.0 if running == 1 else 1.0) * 0.02, -5.0, 5.0)


func get_obs_space() -> Dictionary:
	return {
		"position": {"space": "box", "size": [2], "low": -5.0, "high": 5.0},
		"zone": {"space": "discrete", "size": 3},
		"line_2d": {"space": "box", "size": [2, 10, 1]},
	}


func get_action_space() -> Dictionary:
	return {
		"move": {"size": 1, "action_type": "continuous"},
		"run": {"size": 2, "action_type": "discrete"},
	}


func _cell(value: float) -> int:
	return int(clamp(floor(value + 5.0), 0, 9))


func get_obs() -> Dictionary:
	var image := PoolByteArray()
	image.resize(20)
	for i in range(20):
		image[i] = 0
	image[_cell(x)] = 255
	image[10 + _cell(goal)] = 255
	return {
		"position": [x, clamp(goal - x, -5.0, 5.0)],
		"zone": int(clamp(floor((x + 5.0) / (10.0 / 3.0)), 0, 2)),
		"line_2d": image.hex_encode(),
	}


func set_action(action: Dictionary) -> void:
	velocity = clamp(float(action["move"][0]), -1.0, 1.0)
	running = int(action["run"])
	steps += 1


func end_step() -> void:
	# The step's reward and whether the episode ended, once its frames have run.
	reward += -0.1 * abs(goal - x) - 0.05 * running
	if abs(goal - x) < 0.3:
		reward += 10.0
		done = true
	elif steps >= 40:
		done = true


func get_reward() -> float:
	return reward


func get_done() -> bool:
	return done


func zero_reward() -> void:
	reward = 0.0


# Methods the protocol's `call` reaches (a per-agent list of returns).
func get_episodes() -> int:
	return episodes


func get_goal() -> float:
	return goal


func get_time_scale() -> float:
	return Engine.time_scale
