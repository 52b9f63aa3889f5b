# Catch: a ball falls from a random column; move the paddle under it.
# Observation [ball_x, ball_y, paddle_x] in [0, 1]; reward +1 on a catch, -1 on a miss,
# done when the ball reaches the bottom. Discrete action [0 left, 1 stay, 2 right], or with
# `continuous` a Box action [v] in [-1, 1]: the paddle's velocity.
extends "res://gym_client.gd"

export var continuous := false
# Simulated seconds the ball takes to fall; paddle speed in widths per second; half width.
export var fall_time := 0.5
export var paddle_speed := 1.5
export var paddle_half := 0.1

var ball := Vector2(0.5, 0.0)
var paddle_x := 0.5
var velocity := 0.0


func _gym_reset(game_seed) -> Array:
	if game_seed == null:
		rng.randomize()
	else:
		rng.seed = int(game_seed)
	ball = Vector2(rng.randf_range(0.05, 0.95), 0.0)
	paddle_x = 0.5
	velocity = 0.0
	update()
	return _gym_observation()


func _gym_action(action: Array) -> void:
	if continuous:
		velocity = clamp(float(action[0]), -1.0, 1.0)
	else:
		velocity = float(int(action[0]) - 1)


func _gym_frame(delta: float) -> void:
	paddle_x = clamp(paddle_x + velocity * paddle_speed * delta, 0.0, 1.0)
	ball.y = min(ball.y + delta / fall_time, 1.0)
	if ball.y >= 1.0:
		done = true
		reward = 1.0 if abs(ball.x - paddle_x) <= paddle_half else -1.0


func _gym_observation() -> Array:
	return [ball.x, ball.y, paddle_x]


func _draw() -> void:
	var size := get_viewport_rect().size
	draw_circle(Vector2(ball.x * size.x, ball.y * size.y * 0.9), size.x * 0.05, Color(1.0, 0.6, 0.1))
	var half := paddle_half * size.x
	draw_rect(Rect2(paddle_x * size.x - half, size.y * 0.93, 2 * half, size.y * 0.05), Color(0.3, 0.8, 1.0))
