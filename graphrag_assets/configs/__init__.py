"""Every launch-time setting, by what it configures: `index` (each index step), `queries` (each query method),
`evaluation` (the paper's evaluation and prompt tuning). Resources (endpoints, the store) are in resources.py, and
the project's paths in settings.py. docs/settings.md lists them all (settings_reference.py writes it)."""
