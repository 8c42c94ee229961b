"""TextWorld games generated locally by the `textworld` package (`game`) and their
`Environment` (`environment`)."""
