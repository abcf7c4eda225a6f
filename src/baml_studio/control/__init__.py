"""The control plane ("Boundary"): configuration, identity and allowlisted public facts.

It holds tenants, projects, environments, deployments, tokens, catalog versions and the active
projection generation in the metastore (:mod:`.metastore`), public facts in ClickHouse
(:mod:`.facts`), and answers the workload API of ``openapi.yaml`` (:mod:`.app`). It never holds
a value and never opens a connection into the data plane. See ``docs/control-plane.md``.
"""
