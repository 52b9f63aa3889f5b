"""Where env code runs: worker threads that keep each env's calls in order, envs in worker
processes, and the one thread on which an env renders."""
