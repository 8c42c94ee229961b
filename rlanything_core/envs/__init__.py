"""Environments: the `Environment` interface (`interface`), what text games share (`common`,
`text`, `demos`, `rewriting`), and one package per built-in environment."""
