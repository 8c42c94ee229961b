"""ALFWorld's games through the `alfworld` package, with data the user downloads (`game`), and
their `Environment` (`environment`)."""
