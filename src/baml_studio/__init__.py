"""baml-studio: the BAML Studio data system in Python.

Packages:
    format     pure byte codecs of the profiles-v1 store (segments, records, CAS, values)
    store      the local store: atomic publication, locks, usage ledger, disk budget, reader
    profiler   the in-process profiler that records BAML calls into the store
    workload   the seeded synthetic BAML-like workload behind ``baml-studio demo``
    cli        the ``baml-studio`` command
"""

__version__ = "0.1.0"
