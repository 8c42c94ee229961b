"""The household environment: a text household in the style of ALFWorld, generated from a JSON
spec, with an expert planner (`world`) and its `Environment` (`environment`)."""
