"""A run's parts that tie the others together: its config, its directory, the task pool, the
rollouts and the reward model's judging."""
