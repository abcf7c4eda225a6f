"""baml-studio: the BAML Studio data system in Python.

Packages:
    format     pure byte codecs of the profiles-v1 store (segments, records, CAS, values)
    store      the local store: atomic publication, locks, usage ledger, disk budget, reader
    profiler   the in-process profiler that records BAML calls into the store
    workload   the seeded synthetic BAML-like workload behind ``baml-studio demo``
    catalog    catalog v1: relations, the public/private split, the fold, the local source
    query      the SQL engine on DataFusion: rows, then one typed outcome
    objectstore  the object store port: directory bucket and S3; S3 event notifications
    queue      the projection queue port: SQLite and SQS
    gateway    the data plane's upload gateway (publisher config, authorize, presigned PUTs)
    publisher  ships closed store files to the bucket through the gateway
    cli        the ``baml-studio`` command (``cli_*.py`` hold its command groups)
"""

__version__ = "0.1.0"
