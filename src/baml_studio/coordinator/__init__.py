"""The query coordinator (issue 7): ``POST /v1/query`` and background jobs over the control
plane's public facts and the Lance private datasets; map in ``docs/coordinator.md``."""
