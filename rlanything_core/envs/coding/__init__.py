"""The coding environment: problems with tests run in the sandbox (`tasks`), built-in and
HumanEval problems (`problems`, `humaneval`), the reward model's unit tests (`unit_tests`),
warm-start demonstrations (`demos`) and its `Environment` (`environment`)."""
